"""Host ceiling: precomputed measures replayed through the worker's result path, no model.

What the host side of a shard costs per core, without the model: synthetic sequences
(``SEQ_LEN`` tokens starting with [CLS] and ending with [SEP], token ids Zipf-distributed
over the 30,522-word MiniLM vocabulary, ``LAYERS`` layers, measures uniform in [0, 1] with
``attnres_w = attn_w / 2`` as the engine gives) go through ``ShardResults`` exactly as the
worker feeds it: shards of ``--shard-seqs`` sequences in chunks of
``max(64, 4 * batch_size)`` sequences, ``add`` per chunk, then ``finish`` (statistics
merged, detail rows, documents, every Parquet file written to a temporary directory).
Synchronous (``host=None``) on one thread (numpy, Arrow and BLAS pools set to 1).

Prints tokens/s per core for each output mode (detail none, sample at 1%, full at float32
and at float16), the share of ``finish`` in it, and, for comparison, the old schema-1 path
(``mixscope.api.to_table`` + ``parquet_bytes``: the long table and its Parquet encoding,
what the worker did before) with the ratio new / old. Goal: >= 500k tokens/s per core with
detail none and sample. Each figure is the median of ``--reps`` interleaved repetitions
(none, sample, full32, full16, old, none, …) after one warm-up of each.

    python benchmarks/host.py                # 600-sequence shards, 5 repetitions
    python benchmarks/host.py --quick        # a smoke run (small shard, 1 repetition)
    python benchmarks/host.py --shard-seqs 2400 --reps 7
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from common import minilm_tokenizer, source_state  # noqa: E402

pa.set_cpu_count(1)
pa.set_io_thread_count(1)

LAYERS = 12
SEQ_LEN = 128
VOCAB = 30522
ZIPF_A = 1.07
CLS, SEP = 101, 102
GOAL = 500_000  # tokens/s per core, detail none and sample

#: name → (detail, sample_rate, precision); "old" is the schema-1 path
MODES: dict[str, tuple[str, float, str]] = {
    "none": ("none", 0.01, "float32"),
    "sample": ("sample", 0.01, "float32"),
    "full32": ("full", 0.01, "float32"),
    "full16": ("full", 0.01, "float16"),
}
ORDER = (*MODES, "old")


def zipf_ids(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` word-piece ids (>= 1000, the real MiniLM word pieces), Zipf by a random rank."""
    words = np.arange(1000, VOCAB)
    by_rank = np.random.default_rng(0).permutation(words)  # id of frequency rank r + 1
    weights = 1.0 / np.arange(1, len(words) + 1) ** ZIPF_A
    cdf = np.cumsum(weights / weights.sum())
    ranks = np.searchsorted(cdf, rng.random(n), side="right")
    return by_rank[np.minimum(ranks, len(by_rank) - 1)]


def synthetic_shard(rng: np.random.Generator, first_doc: int, n_seqs: int) -> tuple[list, list]:
    """``n_seqs`` one-segment documents: EncodedSequences and their [layer, 5, seq] measures."""
    from mixscope.corpus.encode import EncodedSequence

    ids = zipf_ids(rng, n_seqs * SEQ_LEN).reshape(n_seqs, SEQ_LEN).astype(np.int64)
    ids[:, 0], ids[:, -1] = CLS, SEP
    special = np.zeros(SEQ_LEN, dtype=bool)
    special[[0, -1]] = True
    seqs, measures = [], []
    for k in range(n_seqs):
        row = ids[k].copy()
        seqs.append(
            EncodedSequence(
                doc_id=first_doc + k,
                segment=0,
                input_ids=row,
                token_type_ids=np.zeros(SEQ_LEN, dtype=np.int64),
                special=special.copy(),
                masked=np.zeros(SEQ_LEN, dtype=bool),
                original_ids=row,
            )
        )
        m = rng.random((LAYERS, 5, SEQ_LEN), dtype=np.float32)
        m[:, 2, :] = m[:, 0, :] / 2  # attnres_w = attn_w / 2, as the engine gives
        measures.append(m)
    return seqs, measures


