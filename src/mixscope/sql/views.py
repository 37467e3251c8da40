"""A read-only DuckDB connection whose views see committed shards only.

The file lists come from the commit records (never a glob over data folders), so a file
that is half-written, renamed but not committed, or left by a crashed attempt is invisible.

Views: ``tokens`` (one row per token per layer, all committed runs, with ``run_id`` and a
``category``: normal, mask, cls, sep, other_special), ``runs`` (one row per run),
``frequencies`` (per run and per imported reference: token_id, token, count, rank; rank 1 =
most frequent, ties share the lowest rank) and the helper ``measures`` (the five names).
"""

from __future__ import annotations

import json
from typing import Any

from mixscope.errors import MixscopeError
from mixscope.store import manifest
from mixscope.store.layout import Layout
from mixscope.store.references import reference_files
from mixscope.store.runs import list_runs
from mixscope.store.schema import MEASURE_COLUMNS

EMPTY_TOKENS = """
SELECT * FROM (SELECT NULL::VARCHAR AS run_id, NULL::BIGINT AS doc_id, NULL::INTEGER AS segment,
  NULL::INTEGER AS position, NULL::INTEGER AS token_id, NULL::VARCHAR AS token,
  NULL::TINYINT AS token_type, NULL::BOOLEAN AS is_special, NULL::BOOLEAN AS is_masked,
  NULL::SMALLINT AS layer, NULL::FLOAT AS attn_w, NULL::FLOAT AS attn_n, NULL::FLOAT AS attnres_w,
  NULL::FLOAT AS attnres_n, NULL::FLOAT AS attnresln_n) WHERE false
"""

# special-token strings of the supported tokenizers, by role
CLS_TOKENS = ("[CLS]", "<s>", "<cls>", "<|begin_of_text|>", "<bos>")
SEP_TOKENS = ("[SEP]", "</s>", "<sep>", "<|endoftext|>", "<|end_of_text|>", "<eos>")

# run ids are hex: an all-digit one must not be inferred as a number
HIVE = "hive_partitioning = true, hive_types = {'run_id': VARCHAR}"

RUN_COLUMNS = """run_id VARCHAR, name VARCHAR, model VARCHAR, checkpoint_path VARCHAR,
  revision VARCHAR, model_fingerprint VARCHAR, step BIGINT, corpus VARCHAR,
  corpus_fingerprint VARCHAR, n_docs BIGINT, options VARCHAR, status VARCHAR,
  shards_total INTEGER, shards_done INTEGER, shards_failed INTEGER, rows BIGINT, tokens BIGINT,
  created_at TIMESTAMP, updated_at TIMESTAMP"""


# One row per token occurrence: the five measures averaged over the layers (the unit of the
# paper's frequency analysis).
OCCURRENCES = """
CREATE VIEW occurrences AS
SELECT run_id, doc_id, segment, position,
    any_value(token_id) AS token_id, any_value(token) AS token, any_value(category) AS category,
    avg(attn_w) AS attn_w, avg(attn_n) AS attn_n, avg(attnres_w) AS attnres_w,
    avg(attnres_n) AS attnres_n, avg(attnresln_n) AS attnresln_n
FROM tokens
GROUP BY run_id, doc_id, segment, position
"""

# occurrences with the frequency rank of their token: the run's own corpus counts when
# ``ref`` is NULL, else the imported reference table ``ref`` (keyed by token id, or by token
# string when the reference has no ids); tokens missing from a reference are left out.
RANKED_OCCURRENCES = """
CREATE MACRO ranked_occurrences(ref) AS TABLE
SELECT o.*, f.rank AS freq_rank
FROM occurrences o JOIN frequencies f ON f.run_id = o.run_id AND f.token_id = o.token_id
WHERE ref IS NULL
UNION ALL
SELECT o.*, f.rank
FROM occurrences o JOIN frequencies f ON f.token_id = o.token_id
WHERE f.reference = ref AND f.token_id IS NOT NULL
UNION ALL
SELECT o.*, f.rank
FROM occurrences o JOIN frequencies f ON f.token = o.token
WHERE f.reference = ref AND f.token_id IS NULL
"""


