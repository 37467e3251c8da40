"""Parquet shard files: zstd, the explicit schema, dictionary-encoded tokens, atomic rename.

Statistics files (``stats_options``) are encoded differently from the detail, by
measurement (``benchmarks/host.py``): their integer keys and counts are long sorted or
slowly varying runs, which delta encoding stores in a fraction of a dictionary's bytes
and time, and their float moments are near-unique, where zstd's fast level -1 costs 60%
of level 1's time for 0.3% more bytes (lz4 would be faster still, but +4.5% bytes and a
codec older Parquet readers lack: every file stays zstd).
"""

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


#: columns of the statistics that stay dictionary-encoded: few distinct values (and strings)
_DICTIONARY = frozenset({"layer", "category", "token_type", "measure", "token"})


def stats_options(schema: pa.Schema, partial: bool = False) -> dict[str, Any]:
    """Statistics tables: delta-encoded integers (ids, bins, counts), dictionaries for the
    columns of few values and for strings, byte-stream-split floats at zstd level -1,
    everything else zstd level 1. On a 76.8k-token shard: ``token_stats`` 1.6x faster to
    encode for +0.3% bytes, the histograms 1.1x faster and 30-40% smaller than
    ``options``. ``partial``: a shard's statistics, transient (merged into the run's table
    within ``CONSOLIDATE_EVERY`` commits, then deleted) and read whole: no Parquet column
    statistics (min/max per column chunk, used for pruning only), which cost a third of
    ``token_stats``' encoding time for no bytes saved (``benchmarks/host.py``)."""
    floats = [f.name for f in schema if pa.types.is_floating(f.type)]
    delta = [f.name for f in schema if pa.types.is_integer(f.type) and f.name not in _DICTIONARY]
    return {
        "compression": "zstd",
        "compression_level": {n: -1 if n in floats else 1 for n in schema.names},
        "use_dictionary": [n for n in schema.names if n not in floats and n not in delta],
        "use_byte_stream_split": False,
        "column_encoding": {
            **{n: "DELTA_BINARY_PACKED" for n in delta},
            **{n: "BYTE_STREAM_SPLIT" for n in floats},
        },
        "write_statistics": not partial,
    }


def parquet_buffer(table: pa.Table, stats: bool = False, partial: bool = False) -> pa.Buffer:
    """``table`` encoded as Parquet (``stats``: with ``stats_options``, else ``options``),
    in Arrow's buffer (hashing and writing read it in place: no copy into ``bytes``)."""
    sink = pa.BufferOutputStream()
    opts = stats_options(table.schema, partial) if stats else options(table.schema)
    pq.write_table(table, sink, row_group_size=1 << 20, **opts)
    return sink.getvalue()


def parquet_bytes(table: pa.Table, stats: bool = False) -> bytes:
    return parquet_buffer(table, stats).to_pybytes()


#: parts are gathered into row groups of at least this many rows before they are encoded
ROW_GROUP_MIN = 1 << 16


class ParquetBuffer:
    """A Parquet file encoded in memory as its parts arrive (``add``), so the encoding runs
    beside the model; ``getvalue`` closes it and returns its bytes. Parts are gathered into
    row groups of ``ROW_GROUP_MIN`` rows first: encoding a row group has a fixed cost (per
    column: encoders, statistics, a page), which small parts (a sample's few documents per
    chunk) would pay once each, and larger row groups compress and read better."""

    def __init__(self, schema: pa.Schema) -> None:
        self._sink = pa.BufferOutputStream()
        self._writer = pq.ParquetWriter(self._sink, schema, **options(schema))
        self._parts: list[pa.Table] = []
        self._pending = 0
        self.rows = 0

    def add(self, table: pa.Table) -> None:
        self._parts.append(table)
        self._pending += table.num_rows
        self.rows += table.num_rows
        if self._pending >= ROW_GROUP_MIN:
            self._flush()

    def _flush(self) -> None:
        if self._parts:
            self._writer.write_table(pa.concat_tables(self._parts), row_group_size=1 << 20)
            self._parts, self._pending = [], 0

    def getvalue(self) -> pa.Buffer:
        self._flush()
        self._writer.close()
        return self._sink.getvalue()


def write_bytes(layout: Layout, path: str, data: bytes | pa.Buffer, rows: int) -> dict:
    """Write encoded Parquet ``data`` to ``path`` atomically; the manifest entry."""
    layout.write_bytes_atomic(path, data)
    return {
        "path": layout.relative(path),
        "bytes": data.size if isinstance(data, pa.Buffer) else len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "rows": rows,
    }


def write_parquet(
    layout: Layout, path: str, table: pa.Table, stats: bool = False, partial: bool = False
) -> dict:
    """Write ``table`` to ``path`` atomically (``stats``: a statistics table, encoded with
    ``stats_options``, ``partial``: a shard's); its size and sha256 for the manifest."""
    return write_bytes(layout, path, parquet_buffer(table, stats, partial), table.num_rows)
