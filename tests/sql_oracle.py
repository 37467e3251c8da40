"""The independent oracle of the SQL tests: two results directories and their rows read
without DuckDB, and the expected answer of every named query.

Every named query runs on two results directories (one written by real jobs of a tiny BERT,
one synthetic in the real schema for edge cases, see ``sql_fixtures``) and its numbers are
compared with an independent computation: the committed Parquet rows are found from the
commit records and read with pyarrow, and the statistics are plain loops, numpy and
``scipy.stats.spearmanr`` (average ranks for ties) — never DuckDB. The fixtures
(``real_root``, ``synth_root``, ``res``) are session-wide: tests/conftest.py builds them
with :func:`real_root` and :func:`synth_root`, on first use.
"""

from __future__ import annotations

import json
import math
import warnings
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from click.testing import CliRunner
from scipy.stats import spearmanr

import sql_fixtures as sf
from mixscope.cli import main
from mixscope.sql.named import expand, get_query, run_query
from mixscope.sql.views import connect

MEASURES = sf.MEASURES
ID_COLUMNS = ("doc_id", "segment", "position", "token_id", "token", "token_type", "is_special")
ID_COLUMNS += ("is_masked", "original_id")
ORD = {m: k for k, m in enumerate(MEASURES)}
CATEGORIES = ("cls", "mask", "normal", "other_special", "sep")
REFERENCES = ("ref_text", "ref_csv", "ref_parquet")
EVIL = "x'; DROP TABLE runs; --"


# -- the two results directories --------------------------------------------------------


def _invoke(*args: str, input: str | None = None):
    return CliRunner().invoke(main, list(args), input=input)


def _import_references(root: Path, folder: Path) -> dict[str, tuple[str, dict]]:
    """Import the three reference files with the CLI; name → (key kind, key → count)."""
    tokens: dict[int, str] = {}
    for path in sorted(root.glob("tokens/run_id=*/part-*.parquet")):
        for row in pq.read_table(path).to_pylist():
            tokens[row["token_id"]] = row["token"]
    files = sf.write_reference_files(folder, tokens)
    out = {}
    for name, (path, counts) in files.items():
        result = _invoke("frequencies", "import", str(root), str(path), "--name", name)
        assert result.exit_code == 0, result.output
        assert f"imported {len(counts):,} tokens as reference {name!r}" in result.stderr
        out[name] = ("token" if name == "ref_text" else "token_id", counts)
    return out


def real_root(tiny_bert_dir: str, tmp_path_factory: Any) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("real-results")
    run_ids = sf.build_real(tiny_bert_dir, root, tmp_path_factory.mktemp("real-corpus"))
    refs = _import_references(root, tmp_path_factory.mktemp("real-refs"))
    return {"root": str(root), "runs": run_ids, "refs": refs, "kind": "real"}


def synth_root(tmp_path_factory: Any) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("synthetic-results")
    info = sf.build_synthetic(root)
    refs = _import_references(root, tmp_path_factory.mktemp("synthetic-refs"))
    return {"root": str(root), "runs": info["runs"], "refs": refs, "kind": "synthetic", **info}


# -- the independent reader ---------------------------------------------------------------


def category_of(token: str, is_special: bool, is_masked: bool) -> str:
    if is_masked:
        return "mask"
    if not is_special:
        return "normal"
    return {"[CLS]": "cls", "[SEP]": "sep"}.get(token, "other_special")


