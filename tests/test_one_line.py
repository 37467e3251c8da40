"""Errors as one line: the shared helpers, and the status of a shard whose error is empty."""

from __future__ import annotations

import pytest

from mixscope.errors import first_line, one_line
from mixscope.runtime.status import run_status, shard_status
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
        {"shard_id": 0, "n_docs": 3, "first_doc": 0},
        {"shard_id": 1, "n_docs": 3, "first_doc": 3},
    ]
    layout.write_json(f"{run}/plan.json", {"shards": shards})
    layout.write_json(layout.failure_file("r1", 0), {"shard_id": 0, "attempts": 3, "error": ""})
    layout.write_json(layout.failure_file("r1", 1), {"shard_id": 1, "attempts": 1})

    (row,) = run_status(str(tmp_path))
    assert (row["done"], row["failed"], row["pending"]) == (0, 2, 0)
    assert row["errors"] == {0: "", 1: ""}
    states = [
        (r["shard"], r["state"], r["error"], r["attempts"])
        for r in shard_status(str(tmp_path), "r1")
    ]
    assert states == [(0, "failed", "", 3), (1, "failed", "", 1)]
