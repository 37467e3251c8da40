"""Bad input files: each counted per reason, never a crash, shown by ``status``."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from mixscope.cli import main
from mixscope.config import load_spec
from mixscope.runtime.driver import run_job
from mixscope.sql.views import connect


def _corpus(folder):
    """Files of every kind of bad input, with the good documents among them."""
    folder.mkdir()
    (folder / "a_good.txt").write_text("one good line\nanother good line\n\nthird one\n")
    (folder / "b_bom_crlf.txt").write_bytes(b"\xef\xbb\xbfwindows line one\r\nline two\r\n")
    (folder / "c_binary.txt").write_bytes(b"\x00\x01\x02 binary \x00" * 100)
    (folder / "d_utf8.txt").write_bytes(b"fine text\nbad \xff\xfe bytes\n")
    (folder / "e_nul.txt").write_bytes(b"padding line\n" * 700 + b"a NUL \x00 late\n")
    (folder / "f_huge.txt").write_bytes(b"x" * (10 << 20) + b"\nafter the huge line\n")
    (folder / "g_empty.txt").write_bytes(b"")
    (folder / "h_records.jsonl").write_text(
        "\n".join(
            [
                json.dumps({"text": "a json document"}),
                json.dumps({"text": 5}),
                json.dumps({"body": "no text field"}),
                "not json at all",
                json.dumps(["a", "list"]),
            ]
        )
        + "\n"
    )
    pq.write_table(pa.table({"body": ["wrong column"]}), folder / "i_wrong.parquet")
    (folder / "j_fake.parquet").write_bytes(b"PAR1 this is not parquet")
    good = 3 + 2 + 1 + 700 + 1 + 1  # a, b, d, e (padding), f (after the huge line), h
    bad = {
        "binary": 1,
        "invalid_utf8": 1,
        "nul_bytes": 1,
        "oversized": 1,
        "empty_file": 1,
        "missing_field": 3,
        "invalid_json": 1,
        "missing_column": 1,
        "unreadable_file": 1,
    }
    return good, bad


@pytest.mark.scenario(
    "Bad input files",
    injected="one corpus folder with binary, invalid UTF-8, NUL bytes, a 10 MB line, an "
    "empty file, BOM + CRLF, JSONL with missing / non-string text, Parquet with the wrong "
    "column and a file that is not Parquet",
    checked="the job completes; every bad record counted under its reason in run.json and "
    "shown by `status`; exactly the good documents analysed (BOM and CR stripped)",
)
def test_bad_input_files_are_counted_per_reason(tiny_bert_dir, tmp_path):
    good, bad = _corpus(tmp_path / "corpus")
    out = tmp_path / "out"
    spec = load_spec(
        None,
        {
            "model": tiny_bert_dir,
            "corpus.paths": [str(tmp_path / "corpus")],
            "out": str(out),
            "runtime.executor": "local",
            "runtime.docs_per_shard": 256,
            "analysis.max_length": 16,
            "output.detail": "full",
        },
    )
    summary = run_job(spec, show_progress=False)
    assert summary.status == "complete"
    record = json.loads((out / "_mixscope" / "runs" / summary.run_id / "run.json").read_text())
    assert record["corpus"]["bad"] == bad
    assert record["corpus"]["n_docs"] == good
    con = connect(str(out))
    assert con.execute("SELECT count(DISTINCT doc_id) FROM tokens").fetchone()[0] == good
    texts = {r[0] for r in con.execute("SELECT token FROM tokens").fetchall()}
    assert "\ufeff" not in "".join(texts) and "\r" not in "".join(texts)
    result = CliRunner().invoke(main, ["status", str(out)])
    assert result.exit_code == 0
    line = next(ln for ln in result.output.splitlines() if "input not analysed" in ln)
    for reason, n in bad.items():
        assert f"{reason} {n}" in line
