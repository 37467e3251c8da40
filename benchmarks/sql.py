"""SQL benchmark: DuckDB over committed results of 10M, 30M and 100M token-layer rows.

Writes a synthetic run in the layout a job writes (schema 2) through the worker's own result
path: per shard, ``EncodedSequence`` objects and ``[layer, measure, seq]`` arrays go through
``ShardAccumulator.add`` in chunks of 64 sequences and ``finish`` (statistics partials, compact
detail rows with ``output.detail`` full, documents; Parquet, temporary name + rename), then
``commit_shard`` per shard, the plan and the run record, and ``consolidate``. The data:
12 layers, sequences of 128 tokens starting with [CLS] and ending with [SEP], 12% of the
other tokens masked, token ids Zipf-distributed over the 30,522-word MiniLM vocabulary
(its real tokenizer gives the strings), measures uniform in [0, 1] plus a small lift for
frequent tokens (so the frequency correlations are not zero), ``attnres_w = attn_w / 2``.

Then prints, measured in one run on the same connection:

  - a full scan of the detail, ``SELECT count(*), sum(attn_n) FROM tokens`` (rows/s),
  - every named query on the statistics path (summary, layer_profile, layer_summary,
    token_types, checkpoint_trend, compare_runs with the run against itself, top_tokens,
    frequency_bins, frequency_correlation, depth_correlation), each in seconds and as a
    ratio to the scan; goal: every one <= 1 s and flat in corpus size,
  - ``frequency_correlation_exact`` (reads the detail rows): goal <= 20x a scan and linear
    in the rows (its seconds per million rows at each size),
  - the write rate, and bytes on disk per row (detail, statistics, documents).

Each figure is the median of ``--reps`` (default 3) repetitions, the queries interleaved
(scan, summary, …, frequency_correlation_exact, scan, …) after one warm-up of each.

    python benchmarks/sql.py                      # 10M, 30M and 100M rows (as the disk allows)
    python benchmarks/sql.py --quick              # 1M rows
    python benchmarks/sql.py --rows 10M --reps 5 --threads 2 --dir /big/tmp
    python benchmarks/sql.py --rows 10M,30M --only frequency_correlation   # the scan + one query
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from common import offline_tokenizer, save_results, source_state

LAYERS = 12
SEQ_LEN = 128
VOCAB = 30522
SHARD_ROWS = 2_000_000
CHUNK = 64  # sequences per ShardAccumulator.add (the worker's chunks are now 256k characters)
MASK_RATE = 0.12
ZIPF_A = 1.07
LIFT = 0.15  # the most frequent token's measures are this much higher on average
CLS, SEP, MASK = 101, 102, 103
SCAN = "SELECT count(*), sum(attn_n) FROM tokens"
STATS_QUERIES = (
    "summary",
    "layer_profile",
    "layer_summary",
    "token_types",
    "checkpoint_trend",
    "compare_runs",
    "top_tokens",
    "frequency_bins",
    "frequency_correlation",
    "depth_correlation",
)
EXACT = "frequency_correlation_exact"
QUERIES = ("scan", *STATS_QUERIES, EXACT)
STATS_GOAL_S = 1.0
EXACT_GOAL_X = 20.0
BYTES_PER_ROW_GUESS = 40  # for the disk check before writing (detail + partials); measured


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


class Zipf:
    """Word-piece ids (>= 1000: real MiniLM word pieces), Zipf by a random frequency rank."""

    def __init__(self, rng: np.random.Generator) -> None:
        words = np.setdiff1d(np.arange(1000, VOCAB), [CLS, SEP, MASK])
        self.by_rank = rng.permutation(words)  # id of frequency rank r + 1
        weights = 1.0 / np.arange(1, len(words) + 1) ** ZIPF_A
        self.cdf = np.cumsum(weights / weights.sum())
        # measures of frequent tokens are lifted a little: LIFT at rank 1, 0 at the last
        self.lift = np.zeros(VOCAB, dtype=np.float32)
        self.lift[self.by_rank] = LIFT * (
            1 - np.log(np.arange(1, len(words) + 1)) / np.log(len(words))
        )

    def draw(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        ranks = np.searchsorted(self.cdf, rng.random(shape), side="right")
        return self.by_rank[np.minimum(ranks, len(self.by_rank) - 1)]


def shard_inputs(rng: np.random.Generator, zipf: Zipf, first_doc: int, n_seqs: int):
    """One-sequence documents: EncodedSequences, their measures and their Documents."""
    from mixscope.corpus.encode import EncodedSequence
    from mixscope.corpus.plan import Document

    original = zipf.draw(rng, (n_seqs, SEQ_LEN)).astype(np.int64)
    original[:, 0], original[:, -1] = CLS, SEP
    special = np.zeros((n_seqs, SEQ_LEN), dtype=bool)
    special[:, [0, -1]] = True
    masked = (rng.random((n_seqs, SEQ_LEN)) < MASK_RATE) & ~special
    seen = np.where(masked, MASK, original)
    values = rng.random((n_seqs, LAYERS, 5, SEQ_LEN), dtype=np.float32)
    values *= np.float32(1 - LIFT)
    values += zipf.lift[original][:, None, None, :]
    values[:, :, 2, :] = values[:, :, 0, :] / 2  # attnres_w = attn_w / 2, as the engine gives
    zeros = np.zeros(SEQ_LEN, dtype=np.int64)
    seqs = [
        EncodedSequence(
            doc_id=first_doc + k,
            segment=0,
            input_ids=seen[k],
            token_type_ids=zeros,
            special=special[k],
            masked=masked[k],
            original_ids=original[k],
        )
        for k in range(n_seqs)
    ]
    docs = [Document(first_doc + k, "", "synthetic.txt", first_doc + k) for k in range(n_seqs)]
    return seqs, [values[k] for k in range(n_seqs)], docs


def write_results(root: Path, rows: int, tok: Any, shard_rows: int, seed: int = 0) -> dict:
    """A complete, consolidated run of about ``rows`` token-layer rows; sizes and times."""
    from mixscope.config import OutputSpec
    from mixscope.registry import measure_set
    from mixscope.runtime.host_path import ShardAccumulator
    from mixscope.runtime.shard_result import ShardResult
    from mixscope.stats.consolidate import consolidate
    from mixscope.stats.token_block import Vocabulary
    from mixscope.store.layout import Layout
    from mixscope.store.manifest import commit_shard
    from mixscope.store.run_record import RunRecord
    from mixscope.store.runs import now, write_run
    from mixscope.store.schema import SCHEMA_VERSION

    rng = np.random.default_rng(seed)
    zipf = Zipf(rng)
    vocab = Vocabulary(tok)
    layout = Layout.open(str(root))
    run_id = f"bench{rows}"
    output = OutputSpec(detail="full", precision="float32")
    rows_per_seq = SEQ_LEN * LAYERS
    n_seqs = max(1, round(rows / rows_per_seq))
    per_shard = max(1, shard_rows // rows_per_seq)
    starts = list(range(0, n_seqs, per_shard))
    layout.write_json(
        layout.plan_path(run_id),
        {
            "files": ["synthetic.txt"],
            "n_docs": n_seqs,
            "bad": {},
            "bad_examples": [],
            "fingerprint": "synthetic",
            "shards": [
                {
                    "shard_id": k,
                    "file": "synthetic.txt",
                    "start": s,
                    "first_doc": s,
                    "n_docs": min(per_shard, n_seqs - s),
                }
                for k, s in enumerate(starts)
            ],
        },
    )
    gen_s = host_s = 0.0
    total = {"rows": 0, "tokens": 0, "detail": 0, "partials": 0, "documents": 0}
    for shard_id, first in enumerate(starts):
        count = min(per_shard, n_seqs - first)
        t0 = time.perf_counter()
        seqs, measures, docs = shard_inputs(rng, zipf, first, count)
        t1 = time.perf_counter()
        results = ShardAccumulator(
            layout, run_id, shard_id, vocab, output, None, measures=measure_set(("paper",))
        )
        for i in range(0, count, CHUNK):
            results.add(seqs[i : i + CHUNK], measures[i : i + CHUNK])
        files = results.finish(docs)
        t2 = time.perf_counter()
        gen_s += t1 - t0
        host_s += t2 - t1
        result = ShardResult(
            run_id=run_id,
            shard_id=shard_id,
            docs=count,
            sequences=count,
            tokens=results.tokens,
            rows=results.rows,
            detail_rows=results.detail_rows,
            files=ShardResult.entries(files),
            seconds=round(t2 - t1, 3),
        )
        commit_shard(layout, run_id, result.commit_record(1, now()))
        total["rows"] += results.rows
        total["tokens"] += results.tokens
        total["detail"] += files["tokens"]["bytes"]
        total["documents"] += files["documents"]["bytes"]
        total["partials"] += sum(
            e["bytes"] for k, e in files.items() if k not in ("tokens", "documents")
        )
        print(
            f"  wrote shard {shard_id + 1}/{len(starts)} ({human(total['rows'])} rows, "
            f"{human(total['tokens'] / host_s)} tokens/s)",
            end="\r",
            file=sys.stderr,
            flush=True,
        )
    print(file=sys.stderr)
    t0 = time.perf_counter()
    gen = consolidate(layout, run_id)
    consolidate_s = time.perf_counter() - t0
    write_run(
        layout,
        RunRecord.from_json(
            {
                "run_id": run_id,
                "name": "sql-benchmark",
                "created_at": now(),
                "invocations": [],
                "model": {
                    "kind": "local",
                    "source": "synthetic",
                    "revision": None,
                    "fingerprint": run_id,
                    "step": 1000,
                },
                "step": 1000,  # a known step, so checkpoint_trend has a row per layer
                "corpus": {
                    "paths": ["synthetic.txt"],
                    "files": ["synthetic.txt"],
                    "fingerprint": "synthetic",
                    "n_docs": n_seqs,
                    "bad": {},
                    "bad_examples": [],
                },
                "options": {
                    "analysis": {"mask_rate": MASK_RATE},
                    "output": {"detail": "full", "sample_rate": None, "precision": "float32"},
                    "schema_version": SCHEMA_VERSION,
                },
                "spec": {"model": "synthetic", "name": "sql-benchmark"},
                "status": "complete",
                "shards_total": len(starts),
                "shards_done": len(starts),
                "shards_failed": 0,
                "rows": total["rows"],
                "tokens": total["tokens"],
                "errors": {},
            },
            "synthetic run record",
        ),
    )
    on_disk = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    return {
        **total,
        "run_id": run_id,
        "shards": len(starts),
        "stats": sum(int(e["bytes"]) for e in gen.files.values()),
        "on_disk": on_disk,
        "generate_s": gen_s,
        "host_s": host_s,
        "consolidate_s": consolidate_s,
    }


def measure(
    root: Path,
    run_id: str,
    reps: int,
    threads: int | None,
    memory_limit: str | None,
    queries: tuple[str, ...] = QUERIES,
) -> dict:
    from mixscope.sql.named import run_query
    from mixscope.sql.readonly import execute
    from mixscope.sql.views import connect

    con = connect(str(root), threads=threads, memory_limit=memory_limit)
    params = {"compare_runs": {"a": run_id, "b": run_id}}

    def once(name: str) -> float:
        start = time.perf_counter()
        cur = execute(con, SCAN) if name == "scan" else run_query(con, name, params.get(name))
        rows = cur.fetchall()
        seconds = time.perf_counter() - start
        if not rows:
            raise SystemExit(f"{name} gave no rows")
        return seconds

    for name in queries:  # warm-up: file metadata and the page cache
        t = once(name)
        print(f"  warm-up {name}: {t:.2f}s", file=sys.stderr)
    times: dict[str, list[float]] = {q: [] for q in queries}
    for rep in range(reps):
        for name in queries:
            times[name].append(once(name))
            print(f"  rep {rep + 1}/{reps} {name}: {times[name][-1]:.2f}s", file=sys.stderr)
    rho: dict[str, float] = {}
    binned: dict[str, tuple[float, float]] = {}
    if EXACT in queries and "frequency_correlation" in queries:
        # the answer of the exact query, to show the synthetic correlation is not zero, and
        # the one from the histograms beside it (within its bound)
        cur = run_query(con, EXACT)
        cols = [d[0] for d in cur.description]
        rho = {r[cols.index("measure")]: r[cols.index("rho_all")] for r in cur.fetchall()}
        cur = run_query(con, "frequency_correlation")
        cols = [d[0] for d in cur.description]
        binned = {
            r[cols.index("measure")]: (r[cols.index("rho_all")], r[cols.index("bound")])
            for r in cur.fetchall()
        }
    return {
        "medians": {q: statistics.median(ts) for q, ts in times.items()},
        "rho": rho,
        "binned": binned,
    }


def main() -> int:  # noqa: C901 - a script's steps, flag by flag
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="10M,30M,100M", help="comma-separated sizes")
    parser.add_argument("--quick", action="store_true", help="1M rows only")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--shard-rows", type=int, default=SHARD_ROWS, help="rows per shard")
    parser.add_argument("--threads", type=int, default=None, help="DuckDB threads (default all)")
    parser.add_argument("--memory-limit", default=None, help="DuckDB memory limit, e.g. 8GB")
    parser.add_argument("--dir", default=None, help="where to write (default: the temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the results directories")
    parser.add_argument("--save", action="store_true", help="also write benchmarks/results/sql.md")
    parser.add_argument(
        "--only",
        action="append",
        choices=QUERIES[1:],
        metavar="QUERY",
        help="time only the scan and this query (repeatable)",
    )
    args = parser.parse_args()
    sizes = [1_000_000] if args.quick else parse_rows(args.rows)
    queries = QUERIES if not args.only else ("scan", *(q for q in QUERIES if q in args.only))

    import duckdb

    tok = offline_tokenizer()
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
            written = write_results(root, rows, tok, args.shard_rows)
            print(f"measuring {human(written['rows'])} rows", file=sys.stderr)
            measured = measure(
                root, written["run_id"], args.reps, args.threads, args.memory_limit, queries
            )
            results.append((written, measured))
            if not args.keep:
                shutil.rmtree(root)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    load_after = os.getloadavg()

    print(
        f"mixscope SQL benchmark: duckdb {duckdb.__version__}, {os.cpu_count()} CPUs, "
        f"threads={args.threads or 'all'}, median of {args.reps}, interleaved; detail full "
        f"float32, shards of {human(args.shard_rows)} rows"
    )
    print(f"code: {source_state()}")
    print(
        "load average (1/5/15 min) before: "
        + " ".join(f"{x:.2f}" for x in load_before)
        + ", after: "
        + " ".join(f"{x:.2f}" for x in load_after)
    )
    header = (
        f"{'rows':>11}  {'query':<28} {'seconds':>8} {'x scan':>7} {'s/M rows':>8} "
        f"{'rows/s':>7}  goal"
    )
    print(header)
    print("-" * len(header))
    for written, measured in results:
        medians = measured["medians"]
        n = written["rows"]
        scan = medians["scan"]
        for name in queries:
            t = medians[name]
            ratio = t / scan
            if name == "scan":
                goal = "count(*) + sum(attn_n) over the detail"
            elif name == EXACT:
                goal = f"<= {EXACT_GOAL_X:g}x scan: " + (
                    "met" if ratio <= EXACT_GOAL_X else "NOT met"
                )
            else:
                goal = f"statistics, <= {STATS_GOAL_S:g} s: " + (
                    "met" if t <= STATS_GOAL_S else "NOT met"
                )
            print(
                f"{n:>11,}  {name:<28} {t:>8.3f} {ratio:>6.2f}x {t / (n / 1e6):>8.4f} "
                f"{human(n / t):>7}  {goal}"
            )
        print(
            f"{'':>11}  on disk: {written['on_disk'] / n:.2f} B/row in all "
            f"(detail {written['detail'] / n:.2f}, statistics {written['stats'] / n:.3f}, "
            f"documents {written['documents'] / n:.3f}; per-shard partials before "
            f"consolidation {written['partials'] / n:.2f}); {written['shards']} shards"
        )
        print(
            f"{'':>11}  written: {human(written['tokens'] / written['host_s'])} tokens/s through "
            f"ShardAccumulator ({written['host_s']:.1f}s), inputs generated in "
            f"{written['generate_s']:.1f}s, consolidate {written['consolidate_s']:.1f}s"
        )
        rho = measured["rho"]
        binned = measured["binned"]
        if rho:
            print(
                f"{'':>11}  rho_all exact / from histograms (bound): "
                + ", ".join(
                    f"{m} {rho[m]:.4f} / {binned[m][0]:.4f} ({binned[m][1]:.1e})" for m in rho
                )
            )
    if len(results) > 1:
        print()
        print(
            f"{'query':<28} " + " ".join(f"{human(w['rows']):>9}" for w, _ in results) + "  flat?"
        )
        for name in queries:
            ts = [m["medians"][name] for _, m in results]
            if name in (EXACT, "scan"):
                per_m = [t / (w["rows"] / 1e6) for t, (w, _) in zip(ts, results, strict=True)]
                cells = " ".join(f"{x:>7.4f}/M" for x in per_m)
                verdict = f"s per M rows, largest/smallest {per_m[-1] / per_m[0]:.2f} (1 = linear)"
            else:
                cells = " ".join(f"{t:>8.3f}s" for t in ts)
                verdict = f"largest/smallest {ts[-1] / ts[0]:.2f} (1 = flat)"
            print(f"{name:<28} {cells}  {verdict}")
    if args.save:
        save_results("sql", markdown(results, queries, args.reps))
    return 0


def markdown(results: list, queries: tuple[str, ...], reps: int) -> str:
    """The README section: one row per query, one column per size (seconds; the exact query
    with its multiple of the scan), then goals, ρ and bytes per row, as measured."""
    sizes = [w["rows"] for w, _ in results]
    lines = [
        "**SQL** (`benchmarks/sql.py`: synthetic results written through the real result "
        "path, `full` float32 detail, 12 layers, Zipf token ids, consolidated; medians of "
        f"{reps}; code {source_state()}):\n",
        "| query | " + " | ".join(f"{human(n)} rows" for n in sizes) + " |",
        "|---|" + "---|" * len(sizes),
    ]
    stats_worst = 0.0
    for name in queries:
        cells = []
        for _written, measured in results:
            t = measured["medians"][name]
            scan = measured["medians"]["scan"]
            if name == EXACT:
                cells.append(f"{t:.2f} s ({t / scan:.1f}x scan)")
            else:
                cells.append(f"{t:.3f} s")
            if name not in ("scan", EXACT):
                stats_worst = max(stats_worst, t)
        label = {"scan": "full scan of the detail (count + one sum)"}.get(name, f"`{name}`")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("")
    met = "met" if stats_worst <= STATS_GOAL_S else "**NOT met**"
    lines.append(
        f"Slowest statistics-path query at any size: {stats_worst:.3f} s "
        f"(goal <= {STATS_GOAL_S:g} s: {met})."
    )
    if EXACT in queries and len(results) > 1:
        per_m = [m["medians"][EXACT] / (w["rows"] / 1e6) for w, m in results]
        worst = max(m["medians"][EXACT] / m["medians"]["scan"] for _, m in results)
        lines.append(
            f"`{EXACT}`: at most {worst:.1f}x a scan (goal <= {EXACT_GOAL_X:g}x), "
            f"{per_m[0]:.3f}-{per_m[-1]:.3f} s per million rows (largest/smallest "
            f"{per_m[-1] / per_m[0]:.2f}; 1 = linear)."
        )
    for written, measured in results:
        rho, binned = measured["rho"], measured["binned"]
        where = f"{human(written['rows'])} rows"
        if rho:
            pairs = ", ".join(
                f"{m} {rho[m]:.4f} / {binned[m][0]:.4f} (bound {binned[m][1]:.1e})" for m in rho
            )
            lines.append(f"ρ exact / from histograms at {where}: {pairs}.")
    disk = " / ".join(f"{w['on_disk'] / w['rows']:.2f}" for w, _ in results)
    detail = " / ".join(f"{w['detail'] / w['rows']:.2f}" for w, _ in results)
    lines.append(f"On disk, bytes per row in all: {disk} (detail {detail}).")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
