"""Statistics first (issue 11): sufficient statistics, consolidation, detail modes.

Every statistic is checked against a brute-force float64 computation over the per-token
detail rows, read with pyarrow from the files the commit records name (never DuckDB);
the modes are checked on the files they leave behind.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from mixscope.cli import main
from mixscope.config import load_spec
from mixscope.errors import MixscopeError
from mixscope.runtime import driver
from mixscope.runtime.driver import run_job
from mixscope.sql.named import all_queries, run_query
from mixscope.sql.views import connect
from mixscope.stats import consolidate as consolidation
from mixscope.stats.detail import in_sample
from mixscope.store import generations, manifest
from mixscope.store.layout import Layout
from mixscope.store.records import CommitRecord, FileEntry
from mixscope.store.schema import CATEGORIES, HIST_BINS, STATS, STORED_MEASURES

DEMO = Path(__file__).parents[1] / "jobs" / "data" / "demo.txt"
WIKITEXT = Path(__file__).parents[2] / "shared" / "data" / "wikitext-2" / "test.txt"
HEADING = r"^\s*=.*=\s*$"


def _spec(model: str, out: Path, **overrides):
    base = {
        "model": model,
        "corpus.paths": [str(DEMO)],
        "corpus.pairs": True,  # token_type 1, [CLS] A [SEP] B [SEP]
        "out": str(out),
        "analysis.max_length": 40,  # long pairs become several segments
        "analysis.mask_rate": 0.25,
        "runtime.executor": "local",
        "runtime.docs_per_shard": 3,
        "runtime.batch_size": 4,
        "output.detail": "full",
    }
    return load_spec(None, {**base, **overrides})


def detail_rows(root: str) -> dict[str, np.ndarray]:
    """Every committed detail row, one per token, measures as [tokens, layers] arrays."""
    layout = Layout.open(root)
    cols: dict[str, list] = defaultdict(list)
    for path in manifest.committed_files(layout, "tokens"):
        table = pq.read_table(path)
        for name in table.column_names:
            cols[name] += table[name].to_pylist()
    out = {k: np.array(v) for k, v in cols.items() if k not in STORED_MEASURES}
    for m in STORED_MEASURES:
        out[m] = np.array(cols[m], dtype=np.float32).astype(np.float64)
    out["sequence"] = np.array(
        [hash((d, s)) for d, s in zip(out["doc_id"], out["segment"], strict=True)]
    )
    return out


def stats_rows(root: str, view: str) -> list[dict]:
    cur = connect(root).execute(f"SELECT * FROM {view}")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def close(got: float, want: float) -> bool:
    return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12)


@pytest.fixture(scope="module")
def full_run(tiny_bert_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("stats-full")
    summary = run_job(_spec(tiny_bert_dir, out), show_progress=False)
    assert summary.status == "complete" and summary.shards_total >= 4
    return str(out), summary


def test_layer_stats_equal_brute_force(full_run):
    root, summary = full_run
    d = detail_rows(root)
    layers = d["attn_w"].shape[1]
    got = stats_rows(root, "layer_stats")
    assert (
        len(got)
        == 5 * len({(c, t) for c, t in zip(d["category"], d["token_type"], strict=True)}) * layers
    )
    for g in got:
        sel = (np.array([CATEGORIES[c] for c in d["category"]]) == g["category"]) & (
            d["token_type"] == g["token_type"]
        )
        m = g["measure"]
        v = (d["attn_w"] / 2 if m == "attnres_w" else d[m])[sel, g["layer"] - 1]
        assert g["n"] == sel.sum()
        assert close(g["sum"], v.sum()) and close(g["sumsq"], (v * v).sum())
        assert g["min"] == np.float32(v.min()) and g["max"] == np.float32(v.max())
        mean = g["sum"] / g["n"]
        assert close(g["sumsq"] / g["n"] - mean**2, v.var())  # the variance, from moments
    assert sum(g["n"] for g in got if g["measure"] == "attn_w") == summary.rows


def test_sequence_stats_equal_per_sequence_means(full_run):
    root, _ = full_run
    d = detail_rows(root)
    cats = np.array([CATEGORIES[c] for c in d["category"]])
    for g in stats_rows(root, "sequence_stats"):
        m = g["measure"]
        values = (d["attn_w"] / 2 if m == "attnres_w" else d[m])[:, g["layer"] - 1]
        means = []
        for s in np.unique(d["sequence"]):
            sel = (d["sequence"] == s) & ((cats == g["category"]) | (g["category"] == "all"))
            if sel.any():
                means.append(values[sel].mean())
        assert g["sequences"] == len(means)
        assert close(g["seq_sum"], float(np.sum(means)))
        assert close(g["seq_sumsq"], float(np.sum(np.square(means))))


def test_token_stats_and_histograms_equal_brute_force(full_run):
    root, _ = full_run
    d = detail_rows(root)
    cats = np.array([CATEGORIES[c] for c in d["category"]])
    masked = d["is_masked"].astype(bool)
    assert masked.any() and (d["original_id"][masked] != d["token_id"][masked]).all()
    assert (d["token_type"] == 1).any() and (d["segment"] > 0).any()
    keys = set(zip(d["token_id"], d["original_id"], d["token_type"], cats, strict=True))
    got = stats_rows(root, "token_stats")
    layers = d["attn_w"].shape[1]
    assert len(got) == len(keys) * layers * 5
    for g in got[:: max(1, len(got) // 300)]:  # a spread of a few hundred rows
        sel = (d["token_id"] == g["token_id"]) & (d["original_id"] == g["original_id"])
        sel &= (cats == g["category"]) & (d["token_type"] == g["token_type"])
        m = g["measure"]
        v = (d["attn_w"] / 2 if m == "attnres_w" else d[m])[sel, g["layer"] - 1]
        assert g["n"] == sel.sum() and close(g["sum"], v.sum())
        assert close(g["sumsq"], (v * v).sum()) and g["max"] == np.float32(v.max())

    # token_hist: occurrences per (token id, original id, category, bin of the
    # layer-averaged value)
    want: dict[tuple, int] = defaultdict(int)
    for m in STORED_MEASURES:
        avg = d[m].mean(axis=1)
        b = np.clip(np.floor(avg * HIST_BINS), 0, HIST_BINS - 1).astype(int)
        for t, o, c, k in zip(d["token_id"], d["original_id"], cats, b, strict=True):
            want[(int(t), int(o), c, m, int(k))] += 1
    hist = {
        (g["token_id"], g["original_id"], g["category"], g["measure"], g["bin"]): g["count"]
        for g in stats_rows(root, "token_hist")
        if g["measure"] != "attnres_w"
    }
    assert hist == dict(want)
    # layer_hist: token-layer rows per (layer, category, bin)
    want = defaultdict(int)
    for m in STORED_MEASURES:
        b = np.clip(np.floor(d[m] * HIST_BINS), 0, HIST_BINS - 1).astype(int)
        for (i, layer), k in np.ndenumerate(b):
            want[(layer + 1, cats[i], m, int(k))] += 1
    got_hist = {
        (g["layer"], g["category"], g["measure"], g["bin"]): g["count"]
        for g in stats_rows(root, "layer_hist")
        if g["measure"] != "attnres_w"
    }
    assert got_hist == dict(want)
    # the derived measure ranks as its source: the same bins and counts
    derived = [g for g in stats_rows(root, "layer_hist") if g["measure"] == "attnres_w"]
    assert len(derived) == sum(1 for k in got_hist if k[2] == "attn_w")


def test_one_consolidated_table_per_kind_and_no_partials(full_run):
    root, summary = full_run
    layout = Layout.open(root)
    gen = generations.latest(layout, summary.run_id)
    assert gen.shards == frozenset(range(summary.shards_total))
    assert set(gen.files) == set(STATS)
    for kind in STATS:
        folder = Path(layout.stats_dir(kind, summary.run_id))
        assert [p.name for p in folder.glob("*.parquet")] == [
            gen.files[kind]["path"].rsplit("/", 1)[1]
        ]
        assert list((folder / "_partial").glob("*.parquet")) == []  # merged, then deleted
    # a second consolidation changes nothing
    before = {k: Path(root, v["path"]).read_bytes() for k, v in gen.files.items()}
    again = consolidation.consolidate(layout, summary.run_id)
    assert again.generation == gen.generation
    assert {k: Path(root, v["path"]).read_bytes() for k, v in gen.files.items()} == before


def _queries(root: str) -> dict[str, list]:
    con = connect(root)
    runs = [r for (r,) in con.execute("SELECT run_id FROM runs").fetchall()]
    out = {}
    for name, q in all_queries().items():
        if name == "frequency_correlation_exact" or q.groups:
            continue  # reads the detail; a measure group's query (tests/test_measure_runs.py)
        params = {"a": runs[0], "b": runs[0]} if name.startswith("compare_") else {}
        cur = run_query(con, name, params)
        out[name] = [
            tuple(v for k, v in zip(cur.description, r, strict=True) if k[0] != "run_id")
            for r in cur.fetchall()
        ]
    return out


def test_every_mode_answers_every_named_query_alike(full_run, tiny_bert_dir, tmp_path):
    """none and sample give the full run's statistics to the bit; queries answer the same."""
    root, summary = full_run
    want = _queries(root)
    for mode in ("none", "sample"):
        out = tmp_path / mode
        s = run_job(
            _spec(tiny_bert_dir, out, **{"output.detail": mode, "output.sample_rate": 0.3}),
            show_progress=False,
        )
        assert s.status == "complete" and s.run_id != summary.run_id  # output is identity
        got = _queries(str(out))
        assert got == want, mode


