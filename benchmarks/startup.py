"""Start-up cost of a small Ray job, phase by phase, and of ``checkpoints sync`` sessions.

Part 1, one job: the demo job (packaged MiniLM, ``--tokens`` ~35k tokens of WikiText in
documents of ~60 words, 2 CPU actors) on a Ray started by this process. Phases come from
the job's ``actors.json`` (``pool_status.py``): Ray start, first actor ready (process
spawn + imports + model load), model load alone, the shard phase (reading, tokenizing,
analysis, writing: pool seconds less first actor ready), and the rest of the wall time
(planning, commits, run record). Side by side, in the same run: the same job in-process
(``runtime.executor: local``, no Ray at all), so the ratio Ray wall / in-process wall
is the price of the pool on a job this small; and the same Ray job with the first-shard
overlap switched off (``actor_pool.OVERLAP_FIRST_SHARD = False``: actors created without a
first shard, the behaviour before the overlap landed), so overlapped / serial is its gain.

Part 2, ``checkpoints sync``: ``--checkpoints`` tiny BERT checkpoints (tests/tiny_models.py)
on disk, analysed by one ``sync_pass`` in one Ray session, against one ``sync_pass`` per
checkpoint with a fresh Ray session each (``ray.shutdown()`` between: what a loop of
separate sync processes pays). ``RAY_INITS`` (runtime/ray_executor.py) is printed for both.

    python benchmarks/startup.py [--reps 2] [--tokens 35000] [--checkpoints 3] [--save]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from common import REPO, publish, tests_module, timed_job, wikitext_path

#: this benchmark's README section (``--save``; benchmarks/readme.py splices it in)
RESULTS = REPO / "benchmarks" / "results" / "startup.md"


def make_corpus(folder: Path, tokens: int) -> list[str]:
    """WikiText lines regrouped into ~60-word documents, about ``tokens`` word pieces."""
    words = wikitext_path().read_text(encoding="utf-8").split()
    n_words = int(tokens / 1.3)  # ~1.3 MiniLM word pieces per WikiText word
    words = (words * (1 + n_words // max(1, len(words))))[:n_words]
    lines = [" ".join(words[i : i + 60]) for i in range(0, len(words), 60)]
    path = folder / "corpus.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [str(path)]


def run_job_once(corpus: list[str], out: Path, mode: str) -> dict:
    """One timed job: ``ray`` (first shard prefetched while the model loads), ``ray-serial``
    (the baseline: actors created without a first shard, so reading and tokenizing wait for
    the model) or ``local`` (in-process, no Ray)."""
    from mixscope.runtime import actor_pool

    actor_pool.OVERLAP_FIRST_SHARD = mode != "ray-serial"
    try:
        executor = "local" if mode == "local" else "ray"
        return timed_job(corpus, out, runtime__executor=executor, runtime__docs_per_shard=100)
    finally:
        actor_pool.OVERLAP_FIRST_SHARD = True


def sync_timing(tmp: Path, n: int, one_session: bool) -> tuple[float, int]:
    """Seconds and ray.init calls of syncing ``n`` checkpoints, one session or one each."""
    import ray
    import torch

    from mixscope.checkpoints.sync import sync_pass
    from mixscope.config import load_spec
    from mixscope.runtime import ray_executor

    build = tests_module("tiny_models").build

    tag = "one" if one_session else "each"
    train = tmp / f"train-{tag}"
    old = time.time() - 3600
    for k in range(n):
        folder = train / f"checkpoint-{100 * (k + 1)}"
        model, tok = build("bert", torch.float32, seed=k)
        model.save_pretrained(folder)
        tok.save_pretrained(folder)
        for p in folder.rglob("*"):
            os.utime(p, (old, old))
    probe = tmp / "probe.txt"
    probe.write_text("A short probe sentence.\nAnother probe sentence, a little longer.\n")
    spec = load_spec(
        None,
        {
            "name": f"bench-{tag}",
            "corpus.paths": [str(probe)],
            "out": str(tmp / f"out-{tag}"),
            "analysis.max_length": 32,
            "runtime.workers": 1,
            "checkpoints.quiet_seconds": 30,
        },
    )
    if ray.is_initialized():
        ray.shutdown()
    inits = ray_executor.RAY_INITS
    t0 = time.time()
    if one_session:
        report = sync_pass(spec, source=str(train))
        assert report.count("analysed") == n, report
    else:
        for k in range(n):
            report = sync_pass(spec, source=str(train / f"checkpoint-{100 * (k + 1)}"))
            assert report.count("analysed") == 1, report
            ray.shutdown()
    seconds = time.time() - t0
    return seconds, ray_executor.RAY_INITS - inits


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=35_000)
    ap.add_argument("--checkpoints", type=int, default=3)
    ap.add_argument("--save", action="store_true", help=f"also write {RESULTS}")
    args = ap.parse_args()
    import ray

    from mixscope.runtime.ray_executor import ensure_ray

    tmp = Path(tempfile.mkdtemp(prefix="mx-startup-"))
    try:
        corpus = make_corpus(tmp, args.tokens)
        t0 = time.time()
        ensure_ray(None)
        ray_start = time.time() - t0
        # one untimed job first: the process's first job pays one-time imports and caches
        run_job_once(corpus, tmp / "out-warm-up", "ray")
        shutil.rmtree(tmp / "out-warm-up", ignore_errors=True)
        modes = ("ray", "ray-serial", "local")
        runs: dict[str, list[dict]] = {m: [] for m in modes}
        for rep in range(args.reps):
            for ex in modes if rep % 2 == 0 else modes[::-1]:
                out = tmp / f"out-{ex}-{rep}"
                runs[ex].append(run_job_once(corpus, out, ex))
                shutil.rmtree(out, ignore_errors=True)
                print(f"  {ex} rep {rep}: {runs[ex][-1]}", flush=True)
        ray.shutdown()
        one = sync_timing(tmp, args.checkpoints, one_session=True)
        each = sync_timing(tmp, args.checkpoints, one_session=False)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)

    def med(ex: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[ex])

    ray_wall, local_wall = med("ray", "wall"), med("local", "wall")
    serial_wall = med("ray-serial", "wall")
    lines: list[str] = []
    out = lines.append
    out(
        f"Start-up of a small job (MiniLM, ~{args.tokens} tokens, 2 CPU actors, "
        f"medians of {args.reps}); *overlapped*: each actor is created with its first shard, "
        "read and tokenized while the model loads; *serial*: the baseline, actors created "
        "without one:\n"
    )
    out("| phase | overlapped s | share of wall | serial s | overlapped / serial |")
    out("|---|---|---|---|---|")
    phases = [
        ("first actor ready (spawn + imports + model load)", "first_ready"),
        ("  of which model load", "load"),
        ("shard phase (read, tokenize, analyse, write)", "shards"),
        ("planning, commits, run record", "other"),
        ("Ray job wall (without Ray start)", "wall"),
    ]
    for name, key in phases:
        new, old = med("ray", key), med("ray-serial", key)
        out(f"| {name} | {new:.2f} | {new / ray_wall:.2f} | {old:.2f} | {new / old:.2f}x |")
    out(f"\nRay start (once per process): {ray_start:.2f}s")
    out(
        f"\nwith the first shard overlapped / serial: **{ray_wall / serial_wall:.2f}x** "
        f"job wall; in-process (runtime.executor: local) wall {local_wall:.2f}s; "
        f"Ray / in-process: **{ray_wall / local_wall:.2f}x** "
        f"(with Ray start: {(ray_wall + ray_start) / local_wall:.2f}x)"
    )
    out(
        f"\ncheckpoints sync of {args.checkpoints} tiny checkpoints: one Ray session "
        f"{one[0]:.2f}s ({one[1]} ray.init), one session per checkpoint {each[0]:.2f}s "
        f"({each[1]} ray.init); one / each: **{one[0] / each[0]:.2f}x**"
    )

    publish("startup", lines, args.save)


if __name__ == "__main__":
    main()
