"""The ``ff`` measure group: analysis with paper + ff over the plain SDPA forward, and memory.

Measured side by side in one run, on the same model, batch and machine:

1. **Time.** For each (model, n, batch): the plain SDPA forward ``model(**inputs)`` and
   ``MixingEngine.run`` on the fast attention path with the paper's group alone and with
   ``paper + ff`` (no padding). Printed: paper + ff over the SDPA forward (goal ≤ 2.1×: a
   layer's FF is about two thirds of its matrix products and the group adds about 1.5 FF
   passes, so ≈ 1.7–2× is the floor; a mixture of experts ≤ 2.5×: its split recomputes the
   routed experts' pre-activations), the paper alone over SDPA (≤ 1.10×), and what ff adds
   to the paper's (paired ratios of interleaved repetitions, benchmarks/timing.py).
2. **Memory.** Peak memory of one sequence of n tokens (512 → 8k) on the small Llama-family
   config of benchmarks/attention.py: the SDPA forward, the paper's fast analysis and paper
   + ff (peak RSS increase of a fresh process each on CPU, ``max_memory_allocated`` on
   CUDA). Linear in n: the group keeps two parts per token, never a per-pair tensor.

The CPU table times the packaged MiniLM (real weights) and a small random Llama; ``--gpu``
a random BERT-base and a 1B-shaped Llama (tests/shaped_models.py), no model package needed.

    python benchmarks/ff.py                    # CPU, ~3 minutes
    python benchmarks/ff.py --quick            # smoke test
    python benchmarks/ff.py --device cuda --dtype bfloat16 --gpu   # a lent GPU
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch

from attention import (
    LABELS,
    _dtype,
    analysis_fn,
    batch_inputs,
    encoder,
    forward_fn,
    llama,
    llama_shape,
    memory_curve,
    memory_shape,
    mib,
)
from common import REPO, shaped, source_state
from timing import interleaved, paired_ratio, synchronizer

#: this benchmark's README section (``--save``; benchmarks/readme.py splices it in)
RESULTS = REPO / "benchmarks" / "results" / "ff.md"
#: the GPU run's (``--device cuda``): its own README section
GPU_RESULTS = REPO / "benchmarks" / "results" / "ff-gpu.md"
GOAL = 2.1
#: a mixture of experts' goal (its table row): the split recomputes the routed experts
MOE_GOAL = 2.5
WITH_FF = "paper,ff"


def time_case(name: str, loaded: Any, batch: int, n: int, reps: int) -> dict:
    device = next(loaded.model.parameters()).device
    inputs = batch_inputs(loaded, batch, n, device)
    methods = {
        "sdpa": forward_fn(loaded, inputs, "sdpa"),
        "paper": analysis_fn(loaded, inputs, "fast"),
        "ff": analysis_fn(loaded, inputs, "fast", WITH_FF),
    }
    times = interleaved(methods, reps, synchronizer(device), warmup=1)
    return {
        "model": name,
        "n": n,
        "batch": batch,
        "sdpa_s": sorted(times["sdpa"])[len(times["sdpa"]) // 2],
        "ff_over_sdpa": paired_ratio(times["ff"], times["sdpa"]),
        "paper_over_sdpa": paired_ratio(times["paper"], times["sdpa"]),
        "ff_over_paper": paired_ratio(times["ff"], times["paper"]),
    }


def report(times: list[dict], memory: list[dict], args: argparse.Namespace) -> str:
    """The results as markdown (what ``--save`` writes for the README)."""
    out: list[str] = []
    say = out.append
    flags = "".join(
        f" {f}"
        for f in (
            f"--device {args.device}" if args.device != "cpu" else "",
            f"--dtype {args.dtype}" if args.dtype != "float32" else "",
            "--gpu" if args.gpu else "",
            "--quick" if args.quick else "",
        )
        if f
    )
    say(f"The `ff` group ({args.device}, {args.dtype}, {torch.get_num_threads()} threads; "
        f"code {source_state()}; `python benchmarks/ff.py{flags}`):")  # fmt: skip
    say("")
    say("| model | n × batch | SDPA forward | paper + ff / SDPA (goal) | paper / SDPA "
        "| paper + ff / paper |")  # fmt: skip
    say("|---|---|---|---|---|---|")
    for t in times:
        goal = MOE_GOAL if t["model"].startswith("MoE") else GOAL
        ok = "met" if t["ff_over_sdpa"] <= goal else "NOT met"
        say(
            f"| {t['model']} | {t['n']:,} × {t['batch']} | {t['sdpa_s'] * 1e3:,.1f} ms "
            f"| **{t['ff_over_sdpa']:.2f}×** (≤ {goal}, {ok}) | {t['paper_over_sdpa']:.2f}× "
            f"| {t['ff_over_paper']:.2f}× |"
        )
    if memory:
        shape = memory_shape()
        kind = "peak RSS increase" if args.device == "cpu" else "max_memory_allocated"
        by = {(r["mode"], r["n"]): r["peak_mib"] for r in memory}
        say("")
        say(f"Peak memory of one sequence of n tokens, a Llama-family config ({shape}); {kind}:")
        say("")
        say(
            "| n | SDPA forward | paper (fast) | paper + ff (fast) | paper + ff MiB per 1k tokens |"
        )
        say("|---|---|---|---|---|")
        for n in args.memory_n:
            ff = by.get((f"fast@{WITH_FF}", n))
            per_k = "" if ff is None else f"{ff / (n / 1000):,.2f}"
            say(f"| {n:,} | {mib(by.get(('sdpa', n)))} | {mib(by.get(('fast', n)))} "
                f"| {mib(ff)} | {per_k} |")  # fmt: skip
        ns = [n for n in args.memory_n if by.get((f"fast@{WITH_FF}", n))]
        if len(ns) >= 2:
            lo, hi = ns[0], ns[-1]
            growth = by[(f"fast@{WITH_FF}", hi)] / by[(f"fast@{WITH_FF}", lo)]
            say("")
            say(f"paper + ff: ×{growth:.1f} memory for ×{hi / lo:.0f} tokens ({lo:,} → {hi:,}); "
                f"linear is ×{hi / lo:.0f}, quadratic ×{(hi / lo) ** 2:.0f}.")  # fmt: skip
    return "\n".join(out) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2)))
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="smoke test: small sizes, 1 repetition")
    p.add_argument(
        "--gpu", action="store_true", help="GPU shapes: random BERT-base, 1B Llama (n 2048)"
    )
    p.add_argument("--no-memory", action="store_true", help="skip the memory curve")
    p.add_argument("--memory-max", type=int, default=8192, help="largest n of the memory curve")
    p.add_argument("--cpu-cap-gib", type=float, default=6.0, help=argparse.SUPPRESS)
    p.add_argument("--save", action="store_true", help=f"also write {RESULTS} (the README's)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    sizes = [512, 2048] if args.quick else [512, 1024, 2048, 4096, 8192, 16384]
    args.memory_n = [n for n in sizes if n <= args.memory_max]
    if args.quick:
        args.reps = 1
    torch.set_num_threads(args.threads)
    device, dtype = torch.device(args.device), _dtype(args.dtype)
    n_llama = 512 if args.quick else 2048
    label, mini = encoder(args, device, dtype)
    shape = llama_shape(args)
    cases = [
        (label, mini, 4 if args.quick else (64 if args.gpu else 32), 128),
        (LABELS[f"llama-{shape}"], llama(shape, device, dtype, n_llama), 1, n_llama),
        (LABELS["moe-small"], shaped("moe-small", device, dtype, n_llama), 1, n_llama),
    ]
    times = []
    for name, loaded, batch, n in cases:
        print(f"timing {name} n={n} batch={batch} …", flush=True)
        times.append(time_case(name, loaded, batch, n, args.reps))
    memory = [] if args.no_memory else memory_curve(args, ("sdpa", "fast", f"fast@{WITH_FF}"))
    text = report(times, memory, args)
    print(text)
    if args.save:
        path = RESULTS if args.device == "cpu" else GPU_RESULTS
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(__file__))
    main()
