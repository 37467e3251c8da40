"""What the pipeline and reliability tests share: a small job, its CLI, a content hash."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

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
