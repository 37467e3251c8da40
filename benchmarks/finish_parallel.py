"""Shards' ``finish`` side by side: what ``runtime.shards_in_flight`` above 2 can give.

A GPU actor's host work per shard (``ShardAccumulator.finish``: the statistics copied to the
host, their tables built, the Parquet files encoded, hashed and written) takes longer than
the shard's device phase, so with 2 in flight the model waits for it. With N in flight,
N − 1 shards finish at once on host cores; that pays only if ``finish`` runs in parallel on
threads (numpy, torch and Arrow release the GIL for their work; the Python between them does
not). This measures it without a model: ``--shards`` accumulators filled with the same
synthetic every-group shard as ``benchmarks/host.py`` (76.8k tokens, 12 layers, 10 stored
measures, detail none), then finished one after another and, in the same run, all at once
on as many threads; repetitions alternate which comes first. Printed: the wall time of each,
their ratio (the speed-up of finishing them side by side; at most the machine's free cores)
and the CPU time, which parallel threads must not inflate much. Arrow's and the BLAS pools
are held to one thread (``host.py``'s settings, on import), so the speed-up is the threads'.

    python benchmarks/finish_parallel.py            # 3 shards, 3 repetitions
    python benchmarks/finish_parallel.py --shards 2 --reps 5
    python benchmarks/finish_parallel.py --save      # also benchmarks/results/finish-parallel.md
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse
import statistics
import tempfile
import threading
import time
from typing import Any

import numpy as np

import host
from common import offline_tokenizer, publish, source_state


def filled(root: str, shard: int, vocab: Any, seqs: list, wide: list, chunk: int) -> Any:
    """A shard's accumulator with every chunk added (the device phase's result side)."""
    from mixscope.config import OutputSpec
    from mixscope.registry import measure_set
    from mixscope.runtime.host_path import ShardAccumulator
    from mixscope.stats.token_block import chunk_values
    from mixscope.store.layout import Layout

    out = OutputSpec(detail="none", sample_rate=0.01, precision="float32")
    acc = ShardAccumulator(
        Layout.open(root), "finish", shard, vocab, out, None, measures=measure_set(host.ALL_GROUPS)
    )
    for i in range(0, len(seqs), chunk):
        acc.add(seqs[i : i + chunk], chunk_values(wide[i : i + chunk]))
    return acc


def finished(accs: list[Any], docs: list, parallel: bool) -> tuple[float, float]:
    """Wall and process CPU seconds to finish ``accs``, in turn or each on a thread."""
    wall, cpu = time.perf_counter(), time.process_time()
    if parallel:
        threads = [threading.Thread(target=a.finish, args=(docs,)) for a in accs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for a in accs:
            a.finish(docs)
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shards", type=int, default=3, help="shards finished at once")
    ap.add_argument("--shard-seqs", type=int, default=600, help="sequences of 128 per shard")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--save", action="store_true", help="also write benchmarks/results/")
    args = ap.parse_args()

    from mixscope.registry import measure_set
    from mixscope.stats.token_block import Vocabulary

    width = len(measure_set(host.ALL_GROUPS).columns)
    seqs, wide = host.synthetic_shard(np.random.default_rng(0), 0, args.shard_seqs, width)
    docs = host.documents(seqs)
    vocab = Vocabulary(offline_tokenizer())
    runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="mixscope-finish-") as root:
        shard = 0
        for rep in range(args.reps + 1):  # the first: a warm-up of both
            for parallel in (rep % 2 == 1, rep % 2 == 0):
                accs = []
                for _ in range(args.shards):
                    accs.append(filled(root, shard, vocab, seqs, wide, 64))
                    shard += 1
                got = finished(accs, docs, parallel)
                if rep:
                    runs[parallel].append(got)
    serial = statistics.median(w for w, _ in runs[False])
    side = statistics.median(w for w, _ in runs[True])
    cpu_serial = statistics.median(c for _, c in runs[False])
    cpu_side = statistics.median(c for _, c in runs[True])
    tokens = args.shards * args.shard_seqs * host.SEQ_LEN
    line = (
        f"{args.shards} shards' finish ({tokens:,} tokens, every group, detail none; "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; code {source_state()}; "
        f"median of {args.reps}): one after another {serial:.3f} s wall ({cpu_serial:.3f} s CPU), "
        f"side by side on {args.shards} threads {side:.3f} s wall ({cpu_side:.3f} s CPU): "
        f"**{serial / side:.2f}×** the rate (`python benchmarks/finish_parallel.py "
        f"--shards {args.shards} --reps {args.reps}`). Cores kept busy (CPU over wall): "
        f"{cpu_serial / serial:.2f} one after another (a finish encodes its files on threads "
        f"of its own), {cpu_side / side:.2f} side by side"
        + (
            f" of {os.cpu_count()}: the threads run at once, not in turn on the GIL, so the "
            "rate is bounded by the free cores"
            if cpu_side / side > 0.8 * (os.cpu_count() or 1)
            else ": fewer than the machine's cores, so something serialises them (the GIL or "
            "a lock)"
        )
        + "."
    )
    publish("finish-parallel", [line], args.save)


if __name__ == "__main__":
    main()
