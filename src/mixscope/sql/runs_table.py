"""The ``runs`` table of a connection: one row per run, from the run records.

A table, not a view over files: run records are small JSON documents, read once per
connection (``store/runs.py``), flattened here into the columns the named queries join on.
"""

from __future__ import annotations

import json
from typing import Any

RUN_COLUMNS = """run_id VARCHAR, name VARCHAR, model VARCHAR, checkpoint_path VARCHAR,
  revision VARCHAR, model_fingerprint VARCHAR, step BIGINT, corpus VARCHAR,
  corpus_fingerprint VARCHAR, n_docs BIGINT, options VARCHAR, status VARCHAR,
  shards_total INTEGER, shards_done INTEGER, shards_failed INTEGER, rows BIGINT, tokens BIGINT,
  created_at TIMESTAMP, updated_at TIMESTAMP, detail VARCHAR, sample_rate DOUBLE,
  dtype VARCHAR"""


def detail_mode(r: dict[str, Any]) -> str:
    """A run's ``output.detail`` (runs of schema 1 kept every row)."""
    return ((r.get("options") or {}).get("output") or {}).get("detail") or "full"


def _run_row(r: dict[str, Any]) -> tuple:
    model = r.get("model") or {}
    spec = r.get("spec") or {}
    corpus = r.get("corpus") or {}
    return (
        r["run_id"],
        r.get("name"),
        spec.get("model") or model.get("source"),
        model.get("source") if model.get("kind") == "local" else None,
        model.get("revision"),
        model.get("fingerprint"),
        r.get("step"),
        ", ".join(corpus.get("paths") or []),
        corpus.get("fingerprint"),
        corpus.get("n_docs"),
        json.dumps(r.get("options") or {}, sort_keys=True),
        r.get("status"),
        r.get("shards_total"),
        r.get("shards_done"),
        r.get("shards_failed"),
        r.get("rows"),
        r.get("tokens"),
        (r.get("created_at") or "").replace("T", " ").rstrip("Z") or None,
        (r.get("updated_at") or "").replace("T", " ").rstrip("Z") or None,
        detail_mode(r),
        ((r.get("options") or {}).get("output") or {}).get("sample_rate"),
        ((r.get("options") or {}).get("analysis") or {}).get("dtype"),
    )


def create_runs_table(con: Any, runs: list[dict[str, Any]]) -> None:
    """``CREATE TABLE runs`` on ``con`` with one row per run record in ``runs``."""
    con.execute(f"CREATE TABLE runs ({RUN_COLUMNS})")
    if runs:
        marks = ", ".join("?" * len(_run_row(runs[0])))
        con.executemany(f"INSERT INTO runs VALUES ({marks})", [_run_row(r) for r in runs])
