"""SQL benchmark: DuckDB over committed results of 10M and 100M token-layer rows.

Writes synthetic rows in the real schema (``TOKENS_SCHEMA``: 12 layers, sequences of 128
tokens starting with [CLS] and ending with [SEP], 12% of the other tokens masked, token ids
Zipf-distributed over a 30,522-word vocabulary, measures uniform in [0, 1]) to a temporary
results directory through the real writer (``write_parquet``: zstd, dictionary tokens) and
commit records (``commit_shard``), in shards of about 2M rows, with the per-shard frequency
files a job writes. Then prints, measured in one run on the same connection:

  - a full scan, ``SELECT count(*), sum(attn_n) FROM tokens`` (rows/s: DuckDB's read rate),
    and for reference a scan summing all five measures (the columns the aggregates read),
  - the named queries ``summary``, ``layer_profile`` and ``frequency_correlation``, each as a
    ratio to the full scan (goal <= 3x for the aggregates ``summary`` and ``layer_profile``;
    ``frequency_correlation`` ranks every token occurrence, five times, so it is reported
    without a goal),
  - bytes on disk per row, and the load average before and after (other work on the machine
    slows every figure alike; the ratios are what to compare).

Each figure is the median of ``--reps`` (default 3) repetitions, the queries interleaved
(scan, summary, layer_profile, frequency_correlation, scan, …) after one warm-up scan.

    python benchmarks/sql.py                      # 10M and 100M rows (as the disk allows)
    python benchmarks/sql.py --quick              # 1M rows
    python benchmarks/sql.py --rows 10M --reps 5 --threads 2 --dir /big/tmp
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

LAYERS = 12
SEQ_LEN = 128
VOCAB = 30522
SHARD_ROWS = 2_000_000
MASK_RATE = 0.12
ZIPF_A = 1.07
CLS, SEP, MASK = 101, 102, 103
QUERIES = ("scan", "scan_5_measures", "summary", "layer_profile", "frequency_correlation")
SCAN = "SELECT count(*), sum(attn_n) FROM tokens"
#: for reference: a scan reading the five measure columns the aggregates read
SCAN_5 = (
    "SELECT count(*), sum(attn_w), sum(attn_n), sum(attnres_w), sum(attnres_n), "
    "sum(attnresln_n) FROM tokens"
)
BYTES_PER_ROW_GUESS = 40  # for the disk check before writing; measured afterwards


def parse_rows(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        part = part.strip().upper()
        scale = {"K": 10**3, "M": 10**6, "G": 10**9}.get(part[-1:], 1)
        out.append(int(float(part.rstrip("KMG")) * scale))
    return out


def human(n: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= 0.9995 * size:
            value = n / size
            return f"{value:.0f}{unit}" if value >= 99.95 else f"{value:.3g}{unit}"
    return f"{n:.0f}"


class Vocabulary:
    """Token strings and a Zipf distribution over ids (the most frequent ids first)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.strings = np.array(
            ["[PAD]" if i == 0 else f"tok{i}" for i in range(VOCAB)], dtype=object
        )
        self.strings[[CLS, SEP, MASK]] = ["[CLS]", "[SEP]", "[MASK]"]
        words = np.setdiff1d(np.arange(1000, VOCAB), [CLS, SEP, MASK])
        self.by_rank = rng.permutation(words)  # id of frequency rank r+1
        weights = 1.0 / np.arange(1, len(words) + 1) ** ZIPF_A
        self.cdf = np.cumsum(weights / weights.sum())

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        ranks = np.searchsorted(self.cdf, rng.random(n), side="right")
        return self.by_rank[np.minimum(ranks, len(self.by_rank) - 1)]