def documents(seqs: list) -> list:
    from mixscope.corpus.plan import Document

    return [Document(s.doc_id, "", "synthetic.txt", 100 * s.doc_id) for s in seqs]


def run_new(root: str, mode: str, vocab: Any, seqs: list, measures: list, chunk: int) -> dict:
    """One shard through ShardResults (synchronous); seconds, of which finish, bytes."""
    from mixscope.config import OutputSpec
    from mixscope.runtime.results import ShardResults
    from mixscope.store.layout import Layout

    detail, rate, precision = MODES[mode]
    layout = Layout.open(root)
    out = OutputSpec(detail=detail, sample_rate=rate, precision=precision)
    start = time.perf_counter()
    results = ShardResults(layout, f"bench-{mode}", 0, vocab, out, None)
    for i in range(0, len(seqs), chunk):
        results.add(seqs[i : i + chunk], measures[i : i + chunk])
    mid = time.perf_counter()
    files = results.finish(documents(seqs))
    end = time.perf_counter()
    return {
        "seconds": end - start,
        "finish": end - mid,
        "tokens": results.tokens,
        "bytes": sum(f["bytes"] for f in files.values()),
        "detail_bytes": files.get("tokens", {}).get("bytes", 0),
    }


def run_old(tok: Any, seqs: list, measures: list, chunk: int) -> dict:
    """The schema-1 path: the long table per chunk and its Parquet encoding."""
    from mixscope.api import to_table
    from mixscope.store.writer import parquet_bytes

    start = time.perf_counter()
    tables = [
        to_table(seqs[i : i + chunk], measures[i : i + chunk], tok)
        for i in range(0, len(seqs), chunk)
    ]
    mid = time.perf_counter()
    data = parquet_bytes(pa.concat_tables(tables))
    end = time.perf_counter()
    tokens = sum(len(s) for s in seqs)
    return {
        "seconds": end - start,
        "finish": end - mid,
        "tokens": tokens,
        "bytes": len(data),
        "detail_bytes": len(data),
    }