class Rows:
    """Every committed token row of a results directory, read without DuckDB or mixscope."""

    def __init__(self, root: str) -> None:
        cols: dict[str, list] = defaultdict(list)
        # the string of each original id (a token only ever seen masked included), from the
        # corpus counts' files, partial or consolidated
        self.strings: dict[int, str] = {}
        for path in sorted(Path(root, "stats", "frequencies").rglob("*.parquet")):
            for row in pq.read_table(path).select(["token_id", "token"]).to_pylist():
                self.strings[row["token_id"]] = row["token"]
        self.freq: dict[str, dict[int, int]] = {}
        self.records: dict[str, dict] = {}
        for run_dir in sorted((Path(root) / "_mixscope" / "runs").iterdir()):
            run_id = run_dir.name
            self.records[run_id] = json.loads((run_dir / "run.json").read_text())
            counts: dict[int, int] = defaultdict(int)
            for commit in sorted((run_dir / "commits").glob("*.json")):
                files = json.loads(commit.read_text())["files"]
                # one row per token, each stored measure a list over the layers
                table = pq.read_table(Path(root, files["tokens"]["path"])).to_pylist()
                for row in table:
                    counts[row["original_id"]] += 1  # the corpus counts, before masking
                    for layer, a_w in enumerate(row["attn_w"], start=1):
                        for name in ID_COLUMNS:
                            cols[name].append(row[name])
                        cols["layer"].append(layer)
                        cols["run_id"].append(run_id)
                        for m in MEASURES:
                            source = a_w / 2 if m == "attnres_w" else row[m][layer - 1]
                            cols[m].append(source)
            if counts:
                self.freq[run_id] = dict(counts)
        self.n = len(cols["doc_id"])
        self.cols = cols
        self.run_id = np.array(cols["run_id"], dtype=object)
        self.layer = np.array(cols["layer"], dtype=np.int64)
        self.values = {m: np.array(cols[m], dtype=np.float32).astype(np.float64) for m in MEASURES}
        self.category = [
            category_of(t, s, k)
            for t, s, k in zip(cols["token"], cols["is_special"], cols["is_masked"], strict=True)
        ]
        self.runs = sorted(set(cols["run_id"]))

    def each_run(self, run_id: str | None = None) -> Iterator[tuple[str, np.ndarray]]:
        """(run id, mask of its rows) of every run, or of ``run_id`` alone: what a named
        query's ``run_id`` parameter selects."""
        for r in self.runs:
            if run_id is None or r == run_id:
                yield r, self.run_id == r

    def group(self, *keys: str, where=None) -> dict[tuple, list[int]]:
        """key tuple → row indices, in sorted key order."""
        out: dict[tuple, list[int]] = defaultdict(list)
        getters = [self.category if k == "category" else self.cols[k] for k in keys]
        for i in range(self.n):
            if where is None or where(i):
                out[tuple(g[i] for g in getters)].append(i)
        return dict(sorted(out.items()))

    def occurrences(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """One entry per token occurrence: its token, category and layer-averaged measures."""
        out = []
        for (rid, _doc, _seg, _pos), idx in self.group(
            "run_id", "doc_id", "segment", "position"
        ).items():
            if run_id is not None and rid != run_id:
                continue
            i = idx[0]
            out.append(
                {
                    "run_id": rid,
                    "token_id": self.cols["token_id"][i],
                    "token": self.cols["token"][i],
                    # the frequency analysis ranks an occurrence by its original token
                    "original_id": self.cols["original_id"][i],
                    "original": self.strings[self.cols["original_id"][i]],
                    "category": self.category[i],
                    **{m: float(np.mean(self.values[m][idx])) for m in MEASURES},
                }
            )
        return out


_ROWS: dict[str, Rows] = {}


def rows_of(res: dict) -> Rows:
    if res["root"] not in _ROWS:
        _ROWS[res["root"]] = Rows(res["root"])
    return _ROWS[res["root"]]


# -- helpers ------------------------------------------------------------------------------


def run(root: str, name: str, **params: Any) -> tuple[list[str], list[tuple]]:
    cur = run_query(connect(root), name, params)
    return [d[0] for d in cur.description], cur.fetchall()


def mean(xs) -> float:
    return float(np.mean(np.asarray(xs, dtype=np.float64)))


def rho(x, y) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # constant input: nan, as it should be
        value = spearmanr(np.asarray(x, np.float64), np.asarray(y, np.float64))[0]
    return float(value)


def rho_bound(values, measure: str) -> float:
    """The bound the Spearman queries report, from first principles: values binned on the
    grid, each bin's count c and mean rank r; s² = Σ c (c² - 1) / (12 Σ c (r - (n+1)/2)²).
    attnres_w = attn_w / 2 is binned as attn_w (its source: the same ranks)."""
    from mixscope.store.schema import HIST_BINS

    v = np.asarray(values, np.float64) * (2.0 if measure == "attnres_w" else 1.0)
    b = np.clip(np.floor(v * HIST_BINS), 0, HIST_BINS - 1)
    _, counts = np.unique(b, return_counts=True)
    c = counts.astype(np.float64)
    r = np.cumsum(c) - (c - 1) / 2
    syy = float(np.sum(c * (r - (len(v) + 1) / 2) ** 2))
    if syy == 0:
        return float("nan")
    s2 = float(np.sum(c * (c * c - 1))) / (12 * syy)
    return math.sqrt(s2) + s2 / 2


def same(got: Any, want: Any) -> bool:
    if isinstance(want, float) or isinstance(got, float):
        if want is None or got is None:
            return sf.nan_or_none(got) and sf.nan_or_none(want)
        if math.isnan(want) or math.isnan(got):
            return math.isnan(want) and math.isnan(got)
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12)
    return got == want


def assert_rows(columns: list[str], got: list[tuple], want: list[tuple], name: str) -> None:
    """Exact row count, same order, every value equal (floats to 1e-9 relative)."""
    assert len(got) == len(want), f"{name}: {len(got)} rows, expected {len(want)}"
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        for c, gv, wv in zip(columns, g, w, strict=False):
            assert same(gv, wv), f"{name} row {k} column {c}: got {gv!r}, expected {wv!r}\n{g}"


