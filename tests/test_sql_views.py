"""SQL views: exactly the committed rows, never an uncommitted or partial file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import sql_fixtures as sf
from mixscope.sql.named import all_queries, run_query
from mixscope.sql.views import connect
from mixscope.store.layout import Layout
from mixscope.store.manifest import record_failure
from mixscope.store.writer import parquet_bytes, write_parquet
from sql_oracle import (
    CATEGORIES,
    MEASURES,
    _invoke,
    assert_rows,
    rows_of,
)

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
    layout.write_json(layout.plan_path("half"), {"shards": []})
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
        if q.groups:  # a measure group's query (none here): tests/test_measure_runs.py
            continue
        params = {"a": edge, "b": "ckpt-100"} if name.startswith("compare_") else {}
        assert run_query(con, name, params).fetchall() is not None, q.name
    result = _invoke("sql", str(root), "SELECT count(*) AS n FROM tokens", "--format", "csv")
    assert result.exit_code == 0 and result.stdout.splitlines() == ["n", str(before["rows"][0])]


def test_runs_of_schema_3_read_the_token_strings_of_their_own_files(tmp_path, monkeypatch):
    """Before schema 4, token_stats and token_hist files carried ``token`` on every row and
    there was no ``token_strings``: a root holding such a run (partials, merged at read
    time) beside a schema-4 run shows every row's string, each from where its run keeps it."""
    import pyarrow as pa

    from mixscope.stats.accumulate import ShardStatistics
    from mixscope.stats.token_block import Vocabulary

    real = ShardStatistics.tables

    def schema_3(self):
        out = real(self)
        strings = out.pop("token_strings")
        lookup = dict(
            zip(strings["token_id"].to_pylist(), strings["token"].to_pylist(), strict=True)
        )
        for name in ("token_stats", "token_hist"):
            t = out[name]
            ids = t["token_id"].to_pylist()
            out[name] = t.append_column("token", pa.array([lookup[i] for i in ids]))
        return out

    rng = np.random.default_rng(5)
    seqs = sf.make_sequences(rng, 12)
    shards = [sf.shard_arrays(seqs[k : k + 4], 2, rng) for k in range(0, 12, 4)]
    layout = Layout.open(str(tmp_path))
    old = {"analysis": {"mask_rate": 0.3}, "output": {"detail": "full"}, "schema_version": 3}
    with monkeypatch.context() as mp:
        mp.setattr(ShardStatistics, "tables", schema_3)
        sf.write_synthetic_run(
            layout, "old", shards[:2], name="old", step=None, options=old, consolidated=False
        )
    assert not list(tmp_path.rglob("*token_strings*/**/*.parquet"))
    sf.write_synthetic_run(layout, "new", shards[2:], name="new", step=None)
    con = connect(str(tmp_path))
    vocab = Vocabulary(sf.SyntheticTokenizer())
    for view in ("token_stats", "token_hist"):
        rows = con.execute(f"SELECT DISTINCT run_id, token_id, token FROM {view}").fetchall()
        assert {r[0] for r in rows} == {"old", "new"}, view
        want = vocab.arrow(np.array([r[1] for r in rows])).to_pylist()
        assert [r[2] for r in rows] == want and None not in want, view
    top = run_query(con, "top_tokens", {"min_count": 1}).fetchall()  # strings at the end
    assert {r[0] for r in top} == {"old", "new"} and all(r[4] is not None for r in top)
