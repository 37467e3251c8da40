"""The SQL analysis layer (issue 4): views, named queries, read-only SQL, parameters, CLI.

Every named query runs on two results directories (one written by real jobs of a tiny BERT,
one synthetic in the real schema for edge cases, see ``sql_fixtures``) and its numbers are
compared with an independent computation: the committed Parquet rows are found from the
commit records and read with pyarrow, and the statistics are plain loops, numpy and
``scipy.stats.spearmanr`` (average ranks for ties) — never DuckDB.
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
import math
import shutil
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from scipy.stats import spearmanr

import sql_fixtures as sf
from mixscope.cli import main
from mixscope.errors import MixscopeError
from mixscope.sql.named import REQUIRED, all_queries, get_query, run_query
from mixscope.sql.readonly import execute
from mixscope.sql.views import connect
from mixscope.store.layout import Layout
from mixscope.store.manifest import record_failure
from mixscope.store.writer import parquet_bytes, write_parquet

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


@pytest.fixture(scope="module")
def real_root(tiny_bert_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("real-results")
    run_ids = sf.build_real(tiny_bert_dir, root, tmp_path_factory.mktemp("real-corpus"))
    refs = _import_references(root, tmp_path_factory.mktemp("real-refs"))
    return {"root": str(root), "runs": run_ids, "refs": refs, "kind": "real"}


@pytest.fixture(scope="module")
def synth_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("synthetic-results")
    info = sf.build_synthetic(root)
    refs = _import_references(root, tmp_path_factory.mktemp("synthetic-refs"))
    return {"root": str(root), "runs": info["runs"], "refs": refs, "kind": "synthetic", **info}


@pytest.fixture(params=["real", "synthetic"])
def res(request):
    return request.getfixturevalue("real_root" if request.param == "real" else "synth_root")


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


# -- the fixtures are what they claim to be ------------------------------------------------


def test_fixture_directories_cover_the_cases(real_root, synth_root):
    real = rows_of(real_root)
    assert len(real.runs) == 2 and real.runs == sorted(real_root["runs"])
    for r in real.runs:  # every category of a BERT run occurs, in more than one sequence
        cats = {c for c, rid in zip(real.category, real.run_id, strict=True) if rid == r}
        assert {"cls", "sep", "mask", "normal"} <= cats
    assert 1 in real.cols["token_type"]  # the pairs run
    assert max(real.cols["segment"]) >= 1  # a document longer than max_length
    assert set(real.layer.tolist()) == {1, 2}
    # some category is missing from some sequence (token_types must not count it there)
    seqs = real.group("run_id", "doc_id", "segment")
    assert any(
        {real.category[i] for i in idx} != {"cls", "sep", "mask", "normal"} for idx in seqs.values()
    )

    syn = rows_of(synth_root)
    assert syn.runs == sorted(synth_root["runs"])
    assert set(syn.category) == set(CATEGORIES)
    edge = syn.run_id == sf.EDGE_RUN
    assert np.all(syn.values["attnres_w"][edge] == 0.25)  # a constant column
    assert set(syn.layer[edge].tolist()) == {1, 2, 3}
    steps = {r: syn.records[r]["step"] for r in syn.runs}
    assert steps == {
        "ckpt-100": 100,
        "ckpt-200": 200,
        "ckpt-300": 300,
        "other-50": 50,
        "edge": None,
    }
    counts = syn.freq[sf.EDGE_RUN]
    assert len(set(counts.values())) < len(counts)  # frequency ties


# -- the views ------------------------------------------------------------------------------


def test_tokens_view_is_exactly_the_committed_rows(res):
    rows = rows_of(res)
    con = connect(res["root"])
    got = con.execute(
        "SELECT run_id, doc_id, segment, position, layer, token_id, token, token_type, "
        "is_special, is_masked, category, attn_w, attn_n, attnres_w, attnres_n, attnresln_n "
        "FROM tokens ORDER BY run_id, doc_id, segment, position, layer"
    ).fetchall()
    c = rows.cols
    want = sorted(
        (
            c["run_id"][i],
            c["doc_id"][i],
            c["segment"][i],
            c["position"][i],
            c["layer"][i],
            c["token_id"][i],
            c["token"][i],
            c["token_type"][i],
            c["is_special"][i],
            c["is_masked"][i],
            rows.category[i],
            *(float(rows.values[m][i]) for m in MEASURES),
        )
        for i in range(rows.n)
    )
    assert len(got) == rows.n
    assert got == want  # float32 → double is exact
    types = dict(con.execute("SELECT column_name, column_type FROM (DESCRIBE tokens)").fetchall())
    assert types["run_id"] == "VARCHAR" and types["category"] == "VARCHAR"
    assert types["layer"] == "SMALLINT" and types["attn_w"] == "FLOAT"


def test_occurrences_view(res):
    """The helper view: one row per token occurrence, measures averaged over the layers."""
    rows = rows_of(res)
    got = connect(res["root"]).execute(
        "SELECT run_id, token_id, token, category, attn_w, attn_n, attnres_w, attnres_n, "
        "attnresln_n FROM occurrences ORDER BY run_id, doc_id, segment, position"
    )
    want = [
        (o["run_id"], o["token_id"], o["token"], o["category"], *(o[m] for m in MEASURES))
        for o in rows.occurrences()
    ]
    assert_rows([d[0] for d in got.description], got.fetchall(), want, "occurrences")


def test_runs_view(res):
    rows = rows_of(res)
    got = connect(res["root"]).execute(
        "SELECT run_id, name, step, status, rows, tokens, shards_total, shards_done, corpus "
        "FROM runs ORDER BY run_id"
    )
    want = [
        (
            r,
            rec["name"],
            rec["step"],
            "complete",
            rec["rows"],
            rec["tokens"],
            rec["shards_total"],
            rec["shards_total"],
            ", ".join(rec["corpus"]["paths"]),
        )
        for r, rec in sorted(rows.records.items())
    ]
    assert got.fetchall() == want
    assert sum(w[4] for w in want) == rows.n


def test_frequencies_view_ranks_with_ties(res):
    rows = rows_of(res)
    con = connect(res["root"])
    got = con.execute(
        "SELECT run_id, token_id, count, rank FROM frequencies WHERE reference IS NULL "
        "ORDER BY run_id, token_id"
    ).fetchall()
    want = []
    for r in sorted(rows.freq):
        ranks = sf.competition_ranks(rows.freq[r])
        want += [(r, t, rows.freq[r][t], ranks[t]) for t in sorted(rows.freq[r])]
    assert got == want
    assert len({(w[0], w[3]) for w in want}) < len(want)  # ties share a rank
    for name, (key, counts) in res["refs"].items():
        ranks = sf.competition_ranks(counts)
        col = "token" if key == "token" else "token_id"
        got = con.execute(
            f"SELECT {col}, count, rank, run_id FROM frequencies WHERE reference = ? ORDER BY 1",
            [name],
        ).fetchall()
        assert got == [(k, counts[k], ranks[k], None) for k in sorted(counts)], name


# -- every named query against an independent computation ----------------------------------


def expect_summary(rows: Rows, run_id=None):
    out = []
    for r in rows.runs:
        if run_id is not None and r != run_id:
            continue
        sel = rows.run_id == r
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
    for occ in rows.occurrences(run_id):
        rank = ranks.get(occ["run_id"], {}).get(occ[key])
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
    for r in rows.runs:
        if run_id is not None and r != run_id:
            continue
        sel = rows.run_id == r
        for m in MEASURES:
            values = rows.values[m][sel]
            out.append((r, m, rho(rows.layer[sel], values), int(sel.sum()), rho_bound(values, m)))
    return out


def expect_checkpoint_trend(rows: Rows, model=None):
    out = []
    for (r, layer), idx in rows.group("run_id", "layer").items():
        rec = rows.records[r]
        if rec["step"] is None or (model is not None and rec["name"] != model):
            continue
        for m in MEASURES:
            out.append((rec["name"], rec["step"], r, layer, m, mean(rows.values[m][idx]), len(idx)))
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


def expect_top_tokens(rows: Rows, run_id=None, min_count=20, k=10):
    out = []
    for r in rows.runs:
        if run_id is not None and r != run_id:
            continue
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


def _check(res, name, want, **params):
    columns, got = run(res["root"], name, **params)
    contract = list(get_query(name).columns)
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
    assert columns == list(get_query(name).columns)
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


def test_every_named_query_is_checked_here():
    names = set(all_queries())
    assert names == {
        "summary",
        "layer_profile",
        "layer_summary",
        "token_types",
        "frequency_correlation",
        "frequency_correlation_exact",
        "frequency_bins",
        "depth_correlation",
        "checkpoint_trend",
        "compare_runs",
        "top_tokens",
    }
    for q in all_queries().values():
        assert q.description and q.columns and q.sql.lstrip().startswith("--"), q.name
        assert (Path(__file__).parents[1] / "queries" / f"{q.name}.sql").is_file(), q.name


def test_summary(res):
    rows = rows_of(res)
    got = _check(res, "summary", expect_summary(rows))
    assert len(got) == 5 * len(rows.runs)
    one = res["runs"][0]
    _check(res, "summary", expect_summary(rows, one), run_id=one)
    if res["kind"] == "synthetic":  # a constant column: mean = max = min
        edge = [g for g in got if g[0] == sf.EDGE_RUN and g[1] == "attnres_w"]
        assert edge and edge[0][2:5] == (0.25, 0.25, 0.25)


def test_layer_profile(res):
    rows = rows_of(res)
    got = _check(res, "layer_profile", expect_layer_profile(rows))
    assert len(got) == 5 * len(rows.group("run_id", "layer"))
    # the macro mean differs from the token-level mean when sequence lengths differ
    assert any(not math.isclose(g[3], g[4]) for g in got)
    one = res["runs"][-1]
    _check(res, "layer_profile", expect_layer_profile(rows, one), run_id=one)


def test_layer_summary(res):
    rows = rows_of(res)
    _check(res, "layer_summary", expect_layer_summary(rows))
    one = res["runs"][0]
    _check(res, "layer_summary", expect_layer_summary(rows, one), run_id=one)


def test_token_types(res):
    rows = rows_of(res)
    got = _check(res, "token_types", expect_token_types(rows))
    present = set(zip(rows.run_id, rows.layer, rows.category, strict=True))
    assert len(got) == 5 * len(present)
    one = res["runs"][0]
    _check(res, "token_types", expect_token_types(rows, one), run_id=one)


@pytest.mark.parametrize("reference", [None, *REFERENCES])
def test_frequency_correlation(res, reference):
    rows = rows_of(res)
    want = expect_frequency_correlation(res, rows, reference=reference)
    params = {} if reference is None else {"reference": reference}
    got = _check_rho(res, "frequency_correlation", want, **params)
    assert len(got) == 5 * len(rows.runs)
    assert any(not sf.nan_or_none(g[2]) and abs(g[2]) > 0.01 for g in got)
    if res["kind"] == "synthetic":  # the constant column has no rank correlation
        edge = [g for g in got if g[0] == sf.EDGE_RUN and g[1] == "attnres_w"]
        assert sf.nan_or_none(edge[0][2]) and sf.nan_or_none(edge[0][3])
    one = res["runs"][1]
    want_one = expect_frequency_correlation(res, rows, run_id=one, reference=reference)
    _check_rho(res, "frequency_correlation", want_one, run_id=one, **params)


@pytest.mark.parametrize("reference", [None, "ref_text"])
def test_frequency_correlation_exact(res, reference):
    rows = rows_of(res)
    exact = lambda want: [(*w[:-1], 0.0) for w in want]  # noqa: E731  no bound: exact
    want = expect_frequency_correlation(res, rows, reference=reference)
    params = {} if reference is None else {"reference": reference}
    _check(res, "frequency_correlation_exact", exact(want), **params)
    one = res["runs"][0]
    want_one = expect_frequency_correlation(res, rows, run_id=one, reference=reference)
    _check(res, "frequency_correlation_exact", exact(want_one), run_id=one, **params)


def test_frequency_correlation_ignores_other_references(res):
    """With a reference, each occurrence is joined once (not once per imported table)."""
    got = run(res["root"], "frequency_correlation", reference="ref_csv")[1]
    _, counts = res["refs"]["ref_csv"]
    rows = rows_of(res)
    n = sum(1 for o in rows.occurrences() if o["token_id"] in counts)
    assert sum(g[4] for g in got) == 5 * n


@pytest.mark.parametrize(("reference", "per_decade"), [(None, 4), (None, 1), ("ref_text", 3)])
def test_frequency_bins(res, reference, per_decade):
    rows = rows_of(res)
    want = expect_frequency_bins(res, rows, reference=reference, per_decade=per_decade)
    params: dict[str, Any] = {"bins_per_decade": str(per_decade)}  # as from --param
    if reference:
        params["reference"] = reference
    got = _check(res, "frequency_bins", want, **params)
    assert len({g[2] for g in got}) >= 2
    one = res["runs"][0]
    want = expect_frequency_bins(res, rows, run_id=one, reference=reference, per_decade=per_decade)
    _check(res, "frequency_bins", want, run_id=one, **params)


def test_frequency_bin_edges_are_exact(tmp_path):
    """Ranks 1, 10, 100, 1000 open a bin; 9, 99, 999 close the one before (any k)."""
    layout = Layout.open(str(tmp_path))
    # 1200 distinct tokens, ranked by a reference with strictly decreasing counts
    ids = list(range(1000, 2200))
    n = len(ids)
    seq = {
        "doc_id": 0,
        "segment": 0,
        "original_ids": ids,
        "token_id": ids,
        "token_type": [0] * n,
        "is_special": [False] * n,
        "is_masked": [False] * n,
    }
    rng = np.random.default_rng(3)
    sf.write_synthetic_run(
        layout, "edges", [sf.shard_arrays([seq], 1, rng)], name="edges", step=None
    )
    ref = tmp_path / "ref.csv"
    ref.write_text("token_id,count\n" + "".join(f"{t},{10_000 - k}\n" for k, t in enumerate(ids)))
    assert _invoke("frequencies", "import", str(tmp_path), str(ref), "--name", "e").exit_code == 0
    for k in (1, 2, 3, 4, 6):
        got = run(str(tmp_path), "frequency_bins", bins_per_decade=k, reference="e")[1]
        ns = {g[2]: g[6] for g in got if g[1] == "attn_w"}
        want: dict[int, int] = defaultdict(int)
        for rank in range(1, n + 1):
            want[sf.log_bin(rank, k)] += 1
        assert ns == dict(want), k


def test_depth_correlation(res):
    rows = rows_of(res)
    got = _check_rho(res, "depth_correlation", expect_depth_correlation(rows))
    assert len(got) == 5 * len(rows.runs)
    if res["kind"] == "synthetic":
        by = {(g[0], g[1]): g[2] for g in got}
        assert sf.nan_or_none(by[(sf.EDGE_RUN, "attnres_w")])  # constant
        assert by[("ckpt-100", "attn_n")] > 0.1  # the data grow with depth
    one = res["runs"][0]
    _check_rho(res, "depth_correlation", expect_depth_correlation(rows, one), run_id=one)


def test_checkpoint_trend(res):
    rows = rows_of(res)
    got = _check(res, "checkpoint_trend", expect_checkpoint_trend(rows))
    steps = [g[1] for g in got]
    if res["kind"] == "synthetic":
        model = sf.CKPT_MODEL
        assert {g[0] for g in got} == {sf.CKPT_MODEL, sf.OTHER_MODEL}
        assert len(got) == 5 * (3 * 2 + 1)  # 3 steps x 2 layers + 1 step x 1 layer
        mine = [g for g in got if g[0] == sf.CKPT_MODEL]
        assert [g[1] for g in mine] == sorted(g[1] for g in mine)
        assert {g[1] for g in mine} == {100, 200, 300}
    else:
        model = "real-job"
        assert sorted(set(steps)) == [1000, 2000] and steps == sorted(steps)
    _check(res, "checkpoint_trend", expect_checkpoint_trend(rows, model), model=model)
    assert run(res["root"], "checkpoint_trend", model="no such model")[1] == []


def test_compare_runs(res):
    rows = rows_of(res)
    a, b = res["runs"][0], res["runs"][-1]
    got = _check(res, "compare_runs", expect_compare_runs(rows, a, b), a=a, b=b)
    assert len(got) == 5 * len(
        {layer for (r, layer) in rows.group("run_id", "layer") if r in (a, b)}
    )
    # against itself: no difference
    same_run = run(res["root"], "compare_runs", a=a, b=a)[1]
    assert same_run and all(g[4] == 0 for g in same_run)
    # against a run that does not exist: b's side is empty, no error
    missing = _check(res, "compare_runs", expect_compare_runs(rows, a, "nope"), a=a, b="nope")
    assert missing and all(g[3] is None and g[4] is None for g in missing)


def test_compare_runs_with_different_layer_counts(synth_root):
    """edge has 3 layers, ckpt-100 has 2: layer 3 appears once, with one side empty."""
    rows = rows_of(synth_root)
    for a, b in ((sf.EDGE_RUN, "ckpt-100"), ("ckpt-100", sf.EDGE_RUN)):
        got = _check(synth_root, "compare_runs", expect_compare_runs(rows, a, b), a=a, b=b)
        assert [g[0] for g in got] == [1] * 5 + [2] * 5 + [3] * 5


@pytest.mark.parametrize(("min_count", "k"), [(20, 10), (2, 3), (1, 4), (5, 2)])
def test_top_tokens(res, min_count, k):
    rows = rows_of(res)
    want = expect_top_tokens(rows, min_count=min_count, k=k)
    got = _check(res, "top_tokens", want, min_count=str(min_count), k=str(k))
    if min_count <= 2:
        assert got
    if res["kind"] == "synthetic" and min_count == 1:
        # quantized measures: tokens tie on their mean and the tie is broken by token id
        assert any(
            g1[6] == g2[6] and g1[0:3] == g2[0:3] and g1[5] < g2[5]
            for g1, g2 in itertools.pairwise(got)
        )
    one = res["runs"][0]
    want = expect_top_tokens(rows, run_id=one, min_count=min_count, k=k)
    _check(res, "top_tokens", want, run_id=one, min_count=min_count, k=k)


# -- read-only --------------------------------------------------------------------------------


def tree_digest(root: str) -> dict[str, str]:
    """Every file and folder under root → sha256 (folders: 'dir')."""
    out = {}
    for p in sorted(Path(root).rglob("*")):
        out[str(p.relative_to(root))] = (
            "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        )
    return out


def refused_statements(root: str, outside: Path) -> list[str]:
    return [
        f"COPY tokens TO '{root}/stolen.csv'",
        f"COPY (SELECT * FROM runs) TO '{outside}/out.parquet' (FORMAT parquet)",
        f"COPY runs FROM '{root}/_mixscope/runs/x.csv'",
        "DROP TABLE runs",
        "DROP VIEW tokens",
        "DELETE FROM runs",
        "UPDATE runs SET name = 'x'",
        "INSERT INTO runs (run_id) VALUES ('x')",
        f"ATTACH '{root}/db.duckdb' AS db",
        f"ATTACH '{outside}/db.duckdb' AS db",
        "DETACH memory",
        "INSTALL httpfs",
        "LOAD httpfs",
        "SET enable_external_access = true",
        "SET allowed_directories = ['/']",
        "RESET lock_configuration",
        "CREATE TABLE t AS SELECT 1",
        "CREATE VIEW v AS SELECT 1",
        "CREATE OR REPLACE VIEW tokens AS SELECT 1",
        "CREATE MACRO f(x) AS x",
        "PRAGMA enable_profiling",
        f"EXPORT DATABASE '{outside}/export'",
        "CHECKPOINT",
        "SELECT 1; DROP TABLE runs",
        "SELECT 1; SELECT 2",
        "SELECT * FROM query('DROP TABLE runs')",
        "SELECT * FROM read_csv('/etc/passwd')",
        f"SELECT * FROM read_csv('{root}/../../../../../../etc/passwd')",
        "SELECT * FROM read_text('/etc/hostname')",
        "SELECT * FROM glob('/etc/*')",
        f"SELECT * FROM read_csv('{root}_sibling.csv')",  # shares the root's prefix only
        f"SELECT * FROM read_parquet('{outside}/*.parquet')",
    ]


def test_sql_refuses_writes_and_outside_files(real_root, tmp_path):
    root = real_root["root"]
    outside = tmp_path / "outside"
    outside.mkdir()
    pq.write_table(pa.table({"a": [1]}), outside / "visible.parquet")
    sibling = Path(f"{root}_sibling.csv")
    sibling.write_text("a,b\n1,2\n")
    try:
        before = tree_digest(root)
        outside_before = tree_digest(str(outside))
        for statement in refused_statements(root, outside):
            result = _invoke("sql", root, statement)
            assert result.exit_code == 1, (statement, result.output)
            err = result.stderr.strip().splitlines()
            assert len(err) == 1 and err[0].startswith("Error: "), (statement, result.stderr)
            assert "Traceback" not in result.output and result.stdout == "", statement
        # the same through the library, on one connection that stays usable
        con = connect(root)
        n = con.execute("SELECT count(*) FROM tokens").fetchone()[0]
        for statement in refused_statements(root, outside):
            with pytest.raises(MixscopeError):
                execute(con, statement).fetchall()
        assert execute(con, "SELECT count(*) FROM tokens").fetchone()[0] == n
        assert execute(con, "SELECT count(*) FROM runs").fetchone()[0] == 2
        assert tree_digest(root) == before  # byte-identical, nothing added
        assert tree_digest(str(outside)) == outside_before
    finally:
        sibling.unlink()


def test_sql_allows_read_only_statement_kinds(real_root):
    root = real_root["root"]
    for statement in (
        "SELECT count(*) FROM tokens",
        "WITH t AS (SELECT * FROM tokens) SELECT count(*) FROM t",
        "FROM runs SELECT count(*)",
        "DESCRIBE tokens",
        "SHOW TABLES",
        "SELECT 1 UNION ALL SELECT 2;",
        f"SELECT count(*) FROM read_json_auto('{root}/_mixscope/runs/*/run.json')",
    ):
        result = _invoke("sql", root, statement, "--format", "json")
        assert result.exit_code == 0, (statement, result.output)
        assert json.loads(result.stdout)


# -- parameter binding ------------------------------------------------------------------------


STRING_PARAMS = {
    "summary": ["run_id"],
    "layer_profile": ["run_id"],
    "layer_summary": ["run_id"],
    "token_types": ["run_id"],
    "frequency_correlation": ["run_id", "reference"],
    "frequency_correlation_exact": ["run_id", "reference"],
    "frequency_bins": ["run_id", "reference"],
    "depth_correlation": ["run_id"],
    "checkpoint_trend": ["model"],
    "compare_runs": ["a", "b"],
    "top_tokens": ["run_id"],
}


def test_parameters_are_values_not_sql(synth_root):
    root = synth_root["root"]
    before = tree_digest(root)
    con = connect(root)
    n_tokens = con.execute("SELECT count(*) FROM tokens").fetchone()[0]
    assert set(STRING_PARAMS) == set(all_queries())
    for name, params in STRING_PARAMS.items():
        for value in (EVIL, "' OR '1'='1", '"; SELECT 1; --', "$run_id", "%", "ckpt-100' --"):
            choices = [params] if name == "compare_runs" else [[p] for p in params] + [params]
            for chosen in choices:
                given = {p: value for p in chosen}
                if "reference" in given:  # a value: no such table, said so (not run as SQL)
                    with pytest.raises(MixscopeError, match="no reference frequency table"):
                        run_query(con, name, given)
                    continue
                assert run_query(con, name, given).fetchall() == [], (name, given)
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == len(synth_root["runs"])
    assert con.execute("SELECT count(*) FROM tokens").fetchone()[0] == n_tokens
    # through the CLI as well
    result = _invoke("query", root, "summary", "--param", f"run_id={EVIL}")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().endswith("(0 rows)")
    assert tree_digest(root) == before


def test_a_model_name_with_quotes_is_matched_as_a_value(tmp_path):
    layout = Layout.open(str(tmp_path))
    rng = np.random.default_rng(5)
    name = 'o\'brien "model"; DROP TABLE runs; --'
    seqs = sf.make_sequences(rng, 3)
    sf.write_synthetic_run(
        layout,
        "quoted",
        [sf.shard_arrays(seqs, 2, rng)],
        name=name,
        step=7,
    )
    result = _invoke(
        "query", str(tmp_path), "checkpoint_trend", "--param", f"model={name}", "--format", "json"
    )
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    assert len(got) == 2 * 5 and {g["model"] for g in got} == {name}
    assert [g["step"] for g in got] == [7] * 10


def test_integer_parameters_are_checked(synth_root):
    root = synth_root["root"]
    for name, param in (
        ("top_tokens", "min_count"),
        ("top_tokens", "k"),
        ("frequency_bins", "bins_per_decade"),
    ):
        result = _invoke("query", root, name, "--param", f"{param}=1; DROP TABLE runs")
        assert result.exit_code == 1
        assert result.stderr.strip() == (
            f"Error: query {name}: --param {param} expects int, got '1; DROP TABLE runs'"
        )


def test_unknown_query_and_parameters_are_clear_errors(synth_root):
    root = synth_root["root"]
    names = ", ".join(all_queries())
    result = _invoke("query", root, "nosuch")
    assert result.exit_code == 1
    assert result.stderr.strip() == f"Error: no query named 'nosuch'; available: {names}"

    result = _invoke("query", root, "summary", "--param", "runid=x")
    assert result.exit_code == 1
    assert result.stderr.strip() == "Error: query summary has no parameter 'runid'; valid: run_id"
    result = _invoke("query", root, "frequency_bins", "--param", "bins=3")
    assert "valid: run_id, reference, bins_per_decade" in result.stderr

    result = _invoke("query", root, "compare_runs", "--param", "a=ckpt-100")
    assert result.exit_code == 1
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1 and "--param b=" in err and "second run_id" in err
    result = _invoke("query", root, "compare_runs")
    assert "--param a=" in result.stderr

    result = _invoke("query", root, "summary", "--param", "run_id")
    assert result.exit_code == 1 and "key=value" in result.stderr
    with pytest.raises(MixscopeError, match="available: checkpoint_trend"):
        get_query("nope")


# -- only committed files are visible ---------------------------------------------------------


def test_uncommitted_and_partial_files_are_invisible(tmp_path):
    root = tmp_path / "results"
    sf.build_synthetic(root)
    layout = Layout.open(str(root))
    con = connect(str(root))
    before = {
        "rows": con.execute("SELECT count(*), max(doc_id) FROM tokens").fetchone(),
        "runs": con.execute("SELECT list(DISTINCT run_id ORDER BY run_id) FROM tokens").fetchone(),
        "freq": con.execute("SELECT sum(count), count(*) FROM frequencies").fetchone(),
        "summary": run_query(con, "summary").fetchall(),
    }
    rng = np.random.default_rng(9)
    seqs = sf.make_sequences(rng, 2, first_doc=999_990)
    junk, junk_stats = sf.result_tables(seqs, 3, rng)
    edge = sf.EDGE_RUN
    tokens_dir = Path(layout.data_dir("tokens", edge))
    # 1. renamed but never committed (the driver died between rename and commit)
    write_parquet(layout, layout.data_file("tokens", edge, 7), junk)
    for kind, table in junk_stats.items():
        write_parquet(layout, layout.shard_file(kind, edge, 7), table)
    record_failure(layout, edge, 7, "RuntimeError: boom", 3)
    # 2. a worker's hidden temporary file, complete or half-written
    (tokens_dir / ".part-000008.parquet.1a2b3c4d.tmp").write_bytes(parquet_bytes(junk))
    (tokens_dir / ".part-000009.parquet.5e6f7a8b.tmp").write_bytes(parquet_bytes(junk)[:100])
    # 3. garbage and a truncated copy under *.parquet names
    (tokens_dir / "part-000010.parquet").write_bytes(b"PAR1 this is not parquet PAR1")
    committed = (tokens_dir / "part-000000.parquet").read_bytes()
    (tokens_dir / "part-000011.parquet").write_bytes(committed[: len(committed) // 2])
    partials = Path(layout.shard_file("frequencies", edge, 12)).parent
    (partials / "part-000012.parquet").write_bytes(b"junk")
    # 4. a half-written commit record (hidden temporary name)
    (root / "_mixscope" / "runs" / edge / "commits" / ".000007.json.0badc0de.tmp").write_text(
        json.dumps(
            {"shard_id": 7, "files": {"tokens": {"path": layout.data_file("tokens", edge, 7)}}}
        )
    )
    # 5. a run whose files exist but nothing is committed, and files of no run at all
    write_parquet(layout, layout.data_file("tokens", "half", 0), junk)
    layout.write_json(f"{layout.run_dir('half')}/plan.json", {"shards": []})
    write_parquet(layout, layout.data_file("tokens", "ghost", 0), junk)
    (root / "tokens" / "run_id=ghost" / "stray.parquet").write_bytes(b"\x00" * 64)

    # the junk is really there for a raw glob …
    import duckdb

    raw = duckdb.sql(
        f"SELECT count(*) FROM read_parquet('{root}/tokens/run_id={edge}/part-000007.parquet')"
    ).fetchall()[0][0]
    assert raw == junk.num_rows
    # … but never for the views
    con = connect(str(root))
    after = {
        "rows": con.execute("SELECT count(*), max(doc_id) FROM tokens").fetchone(),
        "runs": con.execute("SELECT list(DISTINCT run_id ORDER BY run_id) FROM tokens").fetchone(),
        "freq": con.execute("SELECT sum(count), count(*) FROM frequencies").fetchone(),
        "summary": run_query(con, "summary").fetchall(),
    }
    assert after == before
    assert after["rows"][1] < 999_990
    for name, q in all_queries().items():  # every query still runs
        params = {"a": edge, "b": "ckpt-100"} if name == "compare_runs" else {}
        assert run_query(con, name, params).fetchall() is not None, q.name
    result = _invoke("sql", str(root), "SELECT count(*) AS n FROM tokens", "--format", "csv")
    assert result.exit_code == 0 and result.stdout.splitlines() == ["n", str(before["rows"][0])]


# -- reference frequencies ----------------------------------------------------------------


def test_frequencies_import_formats(tmp_path):
    root = tmp_path / "r"
    sf.build_synthetic(root)
    txt = tmp_path / "counts.txt"
    txt.write_text("     50 the\n     50 cat\n\n     20 [CLS]\n      3 ##ing\n")
    csv_file = tmp_path / "ranked.csv"
    csv_file.write_text("rank,count,token_id\n1,900,1996\n2,400,4937\n2,400,3899\n9,7,101\n")
    par = tmp_path / "both.parquet"
    pq.write_table(
        pa.table({"token": ["the", "dog"], "token_id": [1996, 3899], "count": [5, 6]}), par
    )
    for name, path in (("txt", txt), ("csv", csv_file), ("par", par)):
        result = _invoke("frequencies", "import", str(root), str(path), "--name", name)
        assert result.exit_code == 0, result.output
    con = connect(str(root))

    def ref(name):
        return con.execute(
            "SELECT token_id, token, count, rank FROM frequencies WHERE reference = ? "
            "ORDER BY rank, token_id, token",
            [name],
        ).fetchall()

    assert ref("txt") == [
        (None, "cat", 50, 1),
        (None, "the", 50, 1),
        (None, "[CLS]", 20, 3),
        (None, "##ing", 3, 4),
    ]
    assert ref("csv") == [
        (1996, None, 900, 1),
        (3899, None, 400, 2),
        (4937, None, 400, 2),
        (101, None, 7, 4),
    ]
    assert ref("par") == [(3899, "dog", 6, 1), (1996, "the", 5, 2)]
    # importing the same name again replaces it
    txt.write_text("1 the\n")
    assert _invoke("frequencies", "import", str(root), str(txt), "--name", "txt").exit_code == 0
    assert ref("txt") == [(None, "the", 1, 1)]


@pytest.mark.parametrize(
    ("content", "name", "message"),
    [
        ("count,word\n1,the\n", "x.csv", "needs a count column and a token or token_id column"),
        ("the 12\n", "x.txt", "expected 'count token'"),
        ("", "x.txt", "has no rows"),
        ("count,token\nmany,the\n", "x.csv", "must be integers"),
    ],
)
def test_frequencies_import_errors(tmp_path, content, name, message):
    path = tmp_path / name
    path.write_text(content)
    result = _invoke("frequencies", "import", str(tmp_path / "root"), str(path), "--name", "r")
    assert result.exit_code == 1
    err = result.stderr.strip().splitlines()
    assert len(err) == 1 and message in err[0], result.stderr
    assert "Traceback" not in result.output


def test_frequencies_import_rejects_bad_names_and_missing_files(tmp_path):
    (tmp_path / "f.txt").write_text("1 the\n")
    result = _invoke(
        "frequencies", "import", str(tmp_path), str(tmp_path / "f.txt"), "--name", "../x"
    )
    assert result.exit_code == 1 and "invalid reference name" in result.stderr
    result = _invoke(
        "frequencies", "import", str(tmp_path), str(tmp_path / "no.txt"), "--name", "x"
    )
    assert result.exit_code == 1 and "does not exist" in result.stderr


def test_frequency_correlation_uses_the_reference_via_cli(real_root):
    root = real_root["root"]
    rows = rows_of(real_root)
    for reference in REFERENCES:
        result = _invoke(
            "query",
            root,
            "frequency_correlation",
            "--param",
            f"reference={reference}",
            "--format",
            "json",
        )
        assert result.exit_code == 0, result.output
        got = [tuple(d.values()) for d in json.loads(result.stdout)]
        want = expect_frequency_correlation(real_root, rows, reference=reference)
        assert got == run(root, "frequency_correlation", reference=reference)[1]
        assert len(got) == len(want) and all(
            abs(g[2] - w[2]) <= g[-1] and abs(g[3] - w[3]) <= g[-1]
            for g, w in zip(got, want, strict=True)
        )
    own = run(root, "frequency_correlation")[1]
    assert [g[2] for g in own] != [g[2] for g in got]  # the reference changed the numbers


# -- CLI outputs ---------------------------------------------------------------------------------


def parse_table(text: str) -> tuple[list[str], list[list[str]], int]:
    lines = text.rstrip("\n").splitlines()
    footer = lines.pop()
    count = int(footer.strip("()").split()[0])
    spans, start = [], None
    dashes = lines[1]
    for k, ch in enumerate(dashes + " "):
        if ch == "-" and start is None:
            start = k
        elif ch != "-" and start is not None:
            spans.append((start, k))
            start = None
    cut = [[line[a:b].strip() for a, b in spans] for line in [lines[0], *lines[2:]]]
    return cut[0], cut[1:], count


def same_cell(text: str, value: Any) -> bool:
    if value is None:
        return text == ""
    if isinstance(value, bool):
        return text == ("yes" if value else "")
    if isinstance(value, float):
        if math.isnan(value):
            return text == "nan"
        return abs(float(text) - value) <= 5.1e-5
    return text == str(value)


def _no_constants(name: str) -> None:
    raise AssertionError(f"{name} is not JSON (NaN must be written as null)")


def check_outputs(args: list[str], columns: list[str], want: list[tuple], tmp: Path) -> None:
    """Every --format, on stdout and with --output, parsed back and compared."""
    tmp.mkdir(parents=True, exist_ok=True)
    for fmt in ("table", "csv", "json", "parquet"):
        texts = {}
        if fmt != "parquet":
            result = _invoke(*args, "--format", fmt)
            assert result.exit_code == 0, result.output
            texts["stdout"] = result.stdout
        out = tmp / f"result.{fmt}"
        result = _invoke(*args, "--format", fmt, "--output", str(out))
        assert result.exit_code == 0, result.output
        assert result.stdout == "" and f"wrote {out}" in result.stderr
        if fmt == "parquet":
            table = pq.read_table(out)
            assert table.column_names == columns
            got = [tuple(r.values()) for r in table.to_pylist()]
            assert_rows(columns, got, want, "parquet")
            continue
        texts["file"] = out.read_text()
        # (not compared as text: DuckDB's parallel sums may differ in the last bit per run)
        assert texts["file"].count("\n") == texts["stdout"].count("\n")
        for where, text in texts.items():
            if fmt == "table":
                headers, cells, count = parse_table(text)
                assert headers == columns and count == len(want) == len(cells), where
                for row, w in zip(cells, want, strict=True):
                    assert all(same_cell(t, v) for t, v in zip(row, w, strict=True)), (row, w)
            elif fmt == "csv":
                parsed = list(csv.reader(io.StringIO(text)))
                assert parsed[0] == columns and len(parsed) == 1 + len(want)
                for row, w in zip(parsed[1:], want, strict=True):
                    for t, v in zip(row, w, strict=True):
                        if isinstance(v, float):  # repr: all the digits
                            assert same(float(t), v), (t, v)
                        else:
                            assert t == ("" if v is None else str(v))
            else:
                parsed = json.loads(text, parse_constant=_no_constants)  # strict JSON
                assert [list(d) for d in parsed] == [columns] * len(want)
                got = [tuple(d.values()) for d in parsed]
                assert_rows(columns, got, want, "json")


def test_sql_command_outputs(real_root, tmp_path):
    root = real_root["root"]
    statement = (
        "SELECT run_id, layer, category, count(*) AS n, avg(attn_n) AS mean_attn_n, "
        "bool_or(is_masked) AS any_masked, min(token) AS first_token, NULL AS nothing "
        "FROM tokens GROUP BY ALL ORDER BY ALL"
    )
    cur = execute(connect(root), statement)
    columns, want = [d[0] for d in cur.description], cur.fetchall()
    assert len(want) >= 8
    check_outputs(["sql", root, statement], columns, want, tmp_path / "sql")
    # the statement from stdin
    result = _invoke("sql", root, "--format", "json", input=statement + "\n")
    assert result.exit_code == 0, result.output
    assert_rows(columns, [tuple(d.values()) for d in json.loads(result.stdout)], want, "stdin")
    # --run narrows the views
    one = real_root["runs"][0]
    result = _invoke(
        "sql", root, "SELECT DISTINCT run_id FROM tokens", "--run", one, "--format", "csv"
    )
    assert result.stdout.splitlines() == ["run_id", one]


def test_query_command_outputs(real_root, tmp_path):
    root = real_root["root"]
    rows = rows_of(real_root)
    one = real_root["runs"][1]
    columns = list(get_query("summary").columns)
    check_outputs(
        ["query", root, "summary", "--param", f"run_id={one}"],
        columns,
        expect_summary(rows, one),
        tmp_path / "summary",
    )
    columns, _ = run(root, "layer_profile")
    check_outputs(
        ["query", root, "layer_profile"], columns, expect_layer_profile(rows), tmp_path / "lp"
    )


def test_query_outputs_with_nan_and_null(synth_root, tmp_path):
    """A constant column has no rank correlation: NaN in table/csv/parquet, null in JSON."""
    rows = rows_of(synth_root)
    want = expect_depth_correlation(rows, sf.EDGE_RUN)
    assert any(math.isnan(w[2]) for w in want)
    columns = list(get_query("depth_correlation").columns)
    args = ["query", synth_root["root"], "depth_correlation", "--param", f"run_id={sf.EDGE_RUN}"]
    check_outputs(args, columns, want, tmp_path)
    result = _invoke(*args, "--format", "json")
    nulls = [d for d in json.loads(result.stdout) if d["rho"] is None]
    assert all(d["bound"] is None for d in nulls)
    assert [d["measure"] for d in nulls] == ["attn_w", "attnres_w"]  # constant: 0.5, 0.25


def test_queries_command_lists_every_query_and_parameter():
    result = _invoke("queries")
    assert result.exit_code == 0
    text = result.stdout
    blocks = {}
    for block in text.split("\n"):
        if block and not block.startswith(" "):
            current = block.strip()
            blocks[current] = []
        elif block:
            blocks[current].append(block.strip())
    assert list(blocks) == list(all_queries())
    for name, q in all_queries().items():
        lines = blocks[name]
        assert lines[0] == q.description
        for p in q.params:
            default = "required" if p.default is REQUIRED else f"default {p.default!r}"
            assert f"--param {p.name}=…  ({default}) {p.help}".strip() in lines, (name, p.name)
        assert f"columns: {', '.join(q.columns)}" in lines
    assert "--param a=…  (required) the first run_id" in text


def test_threads_and_memory_are_configurable_and_readers_coexist(synth_root):
    root = synth_root["root"]
    con = connect(root, threads=1, memory_limit="300MB")
    assert con.execute("SELECT current_setting('threads')").fetchone()[0] == 1
    assert "MiB" in con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    result = _invoke(
        "sql", root, "SELECT current_setting('threads') AS t", "--threads", "1", "--format", "csv"
    )
    assert result.stdout.splitlines() == ["t", "1"]
    # many readers at once: no lock, no database file written under the root
    others = [connect(root) for _ in range(3)]
    counts = {c.execute("SELECT count(*) FROM tokens").fetchone()[0] for c in [con, *others]}
    assert counts == {rows_of(synth_root).n}
    assert not [p for p in Path(root).rglob("*") if p.suffix in (".duckdb", ".db", ".wal")]


def test_sql_root_that_does_not_exist(tmp_path):
    result = _invoke("sql", str(tmp_path / "nope"), "SELECT 1")
    assert result.exit_code == 1
    assert result.stderr.strip() == f"Error: results root {tmp_path / 'nope'} does not exist"


# -- regressions of bugs found here (fixed in 32ac422) ------------------------------------------


def test_a_moved_results_directory_is_queryable(tmp_path):
    """Commit records hold root-relative paths: a copied or moved root reads its own files."""
    original = tmp_path / "original"
    sf.build_synthetic(original)
    want = run(str(original), "summary")[1]
    for commit in original.glob("_mixscope/runs/*/commits/*.json"):
        for entry in json.loads(commit.read_text())["files"].values():
            assert not entry["path"].startswith("/"), entry["path"]
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    moved = tmp_path / "moved"
    original.rename(moved)
    for root in (copy, moved):
        con = connect(str(root))
        assert con.execute("SELECT count(*) FROM tokens").fetchone()[0] == Rows(str(root)).n
        columns, got = run(str(root), "summary")
        assert_rows(columns, got, want, str(root))
    shutil.rmtree(copy / "tokens" / "run_id=edge")  # the copy reads its own files, not moved's
    with pytest.raises(Exception, match=r"No files found|does not exist"):
        connect(str(copy)).execute("SELECT count(*) FROM tokens").fetchall()


def test_an_all_digit_run_id_stays_a_string(tmp_path):
    layout = Layout.open(str(tmp_path))
    rng = np.random.default_rng(3)
    seqs = sf.make_sequences(rng, 3)
    run_id = "1234567890123456"  # a possible run_id_for() value
    sf.write_synthetic_run(
        layout,
        run_id,
        [sf.shard_arrays(seqs, 2, rng)],
        name="m",
        step=10,
    )
    con = connect(str(tmp_path))
    assert con.execute("SELECT DISTINCT typeof(run_id) FROM tokens").fetchall() == [("VARCHAR",)]
    assert len(run_query(con, "checkpoint_trend").fetchall()) == 10
    assert len(run_query(con, "compare_runs", {"a": run_id, "b": "other"}).fetchall()) == 10
    assert con.execute("SELECT DISTINCT typeof(run_id) FROM frequencies").fetchall() == [
        ("VARCHAR",)
    ]
    assert run_query(con, "summary", {"run_id": run_id}).fetchall()[0][0] == run_id


def test_count_token_file_starting_with_a_comma(tmp_path):
    path = tmp_path / "counts.txt"
    path.write_text("   9120 ,\n   8000 the\n     12 cat\n")
    result = _invoke("frequencies", "import", str(tmp_path), str(path), "--name", "c")
    assert result.exit_code == 0, result.output
    got = connect(str(tmp_path)).execute(
        "SELECT token, count, rank FROM frequencies WHERE reference = 'c' ORDER BY rank"
    )
    assert got.fetchall() == [(",", 9120, 1), ("the", 8000, 2), ("cat", 12, 3)]


def test_unknown_reference_is_an_error_listing_the_imported_ones(real_root):
    con = connect(real_root["root"] if isinstance(real_root, dict) else real_root)
    with pytest.raises(MixscopeError, match="no reference frequency table 'nope'; imported: "):
        run_query(con, "frequency_correlation", {"reference": "nope"})