def rank_maps(res: dict, rows: Rows, reference: str | None):
    """(key column, run_id → key → frequency rank) for the run's own counts or a reference."""
    if reference is None:
        return "token_id", {r: sf.competition_ranks(c) for r, c in rows.freq.items()}
    key, counts = res["refs"][reference]
    ranks = sf.competition_ranks(counts)
    return key, {r: ranks for r in rows.runs}


# -- every named query against an independent computation ----------------------------------


def expect_summary(rows: Rows, run_id=None):
    out = []
    for r, sel in rows.each_run(run_id):
        for m in MEASURES:
            v = rows.values[m][sel]
            out.append((r, m, mean(v), float(v.max()), float(v.min()), int(sel.sum())))
    return out


def expect_layer_profile(rows: Rows, run_id=None):
    per_layer = rows.group("run_id", "layer")
    per_seq = rows.group("run_id", "layer", "doc_id", "segment")
    out = []
    for (r, layer), idx in per_layer.items():
        if run_id is not None and r != run_id:
            continue
        seqs = [ix for (r2, l2, _d, _s), ix in per_seq.items() if (r2, l2) == (r, layer)]
        for m in MEASURES:
            v = rows.values[m]
            seq_mean = mean([mean(v[ix]) for ix in seqs])
            out.append((r, layer, m, mean(v[idx]), seq_mean, len(idx)))
    return out


def expect_layer_summary(rows: Rows, run_id=None):
    return [
        (r, layer, len(idx), *(mean(rows.values[m][idx]) for m in MEASURES))
        for (r, layer), idx in rows.group("run_id", "layer").items()
        if run_id is None or r == run_id
    ]


def expect_token_types(rows: Rows, run_id=None):
    per_seq = rows.group("run_id", "layer", "category", "doc_id", "segment")
    cells: dict[tuple, list[list[int]]] = defaultdict(list)
    for (r, layer, cat, _d, _s), idx in per_seq.items():
        cells[(r, layer, cat)].append(idx)
    out = []
    for (r, layer, cat), seqs in cells.items():
        if run_id is not None and r != run_id:
            continue
        for m in MEASURES:
            v = rows.values[m]
            out.append((r, layer, m, cat, mean([mean(v[ix]) for ix in seqs]), sum(map(len, seqs))))
    return sorted(out, key=lambda t: (t[0], t[1], ORD[t[2]], t[3]))


def _joined(res, rows, run_id, reference):
    key, ranks = rank_maps(res, rows, reference)
    by_run: dict[str, list[tuple[int, dict]]] = defaultdict(list)
    original = {"token_id": "original_id", "token": "original"}[key]
    for occ in rows.occurrences(run_id):  # a masked one under the token it replaced
        rank = ranks.get(occ["run_id"], {}).get(occ[original])
        if rank is not None:  # tokens missing from the table are left out
            by_run[occ["run_id"]].append((rank, occ))
    return dict(sorted(by_run.items()))


def expect_frequency_correlation(res, rows: Rows, run_id=None, reference=None):
    out = []
    for r, joined in _joined(res, rows, run_id, reference).items():
        ranks = [k for k, _ in joined]
        plain = [(k, o) for k, o in joined if o["category"] not in ("cls", "sep")]
        for m in MEASURES:
            rho_all = rho(ranks, [o[m] for _, o in joined])
            rho_ns = rho([k for k, _ in plain], [o[m] for _, o in plain])
            bounds = [rho_bound([o[m] for _, o in subset], m) for subset in (joined, plain)]
            bound = max(bounds) if not any(math.isnan(b) for b in bounds) else float("nan")
            out.append((r, m, rho_all, rho_ns, len(joined), len(plain), bound))
    return out


def expect_frequency_bins(res, rows: Rows, run_id=None, reference=None, per_decade=4):
    out = []
    for r, joined in _joined(res, rows, run_id, reference).items():
        for m in MEASURES:
            bins: dict[int, list[float]] = defaultdict(list)
            for rank, occ in joined:
                bins[sf.log_bin(rank, per_decade)].append(occ[m])
            for b in sorted(bins):
                lo, hi = 10 ** (b / per_decade), 10 ** ((b + 1) / per_decade)
                out.append((r, m, b, lo, hi, mean(bins[b]), len(bins[b])))
    return out


def expect_depth_correlation(rows: Rows, run_id=None):
    out = []
    for r, sel in rows.each_run(run_id):
        for m in MEASURES:
            values = rows.values[m][sel]
            out.append((r, m, rho(rows.layer[sel], values), int(sel.sum()), rho_bound(values, m)))
    return out