def _sql_list(paths: list[str]) -> str:
    return "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


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
    )


def connect(
    root: str,
    *,
    run_ids: list[str] | None = None,
    threads: int | None = None,
    memory_limit: str | None = None,
    read_only: bool = True,
) -> Any:
    """An in-memory DuckDB connection with the views over ``root``.

    ``read_only`` (the default) forbids file access outside ``root`` and locks the settings;
    statements are further restricted by :func:`mixscope.sql.readonly.execute`.
    """
    import duckdb

    layout = Layout.open(root)
    if not layout.is_local:
        raise MixscopeError(
            "SQL over object-store roots is not supported yet; sync to a local path"
        )
    con = duckdb.connect(":memory:")
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    if memory_limit:
        con.execute(f"SET memory_limit = {_quote(memory_limit)}")
    committed = manifest.committed_files_by_kind(layout, ("tokens", "frequencies"), run_ids)
    tokens, freqs = committed["tokens"], committed["frequencies"]
    refs = reference_files(layout)

    cls, sep = ", ".join(map(_quote, CLS_TOKENS)), ", ".join(map(_quote, SEP_TOKENS))
    category = (
        "CASE WHEN is_masked THEN 'mask' WHEN NOT is_special THEN 'normal' "
        f"WHEN token IN ({cls}) THEN 'cls' WHEN token IN ({sep}) THEN 'sep' "
        "ELSE 'other_special' END"
    )
    source = f"read_parquet({_sql_list(tokens)}, {HIVE})" if tokens else f"({EMPTY_TOKENS})"
    con.execute(f"CREATE VIEW tokens AS SELECT *, {category} AS category FROM {source}")

    parts = []
    if freqs:
        parts.append(
            "SELECT run_id, NULL::VARCHAR AS reference, token_id, any_value(token) AS token, "
            f"sum(count)::BIGINT AS count FROM read_parquet({_sql_list(freqs)}, "
            f"{HIVE}) GROUP BY run_id, token_id"
        )
    for name, path in refs.items():
        parts.append(
            f"SELECT NULL::VARCHAR AS run_id, {_quote(name)} AS reference, token_id, token, "
            f"count FROM read_parquet({_quote(path)})"
        )
    if not parts:
        parts.append(
            "SELECT NULL::VARCHAR AS run_id, NULL::VARCHAR AS reference, NULL::INTEGER AS "
            "token_id, NULL::VARCHAR AS token, NULL::BIGINT AS count WHERE false"
        )
    con.execute(
        "CREATE VIEW frequencies AS SELECT *, rank() OVER (PARTITION BY run_id, reference "
        f"ORDER BY count DESC) AS rank FROM ({' UNION ALL '.join(parts)})"
    )

    con.execute(OCCURRENCES)
    con.execute(RANKED_OCCURRENCES)

    runs = [r for r in list_runs(layout) if run_ids is None or r["run_id"] in run_ids]
    con.execute(f"CREATE TABLE runs ({RUN_COLUMNS})")
    if runs:
        marks = ", ".join("?" * len(_run_row(runs[0])))
        con.executemany(f"INSERT INTO runs VALUES ({marks})", [_run_row(r) for r in runs])
    con.execute(
        "CREATE TABLE measures AS SELECT * FROM (VALUES "
        + ", ".join(f"({k}, {_quote(m)})" for k, m in enumerate(MEASURE_COLUMNS))
        + ") AS m(ord, measure)"
    )
    if read_only:
        con.execute(f"SET allowed_directories = [{_quote(layout.base + '/')}]")
        con.execute("SET enable_external_access = false")
        con.execute("SET autoinstall_known_extensions = false")
        con.execute("SET autoload_known_extensions = false")
        con.execute("SET lock_configuration = true")
    return con