def test_detail_none_leaves_no_per_token_files(tiny_bert_dir, tmp_path):
    result = CliRunner().invoke(
        main,
        [
            "run",
            "--model",
            tiny_bert_dir,
            "--corpus",
            str(DEMO),
            "--out",
            str(tmp_path),
            "--detail",
            "none",
            "--set",
            "runtime.executor=local",
            "--max-length",
            "24",
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "tokens").exists()
    assert list(tmp_path.rglob("part-*.parquet")) and not list(tmp_path.glob("tokens/**/*"))
    for commit in tmp_path.glob("_mixscope/runs/*/commits/*.json"):
        rec = json.loads(commit.read_text())
        assert "tokens" not in rec["files"] and rec["detail_rows"] == 0 and rec["rows"] > 0
    result = CliRunner().invoke(main, ["sql", str(tmp_path), "SELECT count(*) FROM tokens"])
    assert result.exit_code == 1
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1 and "output.detail=none" in err
    with pytest.raises(MixscopeError, match=r"output\.detail=none"):
        run_query(connect(str(tmp_path)), "frequency_correlation_exact")
    # the statistics answer
    result = CliRunner().invoke(main, ["query", str(tmp_path), "summary", "--format", "json"])
    assert result.exit_code == 0 and len(json.loads(result.stdout)) == 5


def _splitmix64(x: int) -> int:
    """The documented hash, in Python integers (independent of the numpy version)."""
    mask = (1 << 64) - 1
    z = (x + 0x9E3779B97F4A7C15) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return z ^ (z >> 31)


def _documented_sample(root: Path, rate: float) -> set[int]:
    """The documented rule, from the run's plan: the documents whose hash is under the
    rate, and in a shard where none is, the shard's document of smallest hash."""
    (plan_file,) = root.glob("_mixscope/runs/*/plan.json")
    want = set()
    for shard in json.loads(plan_file.read_text())["shards"]:
        ids = range(shard["first_doc"], shard["first_doc"] + shard["n_docs"])
        under = {d for d in ids if _splitmix64(d) < rate * 2**64}
        want |= under or {min(ids, key=_splitmix64)}
    return want


@pytest.mark.parametrize("rate", [0.3, 0.01])
def test_sample_keeps_exactly_the_documented_documents(tiny_bert_dir, tmp_path, rate):
    s = run_job(
        _spec(tiny_bert_dir, tmp_path, **{"output.detail": "sample", "output.sample_rate": rate}),
        show_progress=False,
    )
    n_docs = 30 // 2  # pairs; 5 shards of 3 documents
    # by hand: documents 3 and 10 hash under 0.3 (none under 0.01); the shards without one
    # keep their smallest hash: 1 of 0-2, 7 of 6-8, 14 of 12-14 (and 3, 10 are their
    # shards' smallest too), so both rates keep these five, one per shard
    assert {d for d in range(n_docs) if _splitmix64(d) < rate * 2**64} == (
        {3, 10} if rate == 0.3 else set()
    )
    want = _documented_sample(tmp_path, rate)
    assert want == {1, 3, 7, 10, 14}
    assert set(in_sample(np.arange(n_docs), rate).nonzero()[0].tolist()) <= want
    con = connect(str(tmp_path))
    kept = {d for (d,) in con.execute("SELECT DISTINCT doc_id FROM tokens").fetchall()}
    assert kept == want
    flags = dict(
        con.execute(
            f"SELECT doc_id, in_detail FROM read_parquet('{tmp_path}/documents/*/*.parquet')"
        ).fetchall()
    )
    assert {d for d, f in flags.items() if f} == want and len(flags) == n_docs
    # the documents view says the same, and the commit records count the kept rows
    assert {
        d for (d,) in con.execute("SELECT doc_id FROM documents WHERE in_detail").fetchall()
    } == want
    commits = tmp_path.glob("_mixscope/runs/*/commits/*.json")
    detail_rows = sum(json.loads(c.read_text())["detail_rows"] for c in commits)
    assert detail_rows == con.execute("SELECT count(*) FROM tokens").fetchone()[0] > 0
    # statistics cover every document
    total = con.execute("SELECT sum(n) FROM layer_stats WHERE measure = 'attn_w'").fetchone()[0]
    assert total == s.rows > con.execute("SELECT count(*) FROM tokens").fetchone()[0]
    # a smaller rate keeps a subset of a larger one's documents
    assert set(in_sample(np.arange(1000), 0.1).nonzero()[0]) <= set(
        in_sample(np.arange(1000), 0.2).nonzero()[0]
    )


def test_float16_detail_error_is_within_its_bound(full_run, tiny_bert_dir, tmp_path):
    root, _ = full_run
    s = run_job(
        _spec(tiny_bert_dir, tmp_path, **{"output.precision": "float16"}), show_progress=False
    )
    assert s.status == "complete"
    a, b = detail_rows(root), detail_rows(str(tmp_path))
    for m in STORED_MEASURES:
        err = np.abs(a[m] - b[m])
        # float16 keeps 11 significant bits: |error| <= 2^-11 |value| (round to nearest)
        assert (err <= np.abs(a[m]) * 2.0**-11 + 2.0**-25).all(), m
    assert _queries(root) == _queries(str(tmp_path))  # statistics come from float32


def test_the_driver_consolidates_in_the_background_as_it_goes(tiny_bert_dir, tmp_path, monkeypatch):
    import threading

    monkeypatch.setattr(driver, "CONSOLIDATE_EVERY", 2)
    seen = []
    real = consolidation.consolidate
    merged = threading.Event()  # a consolidation the driver started during the run is done

    def spy(layout, run_id, *, min_new=1):
        gen = real(layout, run_id, min_new=min_new)
        seen.append((gen.generation, len(gen.shards)))
        if min_new > 1:  # started by a commit, not the run's start or end
            merged.set()
        return gen

    commit, commits = manifest.commit_shard, []

    def commit_after_merge(layout, run_id, record):
        # the third commit waits for the consolidation the second one started: unforced,
        # that thread may list the commits only after the last one (the other shards
        # commit within ~0.1 s here) and then covers them all
        if len(commits) == 2:
            assert merged.wait(120), "no consolidation started at the second commit"
        commits.append(record.shard_id)
        commit(layout, run_id, record)

    monkeypatch.setattr(driver, "consolidate", spy)
    monkeypatch.setattr(manifest, "commit_shard", commit_after_merge)
    s = run_job(_spec(tiny_bert_dir, tmp_path), show_progress=False)
    assert s.status == "complete"
    assert any(0 < shards < s.shards_total for _, shards in seen)  # during the run
    assert seen[-1][1] == s.shards_total  # and at its end
    d = detail_rows(str(tmp_path))
    got = connect(str(tmp_path)).execute(
        "SELECT sum(n), sum(sum) FROM layer_stats WHERE measure = 'attn_n'"
    )
    n, total = got.fetchone()
    assert n == d["attn_n"].size and close(total, d["attn_n"].sum())


def test_queries_are_right_at_every_commit_and_consolidation(tmp_path):
    """Shards committed one by one, consolidated now and then: after every step each
    committed shard counts exactly once (uncommitted partials never)."""
    import sql_fixtures as sf
    from mixscope.config import OutputSpec
    from mixscope.corpus.plan import Document
    from mixscope.runtime.host_path import ShardAccumulator
    from mixscope.stats.token_block import Vocabulary

    rng = np.random.default_rng(2)
    seqs = sf.make_sequences(rng, 18)
    shards = [sf.shard_arrays(seqs[k : k + 3], 2, rng) for k in range(0, 18, 3)]
    layout = Layout.open(str(tmp_path))
    sf.write_synthetic_run(layout, "r", shards[:1], name="r", step=None, consolidated=False)
    vocab = Vocabulary(sf.SyntheticTokenizer())
    records, want_n, want_sum = [], [], []
    for k, (encoded, measures) in enumerate(shards):  # every shard's files first, uncommitted
        results = ShardAccumulator(
            layout, "r", k, vocab, OutputSpec(detail="full"), measures=sf.MEASURE_SET
        )
        results.add(encoded, measures)
        files = results.finish([Document(s.doc_id, "", "f", 0) for s in encoded])
        records.append(
            CommitRecord(
                "r", k, len(encoded), results.tokens, results.rows, files_of(files), seconds=0.0
            )
        )
        values = np.concatenate([m[:, 1].ravel() for m in measures]).astype(np.float64)
        want_n.append(values.size)
        want_sum.append(values.sum())
    for f in Path(layout.run_dir("r"), "commits").glob("*.json"):
        f.unlink()

    def check(committed: int) -> None:
        con = connect(str(tmp_path))
        got = con.execute(
            "SELECT sum(n), sum(sum) FROM layer_stats WHERE measure = 'attn_n'"
        ).fetchone()
        assert got[0] == sum(want_n[:committed])
        assert close(got[1], float(np.sum(want_sum[:committed])))
        # token_stats merged from partials whose singleton rows are NULL (schema 4) and a
        # dense generation: Σ², min and max as the per-token values give them
        vals = np.concatenate([m[:, 1].ravel() for _, ms in shards[:committed] for m in ms])
        got = con.execute(
            "SELECT sum(n), sum(sumsq), min(min), max(max), count(*) FILTER (min IS NULL "
            "OR max IS NULL OR sumsq IS NULL) FROM token_stats WHERE measure = 'attn_n'"
        ).fetchone()
        v64 = vals.astype(np.float64)
        assert got[0] == vals.size and close(got[1], float((v64 * v64).sum()))
        assert got[2] == float(vals.min()) and got[3] == float(vals.max()) and got[4] == 0

    for k, rec in enumerate(records):
        manifest.commit_shard(layout, "r", rec)
        check(k + 1)
        if k in (1, 2, 4):  # generations 1-3 mid-way, partials in between
            consolidation.consolidate(layout, "r")
            check(k + 1)
    assert generations.latest(layout, "r").generation == 3
    consolidation.consolidate(layout, "r")
    check(len(records))


def test_a_crash_after_the_record_leaves_no_double_count(full_run, tmp_path):
    """A partial the consolidation did not get to delete is ignored, then removed."""
    import shutil

    root, summary = full_run
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    layout = Layout.open(str(copy))
    want = _queries(str(copy))
    # put a partial of a consolidated shard back, as a crash before the deletes leaves it
    gen = generations.latest(layout, summary.run_id)
    kind = "layer_stats"
    src = Path(copy, gen.files[kind]["path"])
    stale = Path(layout.shard_file(kind, summary.run_id, 0))
    stale.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, stale)
    assert _queries(str(copy)) == want
    consolidation.consolidate(layout, summary.run_id)
    assert not stale.exists() and _queries(str(copy)) == want


