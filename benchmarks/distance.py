"""The distance group's cost and memory (issue 42): paper + distance against the SDPA forward.

Measured side by side in one run, on the same model, batch and machine:

1. **Time.** The plain SDPA forward, the fast analysis with the paper's group alone and with
   paper + distance (``attention="fast"``: α's rows recomputed block by block from q, k and
   the kernel's log-sum-exp), on MiniLM at n = 512 (the packaged model, real weights; a
   random BERT-base with ``--gpu``) and a random Llama-shaped model at n = 2,048 (Llama-small
   on the CPU, Llama-1b with ``--gpu``). Printed: each analysis / SDPA forward, the medians
   of interleaved per-repetition ratios (benchmarks/timing.py). Goals: paper + distance
   <= 1.6x on MiniLM at 512 and <= 2x on the Llama at 2,048.
2. **Memory.** Peak memory of one sequence of n = 1k … 16k tokens on the small Llama of the
   memory curve (benchmarks/attention.py, GQA): the SDPA forward, the fast paper analysis
   and fast paper + distance, each n in a fresh process on the CPU (peak RSS increase),
   ``max_memory_allocated`` on CUDA. Printed: each peak, its ratio to the same mode's peak
   at 1k and to the previous n's (2 per doubling is linear, 4 quadratic).
3. **Pieces.** One layer's distance sums (the first layer's inputs, as the engine handed
   them to mixing/distance.py) timed piece by piece beside the SDPA forward's time per
   layer: the Grams and their factors, α recomputed from q, k and LSE, the per-pair norms
   and weights, the bucket sums; what caps the ratio where a goal is not met.

    python benchmarks/distance.py                  # CPU (~10 minutes on 2 cores)
    python benchmarks/distance.py --quick          # smoke test
    python benchmarks/distance.py --device cuda --dtype bfloat16 --gpu   # a lent GPU
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch

import attention as A
from common import machine, publish, source_state
from timing import interleaved, paired_ratio, synchronizer

#: the goals of issue 42: paper + distance over the SDPA forward
GOALS = {"encoder": 1.6, "llama": 2.0}
MODES = ("sdpa", "fast", "fast@paper,distance")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--threads", type=int, default=min(4, os.cpu_count() or 1))
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--cpu-cap-gib", type=float, default=24.0)
    p.add_argument("--memory-max", type=int, default=16384)
    p.add_argument("--quick", action="store_true", help="small sizes, one repetition")
    p.add_argument("--gpu", action="store_true", help="the GPU shapes (BERT-base, Llama-1b)")
    p.add_argument("--no-memory", action="store_true")
    p.add_argument("--save", action="store_true", help="write benchmarks/results/distance*.md")
    return p.parse_args(argv)


def time_case(label: str, kind: str, loaded, n: int, args: argparse.Namespace) -> dict:
    """SDPA forward, fast paper, fast paper + distance on one batch of n tokens."""
    device = next(loaded.model.parameters()).device
    inputs = A.batch_inputs(loaded, 1, n, device)
    methods = {
        "sdpa": A.forward_fn(loaded, inputs, "sdpa"),
        "paper": A.analysis_fn(loaded, inputs, "fast", "paper"),
        "distance": A.analysis_fn(loaded, inputs, "fast", "paper,distance"),
    }
    times = interleaved(methods, args.reps, synchronizer(device), warmup=1)
    return {
        "model": label,
        "kind": kind,
        "n": n,
        "sdpa_ms": 1e3 * sorted(times["sdpa"])[len(times["sdpa"]) // 2],
        "paper": paired_ratio(times["paper"], times["sdpa"]),
        "distance": paired_ratio(times["distance"], times["sdpa"]),
        "pieces": pieces(loaded, inputs, methods["sdpa"], args),
    }


def pieces(loaded, inputs: dict, forward, args: argparse.Namespace) -> dict[str, float]:
    """Milliseconds of one layer's distance sums, piece by piece, and of the SDPA forward
    per layer (medians of interleaved repetitions)."""
    from mixscope.mixing import distance as D

    captured: list[tuple] = []
    real = D.distance_sums

    def spy(*a, **k):
        captured.append((a, k))
        return real(*a, **k)

    D.distance_sums = spy
    try:
        A.analysis_fn(loaded, inputs, "fast", "paper,distance")()
    finally:
        D.distance_sums = real
    (full, scores, values, p), kw = captured[0][0][:4], captured[0][1]
    shape = (values.shape[0], p.heads, values.shape[1])
    budget, cap = D.block_plan(values.device)  # the blocks distance_sums takes there
    blocks = list(D.row_blocks(full, scores, shape, values.dtype, budget, cap=cap))
    mix = D.head_mix(D.head_grams(values, p, budget), values.dtype)
    pairs = [(start, D.pair_values(alpha, mix)) for start, alpha in blocks]
    methods = {
        "forward": forward,
        "all": lambda: real(*captured[0][0], **kw),
        "grams": lambda: D.head_mix(D.head_grams(values, p, budget), values.dtype),
        "alpha": lambda: [
            a.shape for _, a in D.row_blocks(full, scores, shape, values.dtype, budget, cap=cap)
        ],
        "pairs": lambda: [D.pair_values(a, mix).shape for _, a in blocks],
        "buckets": lambda: [D.bucket_sums(x, start, 12).shape for start, x in pairs],
    }
    times = interleaved(methods, max(3, args.reps), synchronizer(values.device), warmup=1)
    out = {k: 1e3 * sorted(v)[len(v) // 2] for k, v in times.items()}
    out["forward"] /= len(captured)  # per layer
    return out


def time_table(args: argparse.Namespace) -> list[dict]:
    device, dtype = torch.device(args.device), A._dtype(args.dtype)
    enc_n, llama_n = (128, 512) if args.quick else (512, 2048)
    label, enc = A.encoder(args, device, dtype)
    rows = [time_case(label, "encoder", enc, enc_n, args)]
    print(f"  {rows[-1]}", flush=True)
    del enc
    shape = A.llama_shape(args)
    big = A.llama(shape, device, dtype, llama_n)
    rows.append(time_case(A.LABELS[f"llama-{shape}"], "llama", big, llama_n, args))
    print(f"  {rows[-1]}", flush=True)
    return rows


def memory_rows(args: argparse.Namespace) -> list[dict]:
    args.memory_n = [n for n in (1024, 2048, 4096, 8192, 16384) if n <= args.memory_max]
    if args.quick:
        args.memory_n = args.memory_n[:3]
    return A.memory_curve(args, MODES)


def report(times: list[dict], memory: list[dict], args: argparse.Namespace) -> list[str]:
    dev = torch.device(args.device)
    lines = [
        "Distance profiles (issue 42): the fast analysis with the paper's group and with "
        f"paper + distance against the plain SDPA forward, {args.dtype}, on "
        f"{machine(dev)} ({args.threads} threads), code {source_state()}: "
        "`python benchmarks/distance.py" + (" --gpu" if args.gpu else "") + "`.",
        "",
        "| model | n | SDPA forward | paper / forward | paper + distance / forward | goal |",
        "|---|---|---|---|---|---|",
    ]
    for t in times:
        goal = GOALS[t["kind"]]
        met = "met" if t["distance"] <= goal else "NOT met"
        lines.append(
            f"| {t['model']} | {t['n']:,} | {t['sdpa_ms']:,.1f} ms | {t['paper']:.2f}× "
            f"| **{t['distance']:.2f}×** | ≤ {goal}× ({met}) |"
        )
    lines += ["", _pieces_text(times)]
    if memory:
        lines += ["", _memory_text(memory, dev)]
    return lines


def _pieces_text(times: list[dict]) -> str:
    """One layer's distance sums piece by piece (ms, and × the forward's time per layer)."""
    out = [
        "One layer's distance sums piece by piece (ms; in brackets × the SDPA forward's time "
        "per layer), each timed alone on the first layer's inputs:",
        "",
        "| model | forward / layer | distance / layer | Grams + factors | α recomputed "
        "| per-pair norms + weights | bucket sums |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in times:
        p = t["pieces"]
        f = p["forward"]
        cells = " | ".join(
            f"{p[k]:,.1f} ({p[k] / f:.2f}×)" for k in ("all", "grams", "alpha", "pairs", "buckets")
        )
        out.append(f"| {t['model']} | {f:,.1f} | {cells} |")
    return "\n".join(out)


def _memory_text(memory: list[dict], dev: torch.device) -> str:
    what = "peak RSS increase" if dev.type == "cpu" else "max_memory_allocated above the model"
    out = [
        f"Peak memory of one sequence ({what}, MiB) on the memory curve's Llama "
        f"({A.memory_shape()}); in brackets the ratio to the previous n (linear: 2.0 per "
        "doubling, quadratic: 4.0):",
        "",
        "| n | SDPA forward | fast paper | fast paper + distance | distance / 1k |",
        "|---|---|---|---|---|",
    ]
    by = {(r["mode"], r["n"]): r["peak_mib"] for r in memory}
    ns = sorted({r["n"] for r in memory})

    def cell(mode: str, k: int) -> str:
        v = by.get((mode, ns[k]))
        prev = by.get((mode, ns[k - 1])) if k else None
        if v is None:
            return "out of memory"
        return f"{v:,.0f}" + (f" ({v / prev:.2f})" if prev else "")

    first = by.get(("fast@paper,distance", ns[0]))
    for k, n in enumerate(ns):
        v = by.get(("fast@paper,distance", n))
        ratio = f"{v / first:.1f}×" if v and first else "–"
        out.append(f"| {n:,} | {cell('sdpa', k)} | {cell('fast', k)} | {cell(MODES[2], k)} "
                   f"| {ratio} |")  # fmt: skip
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.quick:
        args.reps = 1
    torch.set_num_threads(args.threads)
    times = time_table(args)
    memory = [] if args.no_memory else memory_rows(args)
    name = "distance" if args.device == "cpu" else "distance-gpu"
    publish(name, report(times, memory, args), args.save)


if __name__ == "__main__":
    sys.exit(main())
