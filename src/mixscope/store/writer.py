"""Parquet shard files: zstd, the explicit schema, dictionary-encoded tokens, atomic rename."""

from __future__ import annotations

import hashlib

import pyarrow as pa
import pyarrow.parquet as pq

from mixscope.store.layout import Layout


def parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(
        table,
        sink,
        compression="zstd",
        use_dictionary=True,
        write_statistics=True,
        row_group_size=1 << 20,
    )
    return sink.getvalue().to_pybytes()


def write_parquet(layout: Layout, path: str, table: pa.Table) -> dict:
    """Write ``table`` to ``path`` atomically; its size and sha256 for the manifest."""
    data = parquet_bytes(table)
    layout.write_bytes_atomic(path, data)
    return {
        "path": layout.relative(path),
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "rows": table.num_rows,
    }