#: jobs/wikitext2.yaml's overrides onto the shared plain-text copy (its header says so)
WIKITEXT_OFFLINE = {
    "corpus.format": "text",
    "corpus.dataset": None,
    "corpus.dataset_config": None,
    "corpus.dataset_split": None,
    "corpus.paths": [str(WIKITEXT)],
}


def test_the_wikitext2_job_reads_the_hub_and_the_shared_copy_alike():
    """jobs/wikitext2.yaml runs from a clone: a hub dataset for users (valid with no
    network: the hub is read when the job plans), the shared text file for CI with the
    overrides its header gives."""
    path = str(Path(__file__).parents[1] / "jobs" / "wikitext2.yaml")
    hub = load_spec(path)
    assert (hub.corpus.format, hub.corpus.dataset) == ("hf", "Salesforce/wikitext")
    assert (hub.corpus.dataset_config, hub.corpus.dataset_split) == ("wikitext-2-raw-v1", "test")
    text = load_spec(path, WIKITEXT_OFFLINE)
    assert text.corpus.format == "text" and text.corpus.dataset is None
    assert text.corpus.skip_regex == hub.corpus.skip_regex and text.name == "wikitext2-minilm"
    header = Path(path).read_text().split("\nname:")[0]
    for key, value in WIKITEXT_OFFLINE.items():
        if key != "corpus.paths":
            assert f"--set {key}={'null' if value is None else value}" in header


