"""The decomposition's own cost, this code against a baseline git revision, side by side.

What the block's algebra costs on top of the forward pass: the time the engine spends in
its per-block finish (the groups' arithmetic once a block's hooks have fired), summed over
the layers of one ``MixingEngine.run``, on the packaged MiniLM at a batch of real WikiText-2
text. Each repetition runs two fresh processes, this code and the baseline's ``src/``
(``git archive``), in alternating order; each process prints the median over ``--runs``
engine runs; the figure is the median of the per-repetition ratios (this / baseline).

    python benchmarks/decomposition.py --baseline 820ef72            # paper group
    python benchmarks/decomposition.py --baseline 820ef72 --groups all
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from common import REPO, source_state


def child(args: argparse.Namespace) -> None:
    """One process: the median finish and run milliseconds, as one JSON line."""
    import torch

    from common import minilm_path, wikitext_path
    from mixscope.mixing.engine import MixingEngine
    from mixscope.models.loading import load
    from models import real_batch

    torch.set_num_threads(args.threads)
    loaded = load(str(minilm_path()))
    inputs = real_batch(loaded.tokenizer, args.batch, args.seq_len, wikitext_path())[0]
    spent = [0.0]
    real = MixingEngine._finish

    def timed(self: Any, *a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        try:
            return real(self, *a, **k)
        finally:
            spent[0] += time.perf_counter() - t

    MixingEngine._finish = timed  # type: ignore[method-assign]
    groups = None if args.groups == "paper" else args.groups
    engine = MixingEngine(loaded, measures=groups, attention="fast")
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    for _ in range(3):
        engine.run(ids, mask)
    finish, total = [], []
    for _ in range(args.runs):
        spent[0] = 0.0
        t = time.perf_counter()
        engine.run(ids, mask)
        total.append(time.perf_counter() - t)
        finish.append(spent[0])
    med = {"finish_ms": statistics.median(finish) * 1e3, "run_ms": statistics.median(total) * 1e3}
    print(json.dumps(med))


def run_child(src: str, args: argparse.Namespace) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--child", "--groups", args.groups, "--runs", str(args.runs)]
    cmd += ["--batch", str(args.batch), "--seq-len", str(args.seq_len)]
    cmd += ["--threads", str(args.threads)]
    env = {**os.environ, "PYTHONPATH": src, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline", default="820ef72", help="git revision to compare against")
    p.add_argument("--groups", default="paper", help="paper, or all, or a list")
    p.add_argument("--reps", type=int, default=3, help="paired repetitions (fresh processes)")
    p.add_argument("--runs", type=int, default=25, help="engine runs per process")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--threads", type=int, default=max(1, os.cpu_count() or 2))
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args)
        return
    from host import baseline_src

    with tempfile.TemporaryDirectory(prefix="mixscope-baseline-") as tmp:
        sides = {"this": str(REPO / "src"), "baseline": baseline_src(args.baseline, tmp)}
        rows: dict[str, list[dict[str, float]]] = {k: [] for k in sides}
        for rep in range(args.reps):
            order = list(sides) if rep % 2 == 0 else list(sides)[::-1]
            for name in order:
                rows[name].append(run_child(sides[name], args))
            print(f"  rep {rep + 1}: " + ", ".join(
                f"{k} finish {rows[k][-1]['finish_ms']:.1f} ms of {rows[k][-1]['run_ms']:.1f}"
                for k in sides), file=sys.stderr, flush=True)  # fmt: skip
    ratio = statistics.median(
        a["finish_ms"] / b["finish_ms"] for a, b in zip(rows["this"], rows["baseline"], strict=True)
    )
    med = {k: statistics.median(r["finish_ms"] for r in v) for k, v in rows.items()}
    print(
        f"decomposition ({args.groups}, MiniLM {args.batch}×{args.seq_len}, {args.threads} "
        f"threads): this code ({source_state()}) {med['this']:.1f} ms, baseline "
        f"{args.baseline} {med['baseline']:.1f} ms per run; this / baseline **{ratio:.2f}×** "
        f"(median of {args.reps} paired repetitions)"
    )


if __name__ == "__main__":
    main()