def expect_checkpoint_trend(rows: Rows, model=None):
    """A name over several corpora: one series per corpus, labelled "name [paths]"."""
    stepped = {r: rec for r, rec in rows.records.items() if rec["step"] is not None}
    corpora: dict[str, set] = {}
    for rec in stepped.values():
        corpora.setdefault(rec["name"], set()).add(rec["corpus"]["fingerprint"])

    def label(rec):
        if len(corpora[rec["name"]]) == 1:
            return rec["name"]
        return f"{rec['name']} [{', '.join(rec['corpus']['paths'])}]"

    out = []
    for (r, layer), idx in rows.group("run_id", "layer").items():
        rec = stepped.get(r)
        if rec is None or (model is not None and rec["name"] != model):
            continue
        for m in MEASURES:
            out.append((label(rec), rec["step"], r, layer, m, mean(rows.values[m][idx]), len(idx)))
    return sorted(out, key=lambda t: (t[0], t[1], t[3], ORD[t[4]]))


def expect_compare_runs(rows: Rows, a: str, b: str):
    per_layer = rows.group("run_id", "layer")
    layers = sorted({layer for (r, layer) in per_layer if r in (a, b)})
    out = []
    for layer in layers:
        ia, ib = per_layer.get((a, layer)), per_layer.get((b, layer))
        for m in MEASURES:
            ma = mean(rows.values[m][ia]) if ia else None
            mb = mean(rows.values[m][ib]) if ib else None
            diff = mb - ma if ia and ib else None
            out.append((layer, m, ma, mb, diff, len(ia) if ia else None, len(ib) if ib else None))
    return out


def expect_compare_token_types(rows: Rows, a: str, b: str):
    """Brute force from the per-token rows: token means per layer, measure and category."""
    cells = rows.group("run_id", "layer", "category")
    keys = sorted({(layer, cat) for (r, layer, cat) in cells if r in (a, b)})
    out = []
    for layer, cat in keys:
        ia, ib = cells.get((a, layer, cat)), cells.get((b, layer, cat))
        for m in MEASURES:
            ma = mean(rows.values[m][ia]) if ia else None
            mb = mean(rows.values[m][ib]) if ib else None
            diff = mb - ma if ia and ib else None
            out.append(
                (layer, m, cat, ma, mb, diff, len(ia) if ia else None, len(ib) if ib else None)
            )
    return sorted(out, key=lambda t: (t[0], ORD[t[1]], t[2]))


def expect_top_tokens(rows: Rows, run_id=None, min_count=20, k=10):
    out = []
    for r, _ in rows.each_run(run_id):
        per_token = rows.group("token_id", where=lambda i, r=r: rows.run_id[i] == r)
        stats = []
        for tid, idx in per_token.items():
            occurrences = {
                (rows.cols["doc_id"][i], rows.cols["segment"][i], rows.cols["position"][i])
                for i in idx
            }
            if len(occurrences) >= min_count:
                means = {m: mean(rows.values[m][idx]) for m in MEASURES}
                stats.append((tid[0], rows.cols["token"][idx[0]], len(occurrences), means))
        for m in sorted(MEASURES):  # ordered by measure name, then direction
            high = sorted(stats, key=lambda s: (-s[3][m], s[0]))[:k]
            low = sorted(stats, key=lambda s: (s[3][m], s[0]))[:k]
            for direction, chosen in (("highest", high), ("lowest", low)):
                for n, (tid, tok, count, means) in enumerate(chosen, 1):
                    out.append((r, m, direction, n, tok, tid, means[m], count))
    return out


def _contract(name: str) -> list[str]:
    """A query's ``columns`` header, its measure lists expanded (these roots: the paper's)."""
    stored = [m for m in MEASURES if m != "attnres_w"]
    return expand(", ".join(get_query(name).columns), list(MEASURES), stored).split(", ")


def _check(res, name, want, **params):
    columns, got = run(res["root"], name, **params)
    contract = _contract(name)
    assert columns[: len(contract)] == contract, (name, columns)
    assert_rows(columns, got, want, f"{name} {params}")
    return got


RHO_COLUMNS = {"rho", "rho_all", "rho_no_special"}


def _check_rho(res, name, want, **params):
    """A Spearman query from histograms: exact where no bin holds two distinct values (the
    synthetic data, multiples of 1/8), else every rho within the bound, which is checked
    against its own independent computation."""
    if res["kind"] == "synthetic":
        return _check(res, name, want, **params)
    columns, got = run(res["root"], name, **params)
    assert columns == _contract(name)
    assert len(got) == len(want), name
    bound = columns.index("bound")
    for g, w in zip(got, want, strict=True):
        assert 0 <= g[bound] < 0.05, g  # the bins are fine for these few hundred values
        for c, gv, wv in zip(columns, g, w, strict=True):
            if c in RHO_COLUMNS and not sf.nan_or_none(wv):
                assert abs(gv - wv) <= g[bound] + 1e-12, (name, c, g, w)
            else:
                assert same(gv, wv), (name, c, g, w)
    return got