@pytest.mark.skipif(not WIKITEXT.is_file(), reason="the shared WikiText-2 corpus is not here")
def test_wikitext2_histogram_rho_is_within_1e3_of_exact(ray_local, minilm_path, tmp_path):
    """The WikiText-2 job (first 500 paragraphs, MiniLM): histogram rho vs exact rho."""
    spec = load_spec(
        str(Path(__file__).parents[1] / "jobs" / "wikitext2.yaml"),
        {
            "model": minilm_path,
            "out": str(tmp_path),
            # the spec streams the hub's dataset; CI reads the same text from ../shared
            **WIKITEXT_OFFLINE,
            "corpus.limit": 500,
            "output.detail": "full",
            "runtime.workers": 2,
        },
    )
    assert run_job(spec, show_progress=False).status == "complete"
    con = connect(str(tmp_path))
    approx = run_query(con, "frequency_correlation").fetchall()
    exact = run_query(con, "frequency_correlation_exact").fetchall()
    assert len(approx) == len(exact) == 5
    for a, e in zip(approx, exact, strict=True):
        assert a[:2] == e[:2] and a[4:6] == e[4:6]  # run, measure, occurrence counts
        for k in (2, 3):  # rho_all, rho_no_special
            assert abs(a[k] - e[k]) <= min(1e-3, a[6]), (a, e)
    depth = run_query(con, "depth_correlation").fetchall()
    assert all(0 <= r[4] < 0.01 for r in depth)


