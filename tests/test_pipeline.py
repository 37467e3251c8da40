"""The batch pipeline end to end on a real local Ray (faults: tests/reliability/)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pytest
from click.testing import CliRunner

import mixscope
from mixscope._version import SCHEMA_VERSION
from mixscope.cli import main
from mixscope.errors import MixscopeError
from mixscope.runtime.driver import run_job
from mixscope.sql.views import connect
from mixscope.store import manifest
from mixscope.store.layout import Layout
from run_helpers import DEMO, KEYS, content_hash, job_spec


@pytest.fixture(scope="module")
def clean_run(ray_local, tiny_bert_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("clean")
    summary = run_job(job_spec(tiny_bert_dir, out), show_progress=False)
    return summary, str(out), content_hash(str(out))


def test_two_actors_end_to_end_real_model(ray_local, minilm_path, tmp_path):
    spec = job_spec(minilm_path, tmp_path, **{"analysis.max_length": 128})
    summary = run_job(spec, show_progress=False)
    assert summary.status == "complete" and summary.shards_done == summary.shards_total == 8
    texts = [ln for ln in DEMO.read_text().splitlines() if ln.strip()]
    expected = mixscope.analyze(minilm_path, texts, max_length=128)
    con = connect(str(tmp_path))
    got = con.sql(f"SELECT * EXCLUDE (run_id) FROM tokens ORDER BY {KEYS}").to_arrow_table()
    assert got.num_rows == expected.num_rows  # Σ tokens × layers
    assert (
        con.execute(f"SELECT count(*) FROM (SELECT DISTINCT {KEYS} FROM tokens)").fetchone()[0]
        == got.num_rows
    )
    for col in ("doc_id", "segment", "position", "token_id", "layer", "is_special"):
        assert got[col].to_pylist() == expected[col].to_pylist(), col
    for m in mixscope.MEASURES:
        np.testing.assert_allclose(got[m].to_numpy(), expected[m].to_numpy(), atol=1e-5)
    # frequencies count every token of the corpus once
    total = con.execute("SELECT sum(count) FROM frequencies").fetchone()[0]
    assert total == got.num_rows // 6
    # files: zstd, explicit schema version, dictionary-encoded tokens
    import pyarrow.parquet as pq

    f = manifest.committed_files(Layout.open(str(tmp_path)), "tokens")[0]
    meta = pq.ParquetFile(f)
    assert meta.schema_arrow.metadata[b"mixscope.schema_version"] == str(SCHEMA_VERSION).encode()
    assert meta.metadata.row_group(0).column(0).compression == "ZSTD"
    token = meta.schema_arrow.get_field_index("token")
    assert "RLE_DICTIONARY" in str(meta.metadata.row_group(0).column(token).encodings)
    record = json.loads((tmp_path / "_mixscope" / "runs" / summary.run_id / "run.json").read_text())
    assert record["status"] == "complete" and record["corpus"]["n_docs"] == 30
    assert {"torch", "transformers", "ray", "mixscope"} <= set(record["libraries"])


def test_cli_run_prints_sql_summary_and_bad_inputs(ray_local, tiny_bert_dir, tmp_path):
    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "ok.txt").write_bytes(b"\xef\xbb\xbfA fine line.\r\nAnother fine line.\r\n")
    (corpus / "empty.txt").write_bytes(b"")
    (corpus / "bad.txt").write_bytes(
        b"\xff\xfe\xfa not utf8\n" + b"y" * (2 * 1024 * 1024) + b"\nok again\n"
    )
    (corpus / "blob.bin").write_bytes(bytes(range(256)) * 64)
    result = CliRunner().invoke(
        main,
        [
            "run",
            "--model",
            tiny_bert_dir,
            "--corpus",
            str(corpus),
            "--out",
            str(tmp_path / "o"),
            "--workers",
            "1",
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert lines[0].split()[:2] == ["layer", "tokens"] and len(lines) == 2 + 2  # two layers
    run_dir = next((tmp_path / "o" / "_mixscope" / "runs").iterdir())
    record = json.loads((run_dir / "run.json").read_text())
    assert record["corpus"]["n_docs"] == 3
    assert record["corpus"]["bad"] == {
        "binary": 1,
        "invalid_utf8": 1,
        "oversized": 1,
        "empty_file": 1,
    }


def test_a_run_on_the_embedded_ray_opens_with_mixscope_s_own_lines(tiny_bert_dir, tmp_path):
    """Ray logs that a new local instance enabled token authentication; for mixscope's own
    embedded instance that notice is not shown (a user's first lines are mixscope's). The
    shell has no RAY_AUTH_MODE, as a user's: that is when Ray logs it."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_ADDRESS")}
    out = tmp_path / "o"
    args = ["--model", tiny_bert_dir, "--corpus", str(DEMO), "--out", str(out), "--workers", "1"]
    result = subprocess.run(
        [sys.executable, "-m", "mixscope.cli", "run", *args, "--max-length", "32", "--no-progress"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "Token authentication" not in result.stdout + result.stderr
    assert result.stdout.split()[:2] == ["layer", "tokens"]  # the summary table comes first
    assert re.search(r"^run \w+: complete", result.stderr, re.M), result.stderr


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["run", "--model", "m", "--out", "o"], 2, "corpus.paths: required"),
        (
            ["run", "--corpus", "/no/such/dir", "--out", "o"],
            1,
            "corpus path /no/such/dir does not exist",
        ),
        (["run", "jobs/nope.yaml"], 2, "job spec jobs/nope.yaml does not exist"),
        (
            ["run", "--corpus", __file__, "--set", "runtime.workers=0"],
            2,
            "runtime.workers: at least 1",
        ),
    ],
)
def test_cli_errors(args, code, message):
    """Exit 2 for a bad spec or flag, 1 for other errors (README: exit codes)."""
    result = CliRunner().invoke(main, args)
    assert result.exit_code == code and message in result.output
    assert "Traceback" not in result.output


