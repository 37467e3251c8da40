"""The ``runs`` table of a connection: one row per run, from the run records.

A table, not a view over files: run records are small JSON documents, read once per
connection (``store/runs.py``, typed: ``store/run_record.py``), flattened here into the
columns the named queries join on.
"""

from __future__ import annotations

import json
from typing import Any

from mixscope.store.run_record import RunRecord

RUN_COLUMNS = """run_id VARCHAR, name VARCHAR, model VARCHAR, checkpoint_path VARCHAR,
  revision VARCHAR, model_fingerprint VARCHAR, step BIGINT, corpus VARCHAR,
  corpus_fingerprint VARCHAR, n_docs BIGINT, options VARCHAR, status VARCHAR,
  shards_total INTEGER, shards_done INTEGER, shards_failed INTEGER, rows BIGINT, tokens BIGINT,
  created_at TIMESTAMP, updated_at TIMESTAMP, detail VARCHAR, sample_rate DOUBLE,
  dtype VARCHAR, measures VARCHAR"""


def _timestamp(iso: str) -> str | None:
    return iso.replace("T", " ").rstrip("Z") or None


def _run_row(r: RunRecord) -> tuple:
    model, corpus, options = r.model, r.corpus, r.options
    return (
        r.run_id,
        r.name,
        r.spec.get("model") or model.get("source"),
        model.get("source") if model.get("kind") == "local" else None,
        model.get("revision"),
        model.get("fingerprint"),
        r.step,
        ", ".join(corpus.get("paths") or []),
        corpus.get("fingerprint"),
        corpus.get("n_docs"),
        json.dumps(options, sort_keys=True),
        r.status,
        r.shards_total,
        r.shards_done,
        r.shards_failed,
        r.rows,
        r.tokens,
        _timestamp(r.created_at),
        _timestamp(r.updated_at),
        r.detail,
        (options.get("output") or {}).get("sample_rate"),
        (options.get("analysis") or {}).get("dtype"),
        ",".join(r.groups),  # the measure groups (runs before groups: the paper's)
    )


def create_runs_table(con: Any, runs: list[RunRecord]) -> None:
    """``CREATE TABLE runs`` on ``con`` with one row per run record in ``runs``."""
    con.execute(f"CREATE TABLE runs ({RUN_COLUMNS})")
    if runs:
        marks = ", ".join("?" * len(_run_row(runs[0])))
        con.executemany(f"INSERT INTO runs VALUES ({marks})", [_run_row(r) for r in runs])
