"""Parquet shard files: zstd, the explicit schema, dictionary-encoded tokens, atomic rename."""

from __future__ import annotations

import hashlib
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from mixscope.store.layout import Layout

OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "use_dictionary": True,
    "write_statistics": True,
}


def parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=1 << 20, **OPTIONS)
    return sink.getvalue().to_pybytes()


class ParquetBuffer:
    """A Parquet file encoded in memory one row group at a time (``add``), so the encoding
    can run as the parts arrive; ``getvalue`` closes it and returns its bytes."""

    def __init__(self, schema: pa.Schema) -> None:
        self._sink = pa.BufferOutputStream()
        self._writer = pq.ParquetWriter(self._sink, schema, **OPTIONS)
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
