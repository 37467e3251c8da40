"""Singleton rows of a shard's statistics: stored once, restored by every reader.

Most token keys occur once in a shard (58% of ``token_stats`` rows on a 76.8k-token
WikiText-like shard), and for a key seen once Σ², min and max are functions of Σ:
Σ² = Σ·Σ (the accumulator adds v·v to 0.0: the same float64 product) and min = max = Σ as
float32 (Σ is the float64 of a float32 value: the cast back is exact). A shard's file
leaves those columns NULL there (``StatsKind.singletons``; schema 4), which halves its
bytes and its encoding time, and :func:`restore` (Python) and :func:`sql_value` (the SQL
views) give every reader the dense values, bit for bit; the writer's side is
``stats.tables.kind_table(..., singleton=n == 1)``.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from mixscope.store.schema import StatsKind


def restore(kind: StatsKind, table: pa.Table) -> pa.Table:
    """``table`` with every singleton NULL replaced by its value (a no-op on dense files)."""
    for column, source, how in kind.singletons:
        if column not in table.column_names:
            continue
        values = table[column]
        if not values.null_count and not table.schema.field(column).nullable:
            continue  # dense already: a consolidated file, or restored before
        if values.null_count:
            s = table[source]
            fill = pc.multiply(s, s) if how == "square" else pc.cast(s, values.type)
            values = pc.coalesce(values, fill)
        i = table.column_names.index(column)
        table = table.set_column(i, pa.field(column, values.type, nullable=False), values)
    return table


def sql_value(kind: StatsKind, column: str) -> str:
    """The SQL expression of ``column`` in a shard's file, its singleton NULLs restored."""
    for name, source, how in kind.singletons:
        if name == column:
            fill = f"{source} * {source}" if how == "square" else f"{source}::FLOAT"
            return f"COALESCE({column}, {fill})"
    return column