def test_empty_corpus_is_a_clear_error(tmp_path):
    (tmp_path / "empty.txt").write_text("\n\n")
    result = CliRunner().invoke(
        main, ["run", "--corpus", str(tmp_path / "empty.txt"), "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 1
    assert "the corpus has no documents to analyse" in result.output
    assert not (tmp_path / "o").exists()  # nothing started


def test_duckdb_reads_the_results_without_mixscope(clean_run):
    _, out, (rows, _) = clean_run
    # raw readers see hive-partitioned, committed files (no temporary file matches *.parquet):
    # one row per token, each measure a list over the layers
    sql = (
        "SELECT count(*), sum(len(attn_n)) FROM "
        f"read_parquet('{out}/tokens/*/*.parquet', hive_partitioning=true)"
    )
    tokens, token_layers = duckdb.sql(sql).fetchall()[0]
    assert token_layers == rows and tokens * 2 == rows  # the tiny BERT has two layers
    # and the statistics: one consolidated file per kind, no partial left
    sql = f"SELECT sum(n) FROM read_parquet('{out}/stats/layer_stats/*/*.parquet')"
    assert duckdb.sql(sql).fetchall()[0][0] == rows


def test_output_root_as_uri(ray_local, tiny_bert_dir, tmp_path, clean_run):
    """file:// through pyarrow's filesystems (as s3:// or gs:// would be), with Ray actors."""
    uri = (tmp_path / "viauri").as_uri()
    summary = run_job(job_spec(tiny_bert_dir, uri), show_progress=False)
    assert summary.status == "complete"
    assert content_hash(uri) == clean_run[2]


def test_output_root_on_an_fsspec_filesystem(tiny_bert_dir, clean_run):
    """memory:// has no pyarrow filesystem: it goes through fsspec (in-process executor)."""
    root = "memory://mixscope-test/results"
    summary = run_job(
        job_spec(tiny_bert_dir, root, **{"runtime.executor": "local"}), show_progress=False
    )
    assert summary.status == "complete"
    layout = Layout.open(root)
    files = manifest.committed_files(layout, "tokens")
    assert len(files) == summary.shards_total
    rows = sum(layout.read_table(f).num_rows for f in files)
    assert 2 * rows == clean_run[2][0]  # one row per token, lists of the two layers' values
    # the statistics went through fsspec too: consolidated, every token-layer row once
    from mixscope.store.generations import latest

    gen = latest(layout, summary.run_id)
    stats = layout.read_table(layout.absolute(gen.files["layer_stats"]["path"]))
    assert sum(stats["n"].to_pylist()) == clean_run[2][0]


def test_validate_checks_without_running_the_corpus(tiny_bert_dir, tmp_path):
    result = CliRunner().invoke(
        main,
        ["validate", "--model", tiny_bert_dir, "--corpus", str(DEMO), "--out", str(tmp_path / "o")],
    )
    assert result.exit_code == 0, result.output
    assert "30 documents, 1 shards" in result.stdout
    assert "exactness identity holds" in result.stdout
    assert not (tmp_path / "o").exists()  # nothing analysed or written
    bad = CliRunner().invoke(main, ["validate", "--model", str(tmp_path), "--corpus", str(DEMO)])
    assert bad.exit_code == 1 and "not a model directory" in bad.output


def test_run_identity_hashes_the_resolved_max_length(tiny_bert_dir, tmp_path):
    """Leaving max_length to the model and naming the model's limit are the same run."""
    from mixscope.models.loading import load
    from mixscope.runtime.driver import prepare

    limit = load(tiny_bert_dir).max_positions
    implicit = prepare(
        job_spec(tiny_bert_dir, tmp_path, **{"analysis.max_length": None}), write=False
    )
    explicit = prepare(
        job_spec(tiny_bert_dir, tmp_path, **{"analysis.max_length": limit}), write=False
    )
    shorter = prepare(job_spec(tiny_bert_dir, tmp_path, **{"analysis.max_length": 32}), write=False)
    assert implicit.run_id == explicit.run_id != shorter.run_id
    assert implicit.record.options["analysis"]["max_length"] == limit
    with pytest.raises(MixscopeError, match=f"exceeds this model's limit of {limit} positions"):
        prepare(
            job_spec(tiny_bert_dir, tmp_path, **{"analysis.max_length": limit + 1}), write=False
        )


def test_status_json_has_stable_keys_and_the_run_s_numbers(clean_run):
    """``status --json``: one document, format 1, whose numbers are the commit records' and
    whose shard rows add up to the run's; the table shows the same numbers."""
    summary, out, (rows, _) = clean_run
    result = CliRunner().invoke(main, ["status", out, "--json", "--shards"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["format"] == 1 and doc["root"] == out
    (run,) = doc["runs"]
    assert set(run) >= {
        *("run_id", "name", "model", "step", "status", "detail", "shards_total", "done"),
        *("failed", "pending", "rows", "tokens", "tokens_per_s", "errors", "damaged"),
        *("bad_input", "pairs", "created_at", "updated_at", "shards"),
    }
    assert run["run_id"] == summary.run_id and run["status"] == "complete"
    # a run you can tell apart: its default name is its model's, its groups and detail
    assert run["name"] == Path(run["model"]).name
    assert (run["groups"], run["detail"], run["sample_rate"]) == (["paper"], "full", None)
    assert (run["done"], run["failed"], run["pending"]) == (summary.shards_total, 0, 0)
    assert run["rows"] == rows and run["damaged"] == [] and run["errors"] == {}
    assert [s["shard"] for s in run["shards"]] == list(range(summary.shards_total))
    assert {s["state"] for s in run["shards"]} == {"done"}
    assert sum(s["rows"] for s in run["shards"]) == rows
    assert sum(s["tokens"] for s in run["shards"]) == run["tokens"]
    table = CliRunner().invoke(main, ["status", out])
    assert table.exit_code == 0
    assert table.output.splitlines()[0].split()[:6] == [
        *("run_id", "name", "model", "step", "status", "groups")
    ]
    assert table.output.splitlines()[2].split()[0] == summary.run_id
    assert f"{rows:,}" in table.output or str(rows) in table.output
