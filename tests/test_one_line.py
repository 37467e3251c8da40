"""Errors as one line: the shared helpers, and the status of a shard whose error is empty."""

from __future__ import annotations

import pytest

from mixscope.errors import first_line, one_line
from mixscope.status import run_status, shard_status
from mixscope.store.layout import Layout


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ""),
        (None, ""),
        ("   \n\n", ""),
        ("boom", "boom"),
        ("\n  first  \nsecond", "first"),
        ("Traceback\n  File x", "Traceback"),
    ],
)
def test_first_line(text, expected):
    assert first_line(text) == expected


def test_one_line_names_the_type_even_without_a_message():
    assert one_line(ValueError("bad\nvalue")) == "ValueError: bad"
    assert one_line(KeyError()) == "KeyError"
    assert one_line(RuntimeError("  \n")) == "RuntimeError"


def test_status_of_a_shard_that_failed_with_an_empty_error(tmp_path):
    """A failure record whose error is empty (e.g. an exception with no message) used to
    raise IndexError in ``status``: ``"".splitlines()[0]``."""
    layout = Layout.open(str(tmp_path))
    run = layout.run_dir("r1")
    layout.write_json(f"{run}/run.json", {"run_id": "r1", "status": "failed", "shards_total": 2})
    shards = [
        {"shard_id": 0, "file": "a.txt", "start": 0, "n_docs": 3, "first_doc": 0},
        {"shard_id": 1, "file": "a.txt", "start": 30, "n_docs": 3, "first_doc": 3},
    ]
    layout.write_json(f"{run}/plan.json", {"shards": shards})
    layout.write_json(layout.failure_file("r1", 0), {"shard_id": 0, "attempts": 3, "error": ""})
    layout.write_json(layout.failure_file("r1", 1), {"shard_id": 1, "attempts": 1})

    (row,) = run_status(str(tmp_path))
    assert (row["done"], row["failed"], row["pending"]) == (0, 2, 0)
    assert row["errors"] == {"0": "", "1": ""}  # JSON keys (status --json)
    states = [
        (r["shard"], r["state"], r["error"], r["attempts"])
        for r in shard_status(str(tmp_path), "r1")
    ]
    assert states == [(0, "failed", "", 3), (1, "failed", "", 1)]


def test_a_plan_written_by_hand_without_n_docs_is_one_line(tmp_path):
    """``tests/sql_fixtures.py`` and ``benchmarks/sql.py`` once wrote plan shards as
    ``{start, stop}``: ``status --shards`` died with ``KeyError: 'n_docs'``. The typed plan
    names the file and the key instead, and the CLI prints it on one line (exit 1)."""
    from click.testing import CliRunner

    from mixscope.cli import main

    layout = Layout.open(str(tmp_path))
    run = layout.run_dir("r1")
    layout.write_json(f"{run}/run.json", {"run_id": "r1", "status": "complete", "shards_total": 1})
    layout.write_json(f"{run}/plan.json", {"shards": [{"shard_id": 0, "start": 0, "stop": 9}]})
    result = CliRunner().invoke(main, ["status", str(tmp_path), "--shards"])
    assert result.exit_code == 1, result.output
    (line,) = result.stderr.strip().splitlines()
    assert "plan.json" in line and "shard" in line and "Traceback" not in result.output


def test_a_commit_record_without_a_key_is_damage_not_a_crash(tmp_path):
    """A commit record that parses but lacks ``files`` (a hand-written or foreign record) is
    reported by ``status`` as damage of that shard; it used to raise KeyError downstream."""
    layout = Layout.open(str(tmp_path))
    run = layout.run_dir("r1")
    layout.write_json(f"{run}/run.json", {"run_id": "r1", "status": "complete", "shards_total": 1})
    layout.write_json(layout.commit_file("r1", 0), {"shard_id": 0, "rows": 3})
    (row,) = run_status(str(tmp_path))
    assert row["done"] == 0 and row["pending"] == 1
    assert row["damaged"] == [
        {
            "shard": 0,
            "generation": None,
            "what": "commit record unreadable (truncated?)",
            "file": "_mixscope/runs/r1/commits/000000.json",
        }
    ]
