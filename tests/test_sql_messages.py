"""Messages that are true (issue 37): what the SQL side says when a user gets something
wrong or asks for rows that were not kept. Real runs, real Parquet, real DuckDB; every
message asserted as the user reads it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import sql_fixtures as sf
from mixscope.config import OutputSpec, load_spec
from mixscope.errors import MixscopeError
from mixscope.runtime.driver import run_job
from mixscope.sql.named import run_query
from mixscope.sql.views import connect
from mixscope.store.layout import Layout
from sql_oracle import _invoke

DEMO = Path(__file__).parents[1] / "jobs" / "data" / "demo.txt"

#: what the no-rows message says after what each run kept
STILL = (
    "the statistics views (layer_stats, token_stats, …) and every named query still answer; "
    "for rows run the job with --detail full, or --detail sample (the rate's documents, and "
    "at least one per shard)"
)


def _err(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1, result.output
    return lines[0]


# -- SQL errors keep DuckDB's hints -------------------------------------------------------


def test_sql_errors_keep_duckdbs_hints_on_one_line(synth_root):
    root = synth_root["root"]
    got = _err(_invoke("sql", root, "SELECT * FROM tokns"))
    assert got == (
        "Error: SQL error: Catalog Error: Table with name tokns does not exist! "
        'Did you mean "tokens"?'
    )
    got = _err(_invoke("sql", root, "SELECT layerr FROM layer_stats"))
    assert got.startswith(
        'Error: SQL error: Binder Error: Referenced column "layerr" not found in FROM clause! '
        'Candidate bindings: "layer"'
    )
    assert "LINE 1" not in got  # the quoted statement and its caret are left out


# -- the detail: what was kept --------------------------------------------------------------


def test_no_rows_message_says_what_each_run_kept(tmp_path, monkeypatch):
    """A sample run that kept nothing (as runs before the one-per-shard minimum could) and a
    run without detail: the message names each, its mode, rate and documents kept."""
    layout = Layout.open(str(tmp_path))
    rng = np.random.default_rng(5)
    monkeypatch.setattr(sf, "OutputSpec", lambda detail: OutputSpec(detail="none"))
    for run_id, output, second in (
        ("old-sample", {"detail": "sample", "sample_rate": 0.01}, 1),
        ("no-detail", {"detail": "none"}, 2),
    ):
        # old-sample is the older run (as CI once timed it): the message still lists by id
        monkeypatch.setattr(sf, "now", lambda s=second: f"2026-01-01T00:00:0{s}Z")
        seqs = sf.make_sequences(rng, 3)
        sf.write_synthetic_run(
            layout,
            run_id,
            [sf.shard_arrays(seqs, 2, rng)],
            name=run_id,
            step=None,
            options={"analysis": {"mask_rate": 0.3}, "output": output, "schema_version": 5},
        )
    got = _err(_invoke("sql", str(tmp_path), "SELECT count(*) FROM tokens"))
    assert got == (
        "Error: SQL error: Invalid Input Error: no per-token rows (no-detail: output.detail=none "
        "kept no rows; old-sample: output.detail=sample at rate 0.01 kept 0 of 3 documents); "
        + STILL
    )
    # the documents view has every document, none of them in the detail
    con = connect(str(tmp_path))
    assert con.execute(
        "SELECT count(*), count(*) FILTER (in_detail) FROM documents"
    ).fetchone() == (
        6,
        0,
    )


def test_an_empty_tokens_view_has_the_runs_measure_columns(tiny_bert_dir, tmp_path):
    """A run of the paper and FF groups without detail: a query naming an FF measure gets
    the no-rows message, not "Referenced column not found"."""
    spec = load_spec(
        None,
        {
            "model": tiny_bert_dir,
            "corpus.paths": [str(DEMO)],
            "out": str(tmp_path),
            "analysis.max_length": 24,
            "analysis.measures": ["paper", "ff"],
            "runtime.executor": "local",
            "output.detail": "none",
        },
    )
    s = run_job(spec, show_progress=False)
    con = connect(str(tmp_path))
    columns = [r[0] for r in con.execute("DESCRIBE tokens").fetchall()]
    measures = [m for (m,) in con.execute("SELECT measure FROM measures ORDER BY ord").fetchall()]
    assert "ffresln_n" in measures and set(measures) <= set(columns)
    got = _err(_invoke("sql", str(tmp_path), "SELECT avg(ffresln_n) FROM tokens"))
    assert got == (
        "Error: SQL error: Invalid Input Error: no per-token rows "
        f"({s.run_id}: output.detail=none kept no rows); " + STILL
    )


def test_a_small_corpus_sampled_at_one_percent_has_rows(tiny_bert_dir, tmp_path):
    """30 documents at the default rate (1%): no document hashes under it, so each of the
    10 shards keeps its smallest-hash document, and the documents view says which."""
    result = _invoke(
        "run",
        "--model",
        tiny_bert_dir,
        "--corpus",
        str(DEMO),
        "--out",
        str(tmp_path),
        "--detail",
        "sample",
        "--set",
        "runtime.executor=local",
        "--set",
        "runtime.docs_per_shard=3",
        "--max-length",
        "24",
        "--no-progress",
    )
    assert result.exit_code == 0, result.output
    con = connect(str(tmp_path))
    kept = [d for (d,) in con.execute("SELECT DISTINCT doc_id FROM tokens ORDER BY 1").fetchall()]
    in_detail = con.execute("SELECT doc_id FROM documents WHERE in_detail ORDER BY 1").fetchall()
    assert len(kept) == 10 and [d for (d,) in in_detail] == kept
    assert [d // 3 for d in kept] == list(range(10))  # one per shard of 3


# -- parameter values that no selected run has ----------------------------------------------


def test_misspelled_parameter_values_list_what_exists(synth_root):
    con = connect(synth_root["root"])
    cases = {
        ("token_types", "measure", "atn_w"): "query token_types: no selected run has measure "
        "'atn_w'; measures: attn_w, attn_n, attnres_w, attnres_n, attnresln_n",
        ("token_types", "layer", "4"): "query token_types: no selected run has layer 4; "
        "layers: 1-3",
        ("token_types", "layer", "two"): "query token_types: --param layer expects a layer "
        "number, got 'two'",
        ("token_types", "category", "masked"): "query token_types: no selected run has tokens "
        "of category 'masked'; categories: cls, mask, normal, other_special, sep",
        ("summary", "run_id", "ckpt-"): "query summary --param run_id: run 'ckpt-' is "
        "ambiguous: ckpt-100, ckpt-200, ckpt-300 (give more characters)",
        ("summary", "run_id", "nope"): "query summary --param run_id: no selected run 'nope'; "
        "selected runs: ckpt-100, ckpt-200, ckpt-300, edge, other-50",
    }
    for (query, param, value), message in cases.items():
        with pytest.raises(MixscopeError) as err:
            run_query(con, query, {param: value})
        assert str(err.value) == message
    # a run's own: the other-50 run has 1 layer, and no [UNK] (category other_special)
    with pytest.raises(MixscopeError, match="run other-50 has no layer 2; layers: 1-1"):
        run_query(con, "token_types", {"run_id": "other", "layer": "2"})


def test_parameter_values_that_exist_filter_and_prefixes_resolve(synth_root):
    con = connect(synth_root["root"])
    full = run_query(con, "token_types", {"run_id": "edge"}).fetchall()
    got = run_query(
        con, "token_types", {"run_id": "ed", "measure": "attn_n", "layer": "2", "category": "sep"}
    ).fetchall()
    assert got == [r for r in full if r[1:4] == (2, "attn_n", "sep")] and len(got) == 1
    profile = run_query(con, "layer_profile", {"run_id": "edge"}).fetchall()
    one = run_query(con, "layer_profile", {"run_id": "edge", "measure": "attnres_w"}).fetchall()
    assert one == [r for r in profile if r[2] == "attnres_w"] and len(one) == 3
    # the CLI: --param run_id and --run take prefixes too
    result = _invoke("query", synth_root["root"], "summary", "--param", "run_id=ckpt-2")
    assert result.exit_code == 0 and "ckpt-200" in result.stdout and "(5 rows)" in result.stdout
    result = _invoke("sql", synth_root["root"], "SELECT run_id FROM runs", "--run", "oth")
    assert result.exit_code == 0 and "other-50" in result.stdout and "(1 row)" in result.stdout
    assert _err(_invoke("sql", synth_root["root"], "SELECT 1", "--run", "ckpt")) == (
        "Error: run 'ckpt' is ambiguous: ckpt-100, ckpt-200, ckpt-300 (give more characters)"
    )


def test_report_run_takes_unique_prefixes(synth_root, tmp_path):
    root = synth_root["root"]
    assert _err(_invoke("report", root, "--run", "ckpt", "--no-examples")) == (
        "Error: run 'ckpt' is ambiguous: ckpt-100, ckpt-200, ckpt-300 (give more characters)"
    )
    out = tmp_path / "report.html"
    result = _invoke("report", root, "--run", "edg", "--no-examples", "--output", str(out))
    assert result.exit_code == 0, result.output
    assert "edge" in out.read_text()


# -- the documents view ------------------------------------------------------------------------


def test_documents_view_is_every_committed_document(synth_root, tmp_path):
    con = connect(synth_root["root"])
    per_run = dict(con.execute("SELECT run_id, count(*) FROM documents GROUP BY 1").fetchall())
    n_docs = dict(con.execute("SELECT run_id, n_docs FROM runs").fetchall())
    assert (
        per_run
        == n_docs
        == {
            "ckpt-100": 8,
            "ckpt-200": 8,
            "ckpt-300": 8,
            "other-50": 4,
            "edge": 9,
        }
    )
    # tokens per document agree with the detail (full: every document in it)
    got = con.execute(
        "SELECT d.run_id, d.doc_id, d.tokens, d.segments, d.in_detail, count(t.position), "
        "count(DISTINCT t.segment) FROM documents d LEFT JOIN occurrences t "
        "USING (run_id, doc_id) GROUP BY ALL"
    ).fetchall()
    assert got and all(r[2] == r[5] and r[3] == r[6] and r[4] for r in got)
    assert ("edge", 3) in {(r[0], r[1]) for r in got if r[3] == 2}  # the split document
    # an empty root: the view's columns, no rows
    empty = connect(str(tmp_path))
    assert [r[0] for r in empty.execute("DESCRIBE documents").fetchall()] == [
        "run_id",
        "doc_id",
        "file",
        "offset",
        "external_id",
        "segments",
        "tokens",
        "in_detail",
    ]
    assert empty.execute("SELECT count(*) FROM documents").fetchone() == (0,)


def test_the_shards_minimum_document_does_not_depend_on_chunking(tmp_path):
    """The one-per-shard document is the shard's smallest hash however its chunks fall
    (a resumed or repeated shard keeps the same one): one chunk, and one per sequence."""
    import pyarrow.parquet as pq

    from mixscope.corpus.plan import Document
    from mixscope.runtime.host_path import ShardAccumulator
    from mixscope.stats.detail import doc_hash
    from mixscope.stats.token_block import Vocabulary

    rng = np.random.default_rng(7)
    seqs, measures = sf.shard_arrays(sf.make_sequences(rng, 12, split_doc=10), 2, rng)
    ids = np.arange(12)
    want = int(ids[np.argmin(doc_hash(ids))])
    assert want == 10  # by hand: the split document, so its rows span two chunks below
    docs = [Document(d, f"text {d}", "/x.txt", d) for d in range(12)]
    output = OutputSpec(detail="sample", sample_rate=1e-9)  # no document under the rate
    kept = []
    for k, chunk in enumerate((len(seqs), 1)):
        layout = Layout.open(str(tmp_path / str(k)))
        vocab = Vocabulary(sf.SyntheticTokenizer())
        results = ShardAccumulator(layout, "r", 0, vocab, output, measures=sf.MEASURE_SET)
        for i in range(0, len(seqs), chunk):
            results.add(seqs[i : i + chunk], measures[i : i + chunk])
        files = results.finish(docs)
        detail = pq.read_table(layout.absolute(files["tokens"]["path"]))
        flags = pq.read_table(layout.absolute(files["documents"]["path"]))
        assert set(detail["doc_id"].to_pylist()) == {want}
        assert [d for d, f in zip(ids, flags["in_detail"].to_pylist(), strict=True) if f] == [want]
        n_tokens = sum(len(s.input_ids) for s in seqs if s.doc_id == want)
        assert results.detail_rows == 2 * n_tokens == 2 * len(detail)
        kept.append(detail)
    assert kept[0].to_pylist() == kept[1].to_pylist()  # the same rows, in the same order