def shard_tables(
    rng: np.random.Generator, vocab: Vocabulary, first_doc: int, n_seqs: int
) -> tuple[pa.Table, pa.Table]:
    """One shard: n_seqs sequences of SEQ_LEN tokens x LAYERS layers, rows position-major."""
    from mixscope.store.schema import MEASURE_COLUMNS, TOKENS_SCHEMA

    original = vocab.draw(rng, n_seqs * SEQ_LEN).reshape(n_seqs, SEQ_LEN)
    original[:, 0], original[:, -1] = CLS, SEP
    special = np.zeros_like(original, dtype=bool)
    special[:, [0, -1]] = True
    masked = (rng.random(original.shape) < MASK_RATE) & ~special
    seen = np.where(masked, MASK, original).ravel()
    n_tok = seen.size
    uniq, inverse = np.unique(seen, return_inverse=True)

    def rep(a):
        return np.repeat(a, LAYERS)

    cols = {
        "doc_id": rep(np.repeat(np.arange(first_doc, first_doc + n_seqs), SEQ_LEN)),
        "segment": np.zeros(n_tok * LAYERS, np.int32),
        "position": rep(np.tile(np.arange(SEQ_LEN, dtype=np.int32), n_seqs)),
        "token_id": rep(seen).astype(np.int32),
        "token": pa.DictionaryArray.from_arrays(
            pa.array(rep(inverse).astype(np.int32)), pa.array(vocab.strings[uniq].tolist())
        ),
        "token_type": np.zeros(n_tok * LAYERS, np.int8),
        "is_special": rep(special.ravel()),
        "is_masked": rep(masked.ravel()),
        "layer": np.tile(np.arange(1, LAYERS + 1, dtype=np.int16), n_tok),
    }
    for m in MEASURE_COLUMNS:
        cols[m] = rng.random(n_tok * LAYERS, dtype=np.float32)
    tokens = pa.Table.from_pydict(cols, schema=TOKENS_SCHEMA)
    ids, counts = np.unique(original, return_counts=True)
    freqs = pa.Table.from_arrays(
        [
            pa.array(ids.astype(np.int32)),
            pa.array(vocab.strings[ids].tolist(), pa.string()),
            pa.array(counts.astype(np.int64)),
        ],
        names=["token_id", "token", "count"],
    )
    return tokens, freqs