def test_consolidated_statistics_are_the_same_bits_in_any_merge_order(tmp_path):
    """Shards merged at once, or two by two in other orders: identical consolidated files."""
    import shutil

    import sql_fixtures as sf

    rng = np.random.default_rng(11)
    seqs = sf.make_sequences(rng, 16, pairs=True)
    root = tmp_path / "base"
    layout = Layout.open(str(root))
    shards = [sf.shard_arrays(seqs[k : k + 4], 3, rng) for k in range(0, 16, 4)]
    # values that are not multiples of 1/8: sums that round differently in another order
    for _, measures in shards:
        for m in measures:
            m += rng.random(m.shape, dtype=np.float32) / 1000
            m[:, 2] = m[:, 0] / 2
    sf.write_synthetic_run(layout, "r", shards, name="r", step=None, consolidated=False)
    results = []
    for order in ([0, 1, 2, 3], [3, 1], [2, 0]):
        copy = tmp_path / f"copy{len(results)}"
        shutil.copytree(root, copy)
        lay = Layout.open(str(copy))
        commits = Path(lay.run_dir("r")) / "commits"
        hidden = tmp_path / f"hidden{len(results)}"
        hidden.mkdir()
        for f in commits.glob("*.json"):  # only the shards of `order` are committed at first
            if int(f.stem) not in order:
                f.rename(hidden / f.name)
        consolidation.consolidate(lay, "r")
        for f in hidden.glob("*.json"):
            f.rename(commits / f.name)
        final = consolidation.consolidate(lay, "r")
        assert final.shards == frozenset(range(4))
        tables = {k: pq.read_table(Path(copy, v["path"])) for k, v in final.files.items()}
        # rows in key order (a merge may list them in any order), every value to the bit
        results.append(
            {k: sorted(zip(*t.to_pydict().values(), strict=True)) for k, t in tables.items()}
        )
    assert results[0] == results[1] == results[2]
    # and the views read them as they are
    assert _queries(str(tmp_path / "copy0")) == _queries(str(tmp_path / "copy1"))


