"""The views over per-document and per-token files: ``tokens``, ``occurrences``, ``documents``.

``tokens`` and ``occurrences`` read the detail (``output.detail``): they always have a
column per measure of the selected runs' groups, NULL in a run without the measure or
whose detail files lack it, so a query's columns do not depend on which runs kept rows.
When no selected run kept rows they refuse to answer with one line saying what each run
kept (its mode, its rate and how many documents) instead of answering with nothing.

``documents`` is one row per document of every committed shard (``ROOT/documents/``,
``store/layout.py``): ``run_id``, ``doc_id``, its source ``file``, ``offset`` and
``external_id``, its ``segments`` and ``tokens``, and ``in_detail`` (whether its per-token
rows are in ``tokens``); written in every detail mode.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from mixscope.registry import MeasureSet
from mixscope.store.run_record import RunRecord
from mixscope.store.schema import DOCUMENT_SCHEMA, category_sql

# run ids are hex: an all-digit one must not be inferred as a number
HIVE = "hive_partitioning = true, hive_types = {'run_id': VARCHAR}"

#: the long ``tokens`` view's columns before the measures (schema 1's order, + original_id)
TOKEN_COLUMNS = (
    "doc_id",
    "segment",
    "position",
    "token_id",
    "token",
    "token_type",
    "is_special",
    "is_masked",
)

#: Arrow type → DuckDB type, for the typed NULL columns of empty views (views.py too)
DUCK_TYPES = {
    pa.int8(): "TINYINT",
    pa.int16(): "SMALLINT",
    pa.int32(): "INTEGER",
    pa.int64(): "BIGINT",
    pa.float32(): "FLOAT",
    pa.float64(): "DOUBLE",
    pa.string(): "VARCHAR",
    pa.bool_(): "BOOLEAN",
}


def sql_list(paths: Sequence[str]) -> str:
    return "[" + ", ".join(quote(p) for p in paths) + "]"


def quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def measure_expr(
    ms: MeasureSet, measure: str, template: str, cast: str = "", power: int = 1
) -> str:
    """``template`` ({m} = a stored measure) for ``measure``, derived ones scaled by the
    factor to ``power`` (2 for sums of squares), and cast to ``cast`` (FLOAT keeps a float32
    value float32, exactly, as the engine made it)."""
    derived = ms.derived
    if measure in derived:
        source, factor = derived[measure]
        scaled = f"(({template.format(m=source)}) * {factor**power})"
        return f"{scaled}::{cast}" if cast else scaled
    return template.format(m=measure)


def _empty_detail(ms: MeasureSet) -> str:
    return (
        "SELECT NULL::VARCHAR AS run_id, NULL::BIGINT AS doc_id, NULL::INTEGER AS segment, "
        "NULL::INTEGER AS position, NULL::INTEGER AS token_id, NULL::INTEGER AS original_id, "
        "NULL::VARCHAR AS token, NULL::TINYINT AS token_type, NULL::BOOLEAN AS is_special, "
        "NULL::BOOLEAN AS is_masked, NULL::TINYINT AS category, "
        + ", ".join(f"NULL::FLOAT[] AS {m}" for m in ms.stored)
        + " WHERE false"
    )


def detail_source(files: list[str], in_files: MeasureSet, ms: MeasureSet, union: bool) -> str:
    """The detail rows of ``files`` (whose runs store ``in_files``) with a list column for
    every stored measure of ``ms`` (NULL where the files have none); no files: no rows."""
    if not files:
        return f"({_empty_detail(ms)})"
    absent = [m for m in ms.stored if m not in in_files.stored]
    extra = "".join(f", NULL::FLOAT[] AS {m}" for m in absent)
    by_name = ", union_by_name = true" if union else ""
    return f"(SELECT *{extra} FROM read_parquet({sql_list(files)}, {HIVE}{by_name}))"


def no_rows_message(runs: list[RunRecord]) -> str:
    """Why the selected ``runs`` have no per-token rows, run by run (by run id, so the
    message does not depend on which run's clock second came first): what each kept."""
    kept = []
    for r in sorted(runs, key=lambda r: r.run_id):
        docs = r.corpus.get("n_docs")
        of = f"0 of {docs:,} documents" if isinstance(docs, int) else "no documents"
        if r.detail == "sample":
            rate = (r.options.get("output") or {}).get("sample_rate")
            kept.append(f"{r.run_id}: output.detail=sample at rate {rate} kept {of}")
        elif r.detail == "none":
            kept.append(f"{r.run_id}: output.detail=none kept no rows")
        else:
            kept.append(f"{r.run_id}: output.detail={r.detail}, no shard with rows committed")
    return (
        f"no per-token rows ({'; '.join(kept)}); the statistics views (layer_stats, "
        "token_stats, …) and every named query still answer; for rows run the job with "
        "--detail full, or --detail sample (the rate's documents, and at least one per shard)"
    )


def create_detail_views(con: Any, source: str, missing: str | None, ms: MeasureSet) -> None:
    """``tokens`` (one row per token per layer) and ``occurrences`` over the detail rows
    ``source``, with a column per measure of ``ms`` (the selected runs' groups; NULL in a
    run without the measure).

    ``missing``: why there are no rows (every selected run without detail); then both
    views raise that message when read instead of answering with nothing.
    """
    if missing is not None:
        empty = _empty_detail(ms).replace(" WHERE false", "")
        source = f"({empty} WHERE error({quote(missing)}) IS NULL)"
    category = category_sql("category")
    per_layer = ", ".join(
        f"{measure_expr(ms, m, '{m}[l.layer]', 'FLOAT')} AS {m}" for m in ms.columns
    )
    # every run has at least one stored measure; its list's length is the layer count
    lists = ", ".join(f"d.{m}" for m in ms.stored)
    con.execute(
        f"CREATE VIEW tokens AS SELECT run_id, {', '.join(TOKEN_COLUMNS)}, "
        f"l.layer::SMALLINT AS layer, {per_layer}, {category} AS category, original_id "
        f"FROM {source} d, LATERAL (SELECT unnest(range(1, len(coalesce({lists})) + 1))"
        " AS layer) l"
    )
    averaged = ", ".join(
        f"{measure_expr(ms, m, 'list_avg({m})')}::DOUBLE AS {m}" for m in ms.columns
    )
    # one row per token occurrence: the measures averaged over the layers (the unit of the
    # paper's frequency analysis)
    con.execute(
        "CREATE VIEW occurrences AS SELECT run_id, doc_id, segment, position, token_id, token, "
        f"{category} AS category, {averaged}, original_id FROM {source} d"
    )


def create_documents_view(con: Any, files: list[str]) -> None:
    """``documents``: the committed documents files (module docstring); no rows without."""
    names = ", ".join(f'"{f.name}"' for f in DOCUMENT_SCHEMA)  # "offset" is a keyword
    if files:
        source = f"read_parquet({sql_list(files)}, {HIVE}, union_by_name = true)"
    else:
        cols = ", ".join(f'NULL::{DUCK_TYPES[f.type]} AS "{f.name}"' for f in DOCUMENT_SCHEMA)
        source = f"(SELECT NULL::VARCHAR AS run_id, {cols} WHERE false)"
    con.execute(f"CREATE VIEW documents AS SELECT run_id, {names} FROM {source}")