def write_results(root: Path, rows: int, seed: int = 0) -> dict:
    """A complete committed run of about ``rows`` rows; its size on disk and write time."""
    from mixscope.store.layout import Layout
    from mixscope.store.manifest import commit_shard
    from mixscope.store.runs import now, write_run
    from mixscope.store.schema import SCHEMA_VERSION
    from mixscope.store.writer import write_parquet

    rng = np.random.default_rng(seed)
    vocab = Vocabulary(rng)
    layout = Layout.open(str(root))
    run_id = f"bench{rows}"
    rows_per_seq = SEQ_LEN * LAYERS
    n_seqs = max(1, round(rows / rows_per_seq))
    per_shard = max(1, SHARD_ROWS // rows_per_seq)
    starts = list(range(0, n_seqs, per_shard))
    layout.write_json(
        f"{layout.run_dir(run_id)}/plan.json",
        {
            "files": ["synthetic"],
            "n_docs": n_seqs,
            "bad": {},
            "fingerprint": "synthetic",
            "shards": [
                {"shard_id": k, "start": s, "stop": min(n_seqs, s + per_shard)}
                for k, s in enumerate(starts)
            ],
        },
    )
    started = time.perf_counter()
    total_rows = total_bytes = 0
    for shard_id, first in enumerate(starts):
        count = min(per_shard, n_seqs - first)
        tokens, freqs = shard_tables(rng, vocab, first, count)
        files = {
            "tokens": write_parquet(layout, layout.data_file("tokens", run_id, shard_id), tokens),
            "frequencies": write_parquet(
                layout, layout.data_file("frequencies", run_id, shard_id), freqs
            ),
        }
        commit_shard(
            layout,
            run_id,
            {
                "run_id": run_id,
                "shard_id": shard_id,
                "docs": count,
                "sequences": count,
                "tokens": count * SEQ_LEN,
                "rows": tokens.num_rows,
                "files": files,
                "attempt": 1,
                "committed_at": now(),
            },
        )
        total_rows += tokens.num_rows
        total_bytes += files["tokens"]["bytes"]
        print(
            f"  wrote shard {shard_id + 1}/{len(starts)} ({human(total_rows)} rows)",
            end="\r",
            file=sys.stderr,
            flush=True,
        )
    seconds = time.perf_counter() - started
    print(file=sys.stderr)
    write_run(
        layout,
        {
            "run_id": run_id,
            "name": "sql-benchmark",
            "created_at": now(),
            "model": {"kind": "synthetic", "source": "synthetic", "fingerprint": run_id},
            "step": None,
            "corpus": {"paths": ["synthetic"], "fingerprint": "synthetic", "n_docs": n_seqs},
            "options": {"analysis": {"mask_rate": MASK_RATE}, "schema_version": SCHEMA_VERSION},
            "spec": {"model": "synthetic"},
            "status": "complete",
            "shards_total": len(starts),
            "shards_done": len(starts),
            "shards_failed": 0,
            "rows": total_rows,
            "tokens": n_seqs * SEQ_LEN,
        },
    )
    return {"rows": total_rows, "bytes": total_bytes, "shards": len(starts), "write_s": seconds}


def measure(root: Path, reps: int, threads: int | None, memory_limit: str | None) -> dict:
    from mixscope.sql.named import run_query
    from mixscope.sql.readonly import execute
    from mixscope.sql.views import connect

    con = connect(str(root), threads=threads, memory_limit=memory_limit)

    def once(name: str) -> float:
        start = time.perf_counter()
        if name.startswith("scan"):
            cur = execute(con, SCAN if name == "scan" else SCAN_5)
        else:
            cur = run_query(con, name)
        cur.fetchall()
        return time.perf_counter() - start

    once("scan")  # warm-up: file metadata and the page cache
    times: dict[str, list[float]] = {q: [] for q in QUERIES}
    for rep in range(reps):
        for name in QUERIES:
            times[name].append(once(name))
            print(f"  rep {rep + 1}/{reps} {name}: {times[name][-1]:.2f}s", file=sys.stderr)
    return {q: statistics.median(ts) for q, ts in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="10M,100M", help="comma-separated sizes, e.g. 1M,10M")
    parser.add_argument("--quick", action="store_true", help="1M rows only")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="DuckDB threads (default all)")
    parser.add_argument("--memory-limit", default=None, help="DuckDB memory limit, e.g. 8GB")
    parser.add_argument("--dir", default=None, help="where to write (default: the temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the results directories")
    args = parser.parse_args()
    sizes = [1_000_000] if args.quick else parse_rows(args.rows)

    import duckdb

    base = Path(tempfile.mkdtemp(prefix="mixscope-sql-bench-", dir=args.dir))
    load_before = os.getloadavg()
    results = []
    try:
        for rows in sizes:
            free = shutil.disk_usage(base).free
            if rows * BYTES_PER_ROW_GUESS > 0.8 * free:
                fit = int(0.8 * free / BYTES_PER_ROW_GUESS)
                print(f"{human(rows)} rows do not fit in {human(free)}B free; using {human(fit)}")
                rows = fit
            root = base / f"rows-{rows}"
            print(f"writing {human(rows)} rows to {root}", file=sys.stderr)
            written = write_results(root, rows)
            print(f"measuring {human(written['rows'])} rows", file=sys.stderr)
            medians = measure(root, args.reps, args.threads, args.memory_limit)
            results.append((written, medians))
            if not args.keep:
                shutil.rmtree(root)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    load_after = os.getloadavg()

    print(
        f"mixscope SQL benchmark: duckdb {duckdb.__version__}, {os.cpu_count()} CPUs, "
        f"threads={args.threads or 'all'}, median of {args.reps}, interleaved"
    )
    print(
        "load average (1/5/15 min) before: "
        + " ".join(f"{x:.2f}" for x in load_before)
        + ", after: "
        + " ".join(f"{x:.2f}" for x in load_after)
    )
    header = f"{'rows':>11}  {'query':<22} {'seconds':>8} {'x scan':>7} {'rows/s':>9}  goal"
    print(header)
    print("-" * len(header))
    for written, medians in results:
        scan = medians["scan"]
        for name in QUERIES:
            t = medians[name]
            ratio = t / scan
            goal = ""
            if name in ("summary", "layer_profile"):
                goal = "<= 3x: " + ("met" if ratio <= 3 else "NOT met")
            elif name == "scan":
                goal = "count(*) + sum(attn_n)"
            elif name == "scan_5_measures":
                goal = "(reference: count(*) + the 5 sums)"
            print(
                f"{written['rows']:>11,}  {name:<22} {t:>8.3f} {ratio:>6.2f}x "
                f"{human(written['rows'] / t):>9}  {goal}"
            )
        print(
            f"{'':>11}  on disk: {written['bytes'] / written['rows']:.2f} bytes/row "
            f"({human(written['bytes'])}B tokens Parquet, {written['shards']} shards; "
            f"written at {human(written['rows'] / written['write_s'])} rows/s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