def _by_key(rows: list[dict], keys: tuple[str, ...]) -> list[dict]:
    return sorted(rows, key=lambda r: tuple(r[k] for k in keys))


def test_a_shard_added_block_by_block_equals_the_whole_block():
    """The worker adds a shard chunk by chunk: the accumulators merge keys exactly."""
    import sql_fixtures as sf
    from mixscope.stats.accumulate import ShardStatistics, statistics
    from mixscope.stats.token_block import Vocabulary, token_block

    rng = np.random.default_rng(5)
    seqs = sf.make_sequences(rng, 40, pairs=True, unk_every=3)
    encoded, measures = sf.shard_arrays(seqs, 3, rng)
    for m in measures:  # not multiples of 1/8
        m += rng.random(m.shape, dtype=np.float32) / 1000
    vocab = Vocabulary(sf.SyntheticTokenizer())
    whole = statistics(token_block(encoded, measures, vocab, sf.MEASURE_SET), vocab, sf.MEASURE_SET)
    acc = ShardStatistics(vocab, sf.MEASURE_SET)
    for lo, hi in ((0, 7), (7, 8), (8, 30), (30, len(encoded))):  # chunks share many keys
        acc.add(token_block(encoded[lo:hi], measures[lo:hi], vocab, sf.MEASURE_SET))
    parts = acc.tables()
    assert set(parts) == set(whole) == set(STATS)
    for kind, table in whole.items():
        got, want = parts[kind].to_pylist(), table.to_pylist()
        keys = STATS[kind].key_names
        assert len(got) == len(want), kind
        for g, w in zip(_by_key(got, keys), _by_key(want, keys), strict=True):
            for col, value in w.items():
                if isinstance(value, float):
                    assert math.isclose(g[col], value, rel_tol=1e-12, abs_tol=1e-15), (kind, col)
                else:
                    assert g[col] == value, (kind, col)


def files_of(files: dict) -> dict[str, FileEntry]:
    """The commit record's files from ``ShardAccumulator.finish``'s manifest entries."""
    return {k: FileEntry.from_json(e, k) for k, e in files.items()}
