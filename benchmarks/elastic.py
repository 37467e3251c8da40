"""Elastic pool benchmark: the idle tail of a job (shard order) and its fixed start-up cost.

One run, on the embedded local Ray with 2 CPU actors, the packaged MiniLM, a corpus whose
shards differ in size (short-document files sort first, long-document files last, as in
any corpus where files differ: the plan's order then leaves the largest shards for the
end); by default one shard per file, sizes 1 : 2 : … : 5, so the tail is a visible share
of the job (with many small shards both orders leave a tail under one shard's time).
Each job runs ``--reps`` times per order, interleaved, with ``runtime.shard_order: plan``
(the order before this change) and ``largest_first`` (after), and prints:

  - idle actor-seconds at the job's end (``actors.json`` ``tail_idle_actor_s``: for each
    actor, from its last shard's end to the job's last), wall seconds of the shard phase,
    and the ratios after / before;
  - the fixed cost: Ray start, first actor ready (process spawn + imports + model load),
    model load alone, against the job's wall time.

    python benchmarks/elastic.py [--reps 2] [--files 5] [--docs 120] [--docs-per-shard 120] [--save]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from common import publish, source_state, timed_job, wikitext_path


def make_corpus(folder: Path, files: int, docs: int) -> list[str]:
    """``files`` files of ``docs`` documents each; file k's documents are k+1 times longer."""
    words = wikitext_path().read_text(encoding="utf-8").split()
    paths = []
    pos = 0
    for k in range(files):
        n = 12 * (k + 1)  # words per document
        lines = []
        for _ in range(docs):
            lines.append(" ".join(words[pos : pos + n]))
            pos = (pos + n) % max(1, len(words) - n)
        path = folder / f"part{k:02d}.txt"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        paths.append(str(path))
    return paths


def run_once(corpus: list[str], order: str, out: Path, docs_per_shard: int) -> dict:
    return timed_job(
        corpus, out, runtime__docs_per_shard=docs_per_shard, runtime__shard_order=order
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--files", type=int, default=5)
    ap.add_argument("--docs", type=int, default=120, help="documents per file")
    ap.add_argument("--docs-per-shard", type=int, default=120)
    ap.add_argument("--save", action="store_true", help="also write benchmarks/results/elastic.md")
    args = ap.parse_args()
    import ray

    from mixscope.runtime.ray_executor import ensure_ray

    tmp = Path(tempfile.mkdtemp(prefix="mx-elastic-"))
    try:
        corpus = make_corpus(tmp, args.files, args.docs)
        t0 = time.time()
        ensure_ray(None)  # once: the first job's Ray start is measured separately
        ray_start = time.time() - t0
        # one untimed job first: the process's first job pays one-time imports and caches
        run_once(corpus, "plan", tmp / "out-warm-up", args.docs_per_shard)
        shutil.rmtree(tmp / "out-warm-up", ignore_errors=True)
        runs: dict[str, list[dict]] = {"plan": [], "largest_first": []}
        for rep in range(args.reps):
            for order in ("plan", "largest_first") if rep % 2 == 0 else ("largest_first", "plan"):
                out = tmp / f"out-{order}-{rep}"
                runs[order].append(run_once(corpus, order, out, args.docs_per_shard))
                shutil.rmtree(out, ignore_errors=True)
                print(f"  {order} rep {rep}: {json.dumps(runs[order][-1])}", flush=True)
        ray.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def med(order: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[order])

    lines: list[str] = []
    out = lines.append
    out(
        f"**Elastic pool** (`benchmarks/elastic.py`: embedded local Ray, 2 CPU actors, MiniLM, "
        f"{args.files} files of {args.docs} documents, {args.docs_per_shard} documents per "
        f"shard, file k's documents k times longer, medians of {args.reps} interleaved runs "
        f"per order; code {source_state()}):\n"
    )
    out("| shard order | idle actor-seconds at the job's end | pool seconds | job wall seconds |")
    out("|---|---|---|---|")
    for order, label in (("plan", "plan (before)"), ("largest_first", "largest first (after)")):
        cells = [f"{med(order, k):.2f}" for k in ("tail", "pool", "wall")]
        out(f"| {label} | " + " | ".join(cells) + " |")
    tail_ratio = med("largest_first", "tail") / max(med("plan", "tail"), 1e-9)
    pool_ratio = med("largest_first", "pool") / max(med("plan", "pool"), 1e-9)
    out(
        f"\nIdle tail after / before: **{tail_ratio:.2f}x**; "
        f"pool time after / before: {pool_ratio:.2f}x."
    )
    all_runs = runs["plan"] + runs["largest_first"]
    first = statistics.median(r["first_ready"] for r in all_runs)
    load = statistics.median(r["load"] for r in all_runs)
    wall = statistics.median(r["wall"] for r in all_runs)
    out(
        f"Start-up in these jobs: Ray start {ray_start:.2f}s (once per process), "
        f"first actor ready {first:.2f}s "
        f"(spawn + imports + model load; model load alone {load:.2f}s), "
        f"= {first / wall:.2f} of a job's wall time ({wall:.2f}s)."
    )
    publish("elastic", lines, args.save)


if __name__ == "__main__":
    main()
