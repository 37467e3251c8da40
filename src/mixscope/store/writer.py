"""Parquet shard files: zstd, the explicit schema, dictionary-encoded tokens, atomic rename."""

from __future__ import annotations

import hashlib
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from mixscope.store.layout import Layout


def options(schema: pa.Schema) -> dict[str, Any]:
    """zstd; dictionaries for ids, flags and strings; byte-stream-split floats.

    Measures are near-unique floats: a dictionary only costs there (and never overflows in
    small row groups), while splitting their bytes into streams lets zstd find the shared
    exponents: 12 instead of 22 bytes per float32 token-layer value on real data.
    """
    floats, others = [], []
    for f in schema:
        t = f.type.value_type if pa.types.is_list(f.type) else f.type
        if pa.types.is_floating(t):
            floats.append(f"{f.name}.list.element" if pa.types.is_list(f.type) else f.name)
        else:
            others.append(f.name)
    return {
        "compression": "zstd",
        "use_dictionary": others,
        "use_byte_stream_split": floats or False,
        "write_statistics": True,
    }


def parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=1 << 20, **options(table.schema))
    return sink.getvalue().to_pybytes()


class ParquetBuffer:
    """A Parquet file encoded in memory one row group at a time (``add``), so the encoding
    can run as the parts arrive; ``getvalue`` closes it and returns its bytes."""

    def __init__(self, schema: pa.Schema) -> None:
        self._sink = pa.BufferOutputStream()
        self._writer = pq.ParquetWriter(self._sink, schema, **options(schema))
        self.rows = 0

    def add(self, table: pa.Table) -> None:
        self._writer.write_table(table, row_group_size=1 << 20)
        self.rows += table.num_rows

    def getvalue(self) -> bytes:
        self._writer.close()
        return self._sink.getvalue().to_pybytes()


def write_bytes(layout: Layout, path: str, data: bytes, rows: int) -> dict:
    """Write encoded Parquet ``data`` to ``path`` atomically; the manifest entry."""
    layout.write_bytes_atomic(path, data)
    return {
        "path": layout.relative(path),
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "rows": rows,
    }


def write_parquet(layout: Layout, path: str, table: pa.Table) -> dict:
    """Write ``table`` to ``path`` atomically; its size and sha256 for the manifest."""
    return write_bytes(layout, path, parquet_bytes(table), table.num_rows)
