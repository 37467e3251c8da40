"""A DuckDB connection whose views see committed shards only.

The file lists come from the commit records (never a glob over data folders), so a file
that is half-written, renamed but not committed, or left by a crashed attempt is invisible.
"""

from __future__ import annotations

from typing import Any

from mixscope.store import manifest
from mixscope.store.layout import Layout
from mixscope.store.runs import list_runs

EMPTY_TOKENS = """
SELECT * FROM (SELECT NULL::VARCHAR AS run_id, NULL::BIGINT AS doc_id, NULL::INTEGER AS segment,
  NULL::INTEGER AS position, NULL::INTEGER AS token_id, NULL::VARCHAR AS token,
  NULL::TINYINT AS token_type, NULL::BOOLEAN AS is_special, NULL::BOOLEAN AS is_masked,
  NULL::SMALLINT AS layer, NULL::FLOAT AS attn_w, NULL::FLOAT AS attn_n, NULL::FLOAT AS attnres_w,
  NULL::FLOAT AS attnres_n, NULL::FLOAT AS attnresln_n) WHERE false
"""


def _sql_list(paths: list[str]) -> str:
    return "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"


def connect(
    root: str,
    *,
    run_ids: list[str] | None = None,
    threads: int | None = None,
    memory_limit: str | None = None,
) -> Any:
    """An in-memory DuckDB connection with ``tokens``, ``frequencies`` and ``runs`` views."""
    import duckdb

    layout = Layout.open(root)
    if not layout.is_local:
        raise NotImplementedError("SQL over object stores arrives with the SQL layer")
    con = duckdb.connect(":memory:")
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    if memory_limit:
        con.execute("SET memory_limit = ?", [memory_limit])
    tokens = manifest.committed_files(layout, "tokens", run_ids)
    freqs = manifest.committed_files(layout, "frequencies", run_ids)
    if tokens:
        con.execute(
            f"CREATE VIEW tokens AS SELECT * FROM read_parquet({_sql_list(tokens)}, "
            "hive_partitioning = true)"
        )
    else:
        con.execute(f"CREATE VIEW tokens AS {EMPTY_TOKENS}")
    if freqs:
        con.execute(
            "CREATE VIEW frequencies AS SELECT run_id, token_id, sum(count)::BIGINT AS count "
            f"FROM read_parquet({_sql_list(freqs)}, hive_partitioning = true) "
            "GROUP BY run_id, token_id"
        )
    else:
        con.execute(
            "CREATE VIEW frequencies AS SELECT NULL::VARCHAR AS run_id, NULL::INTEGER AS token_id,"
            " NULL::BIGINT AS count WHERE false"
        )
    runs = [r for r in list_runs(layout) if run_ids is None or r["run_id"] in run_ids]
    rows = [
        (
            r["run_id"],
            r.get("name"),
            (r.get("model") or {}).get("source"),
            (r.get("model") or {}).get("revision"),
            (r.get("model") or {}).get("fingerprint"),
            r.get("step"),
            (r.get("corpus") or {}).get("fingerprint"),
            r.get("status"),
            r.get("shards_total"),
            r.get("shards_done"),
            r.get("rows"),
            r.get("created_at"),
            r.get("updated_at"),
        )
        for r in runs
    ]
    con.execute(
        "CREATE TABLE runs (run_id VARCHAR, name VARCHAR, model VARCHAR, revision VARCHAR, "
        "model_fingerprint VARCHAR, step BIGINT, corpus_fingerprint VARCHAR, status VARCHAR, "
        "shards_total INTEGER, shards_done INTEGER, rows BIGINT, created_at VARCHAR, "
        "updated_at VARCHAR)"
    )
    if rows:
        con.executemany("INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    return con