def breakdown(root: str, tok: Any, seqs: list, measures: list, chunk: int, mode: str):
    """One shard of ``mode`` under cProfile: the functions with the most self time, and the
    rows and bytes of each file ``finish`` wrote (its manifest entries)."""
    import cProfile
    import pstats

    from mixscope.config import OutputSpec
    from mixscope.runtime.results import ShardResults
    from mixscope.stats.block import Vocabulary
    from mixscope.store.layout import Layout

    detail, rate, precision = MODES[mode]
    out = OutputSpec(detail=detail, sample_rate=rate, precision=precision)
    results = ShardResults(Layout.open(root), "profile", 0, Vocabulary(tok), out, None)
    profiler = cProfile.Profile()
    profiler.enable()
    for i in range(0, len(seqs), chunk):
        results.add(seqs[i : i + chunk], measures[i : i + chunk])
    files = results.finish(documents(seqs))
    profiler.disable()
    stats = pstats.Stats(profiler)
    total = stats.total_tt  # type: ignore[attr-defined]
    rows = []
    for (path, line, func), (_, _, self_s, cum_s, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = path.split("/src/", 1)[-1] if "/src/mixscope/" in path else path.rsplit("/", 1)[-1]
        label = f"{where}:{line}({func})" if line else func
        rows.append((self_s, cum_s, label))
    rows.sort(reverse=True)
    sizes = {k: (int(e.get("rows", 0)), int(e["bytes"])) for k, e in files.items()}
    return total, rows[:14], sizes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shard-seqs", type=int, default=600, help="sequences per shard")
    parser.add_argument("--batch-size", type=int, default=16, help="chunk = max(64, 4 * this)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 128 sequences, 1 rep")
    parser.add_argument("--dir", default=None, help="where to write (default: the temp dir)")
    args = parser.parse_args()
    if args.quick:
        args.shard_seqs, args.reps = 128, 1
    chunk = max(64, 4 * args.batch_size)

    from mixscope.stats.block import Vocabulary

    tok = minilm_tokenizer()
    rng = np.random.default_rng(0)
    seqs, measures = synthetic_shard(rng, 0, args.shard_seqs)
    base = tempfile.mkdtemp(prefix="mixscope-host-bench-", dir=args.dir)
    load_before = os.getloadavg()
    times: dict[str, list[dict]] = {m: [] for m in ORDER}
    try:

        def once(mode: str, rep: int) -> dict:
            root = f"{base}/{mode}-{rep}"
            if mode == "old":
                result = run_old(tok, seqs, measures, chunk)
            else:
                # a fresh Vocabulary per shard, as a worker's first shard has (its cache
                # fills on the first chunk; later shards of a worker are a bit faster)
                result = run_new(root, mode, Vocabulary(tok), seqs, measures, chunk)
            shutil.rmtree(root, ignore_errors=True)
            return result

        for mode in ORDER:  # warm-up: imports, tokenizer caches, allocator
            once(mode, -1)
        for rep in range(args.reps):
            for mode in ORDER:
                times[mode].append(once(mode, rep))
                t = times[mode][-1]
                print(f"  rep {rep + 1}/{args.reps} {mode}: {t['seconds']:.3f}s", file=sys.stderr)
        profiles = {
            m: breakdown(f"{base}/profile-{m}", tok, seqs, measures, chunk, m)
            for m in ("none", "full32")
        }
    finally:
        shutil.rmtree(base, ignore_errors=True)
    load_after = os.getloadavg()

    tokens = sum(len(s) for s in seqs)
    med = {
        m: {k: statistics.median(r[k] for r in rs) for k in ("seconds", "finish")}
        for m, rs in times.items()
    }
    print(
        f"mixscope host benchmark: {tokens:,} tokens per shard ({args.shard_seqs} sequences of "
        f"{SEQ_LEN}, {LAYERS} layers, chunks of {chunk}), one thread, "
        f"median of {args.reps}, interleaved; pyarrow {pa.__version__}, numpy {np.__version__}"
    )
    print(f"code: {source_state()}")
    print(
        "load average (1/5/15 min) before: "
        + " ".join(f"{x:.2f}" for x in load_before)
        + ", after: "
        + " ".join(f"{x:.2f}" for x in load_after)
    )
    header = (
        f"{'mode':<8} {'seconds':>8} {'finish':>7} {'tokens/s/core':>14} {'x old':>6} "
        f"{'bytes/tok':>9} {'B/tok-layer':>11}  goal"
    )
    print(header)
    print("-" * len(header))
    old_rate = tokens / med["old"]["seconds"]
    labels = {
        "none": "detail none",
        "sample": "detail sample 1%",
        "full32": "detail full float32",
        "full16": "detail full float16",
        "old": "schema 1: to_table + parquet_bytes",
    }
    for mode in ORDER:
        s = med[mode]["seconds"]
        rate = tokens / s
        nbytes = times[mode][-1]["bytes"]
        goal = labels[mode]
        if mode in ("none", "sample"):
            goal += f"; >= {GOAL // 1000}k/s: " + ("met" if rate >= GOAL else "NOT met")
        print(
            f"{mode:<8} {s:>8.3f} {med[mode]['finish'] / s:>6.0%} {rate:>14,.0f} "
            f"{rate / old_rate:>5.2f}x {nbytes / tokens:>9.2f} "
            f"{nbytes / (tokens * LAYERS):>11.2f}  {goal}"
        )
    print(
        "finish = share of the time in finish() (merge + Parquet + rename); bytes = every file "
        "of the shard (old: the long tokens file alone, no statistics)"
    )
    for mode, (total, top, sizes) in profiles.items():
        print()
        print(
            f"where the time goes: one shard, detail {MODES[mode][0]} {MODES[mode][2]}, under "
            f"cProfile ({total:.3f}s with its overhead); functions by self time"
        )
        print(f"{'self s':>7} {'share':>6} {'cum s':>7}  function")
        for self_s, cum_s, label in top:
            print(f"{self_s:>7.3f} {self_s / total:>6.1%} {cum_s:>7.3f}  {label}")
        print(
            "files: "
            + ", ".join(
                f"{k} {r:,} rows {b:,} B ({b / tokens:.1f} B/token)" for k, (r, b) in sizes.items()
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
