"""What the pipeline and reliability tests share: a small job, its CLI, a content hash."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa

from mixscope.config import JobSpec, load_spec
from mixscope.sql.views import connect

DEMO = Path(__file__).parents[1] / "jobs" / "data" / "demo.txt"
KEYS = "doc_id, segment, position, layer"
STATS_VIEWS = ("layer_stats", "sequence_stats", "token_stats", "token_hist", "layer_hist")


def job_spec(model: str, out, **overrides) -> JobSpec:
    """The demo corpus (30 documents) in 8 shards of 4, 2 workers, one retry, full detail."""
    base = {
        "model": model,
        "corpus.paths": [str(DEMO)],
        "out": str(out),
        "runtime.workers": 2,
        "runtime.docs_per_shard": 4,
        "runtime.batch_size": 4,
        "analysis.max_length": 32,
        "runtime.max_retries": 1,
        "output.detail": "full",
    }
    return load_spec(None, {**base, **overrides})


def executor_events(spec: JobSpec) -> tuple[list, Any, Any]:
    """(every event, the executor, the prepared run) of ``spec``'s shards run straight
    through its executor, closed after: no driver, so nothing is committed, and the caller
    reads what the executor (its pool's actors) did and saw."""
    from mixscope.runtime.driver import prepare
    from mixscope.runtime.executor import make_executor

    prep = prepare(spec)
    executor = make_executor(spec, prep.run_id, prep.max_length)
    try:
        events = list(executor.run(prep.plan.shards))
    finally:
        executor.close()
    return events, executor, prep


def cli_args(model: str, out) -> list[str]:
    """``mixscope run`` arguments of the same job as ``job_spec`` (same run id)."""
    return [
        "--model",
        model,
        "--corpus",
        str(DEMO),
        "--out",
        str(out),
        "--workers",
        "2",
        "--batch-size",
        "4",
        "--max-length",
        "32",
        "--set",
        "runtime.docs_per_shard=4",
        "--set",
        "runtime.max_retries=1",
        "--detail",
        "full",
    ]


def driver_process(args: list[str], env: dict) -> subprocess.Popen:
    """``mixscope run ARGS`` as a separate driver process (killable), output captured."""
    return subprocess.Popen(
        [sys.executable, "-m", "mixscope.cli", "run", *args, "--no-progress"],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def content_hash(root: str) -> tuple[int, str]:
    """Row count and an order-independent hash of every committed token row and statistic."""
    con = connect(root)
    table = con.sql(f"SELECT * EXCLUDE (run_id) FROM tokens ORDER BY {KEYS}").to_arrow_table()
    digest = hashlib.sha256()
    for col in table.column_names:
        digest.update(col.encode())
        arr = table[col].combine_chunks()
        if pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type):
            digest.update(arr.to_numpy(zero_copy_only=False).tobytes())
        else:  # strings, dictionaries, booleans: by value (an object array's bytes are pointers)
            digest.update(json.dumps(arr.to_pylist()).encode())
    # and the statistics, to the bit: exact sums make them independent of merge order
    for view in STATS_VIEWS:
        rows = con.execute(f"SELECT * FROM {view} ORDER BY ALL").fetchall()
        digest.update(repr(rows).encode())
    return table.num_rows, digest.hexdigest()


def duckdb_read(path: str) -> None:
    """Every value of one Parquet file, through DuckDB (what the views read with)."""
    import duckdb

    duckdb.connect().execute(f"SELECT * FROM read_parquet('{path}')").fetchall()


def arrow_read(path: str) -> None:
    """Every value of one Parquet file, through pyarrow (what the report's example reads)."""
    import pyarrow.parquet as pq

    pq.read_table(path)


def flip_unreadable(
    path: Path, read=duckdb_read, *, names_file: bool | None = None, column: str | None = None
) -> int:
    """One bit flipped in the first byte (after the magic number; within ``column``'s
    chunk when given: a byte the query at hand reads) whose change makes ``read(path)``
    fail — and, with ``names_file`` given, fail with an error that does (or does not) name
    the file; the byte's position. Same bytes, same byte: deterministic. (A flip elsewhere
    may change a value without any error: only ``status --verify`` sees those, and
    ``flip_byte`` makes one.)"""
    data = path.read_bytes()
    positions = range(4, len(data) - 8)
    if column is not None:
        import pyarrow.parquet as pq

        meta = pq.ParquetFile(path).metadata.row_group(0)
        names = [meta.column(i).path_in_schema for i in range(meta.num_columns)]
        chunk = meta.column(next(i for i, n in enumerate(names) if n.split(".")[0] == column))
        start = chunk.dictionary_page_offset or chunk.data_page_offset
        positions = range(start, start + chunk.total_compressed_size)
    for pos in positions:
        flip_byte(path, pos, data)
        try:
            read(str(path))
        except Exception as exc:
            if names_file is None or (str(path) in str(exc)) == names_file:
                return pos
    path.write_bytes(data)
    raise AssertionError(f"no single flipped byte makes {path} unreadable")


def flip_byte(path: Path, pos: int | None = None, data: bytes | None = None) -> int:
    """``path`` with one bit of byte ``pos`` (default: the middle one) flipped; the size
    stays, so only the sha256 can tell. ``data``: the file's original bytes."""
    data = path.read_bytes() if data is None else data
    pos = len(data) // 2 if pos is None else pos
    changed = bytearray(data)
    changed[pos] ^= 0x10
    path.write_bytes(bytes(changed))
    return pos
