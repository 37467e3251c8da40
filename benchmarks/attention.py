"""Fast attention path: analysis time over the plain SDPA forward, and peak memory vs n.

Measured side by side in one run, on the same model, batch and machine:

1. **Time.** For each (model, n, batch): the plain SDPA forward ``model(**inputs)``, the
   plain eager forward, and ``MixingEngine.run`` with ``attention="fast"`` and ``"eager"``
   on the same batch (no padding). Printed: fast / SDPA forward (goal <= 1.15x at n = 128,
   <= 1.10x at n >= 2k), eager analysis / SDPA forward and / eager forward (the old path),
   and max |fast − eager| over the five measures. Repetitions interleaved, medians of the
   per-repetition ratios (benchmarks/timing.py); fast and SDPA in a loop of their own, the
   eager pair in a second one (eager's n × n buffers would change the heap under the others).
2. **Memory.** Peak memory of one batch of n tokens on a small Llama-family config (GQA),
   n = 512 … 16k: the SDPA forward, the fast analysis and the eager analysis, until eager
   runs out of memory. CPU: peak RSS increase in a fresh process per configuration, eager
   under an address-space cap (``--cpu-cap-gib``); CUDA: ``max_memory_allocated``.

Model weights are random (configs, no download: tests/shaped_models.py) except MiniLM, the
real packaged model of the CPU table; timing does not depend on the weights. ``--gpu`` times
the shapes GPUs run, a random BERT-base and a 1B-shaped Llama, and needs no model package
(the lent GPU machine has none: benchmarks/gpu_check.sh); with ``--quick`` their small
siblings (the check's dry run).

    python benchmarks/attention.py                    # CPU, ~5 minutes
    python benchmarks/attention.py --quick            # smoke test
    python benchmarks/attention.py --device cuda --dtype bfloat16 --gpu   # a lent GPU
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch

from common import REPO, shaped, source_state, tests_module
from timing import MALLOC_ENV, RssSampler, current_rss, interleaved, paired_ratio, synchronizer

#: this benchmark's README section (``--save``; benchmarks/readme.py splices it in)
RESULTS = REPO / "benchmarks" / "results" / "attention.md"
#: the GPU run's (``--device cuda``): its own README section
GPU_RESULTS = REPO / "benchmarks" / "results" / "attention-gpu.md"

#: the random models' shapes (tests/shaped_models.py)
SHAPES = tests_module("shaped_models").SHAPES
LABELS = tests_module("shaped_models").LABELS


def llama(shape: str, device: torch.device, dtype: torch.dtype, positions: int) -> Any:
    """A random Llama-family model (``shape``: "1b", "small", "memory"; GQA, RMSNorm,
    rotary) loaded for the engine."""
    return shaped(f"llama-{shape}", device, dtype, positions)


def minilm(device: torch.device, dtype: torch.dtype) -> Any:
    from mixscope.models.loading import load
    from mixscope.models.packaged import DEFAULT_MODEL

    return load(DEFAULT_MODEL, dtype=dtype, device=device)


def encoder(args: argparse.Namespace, device: torch.device, dtype: torch.dtype) -> tuple:
    """(label, loaded) of the encoder timed: the packaged MiniLM (real weights) on the CPU
    table; with ``--gpu`` a random BERT-base, the shape GPUs run (BERT-small with
    ``--quick``), which needs no model package."""
    if not args.gpu:
        return "MiniLM-L6 (real)", minilm(device, dtype)
    shape = "bert-small" if args.quick else "bert-base"
    return LABELS[shape], shaped(shape, device, dtype)


def llama_shape(args: argparse.Namespace) -> str:
    """The Llama timed: the 1B shape with ``--gpu``, the small one otherwise or ``--quick``."""
    return "1b" if args.gpu and not args.quick else "small"


def batch_inputs(loaded: Any, batch: int, n: int, device: torch.device) -> dict[str, Any]:
    """``batch`` sequences of exactly ``n`` random in-vocabulary tokens, no padding."""
    gen = torch.Generator().manual_seed(n)
    vocab = int(loaded.model.config.vocab_size)
    ids = torch.randint(1000, min(vocab, 30000), (batch, n), generator=gen)
    return {"input_ids": ids.to(device), "attention_mask": torch.ones_like(ids).to(device)}


def forward_fn(loaded: Any, inputs: dict[str, Any], implementation: str):
    from mixscope.mixing.engine import attention_implementation

    model = loaded.model
    kwargs = dict(loaded.adapter.forward_kwargs)

    @torch.inference_mode()
    def run() -> Any:
        with attention_implementation(model, implementation):
            return model(**inputs, **kwargs).last_hidden_state

    return run


def analysis_fn(loaded: Any, inputs: dict[str, Any], attention: str, measures: str | None = None):
    """``MixingEngine.run`` on ``inputs`` (``measures``: the groups, default the paper's)."""
    from mixscope.mixing.engine import MixingEngine

    engine = MixingEngine(loaded, attention=attention, measures=measures)

    def run() -> Any:
        return engine.run(inputs["input_ids"], inputs["attention_mask"]).measures

    return run


def padded_agreement(loaded: Any, n: int) -> float:
    """max |fast − eager| over the real tokens of a padded batch (left and right padding):
    on a GPU this exercises the masked kernels, which an unpadded timing batch does not."""
    from mixscope.mixing.engine import MixingEngine

    device = next(loaded.model.parameters()).device
    lengths = [n, n // 2, n // 4 + 1, 3]
    ids = batch_inputs(loaded, len(lengths), n, device)["input_ids"]
    worst = 0.0
    for side in ("right", "left"):
        mask = torch.zeros_like(ids)
        for b, length in enumerate(lengths):
            span = slice(0, length) if side == "right" else slice(n - length, n)
            mask[b, span] = 1
        out = {
            att: MixingEngine(loaded, attention=att).run(ids, mask).measures.cpu()
            for att in ("fast", "eager")
        }  # [batch, layer, measure, seq]
        real = mask.bool().cpu()[:, None, None, :].expand_as(out["fast"])
        worst = max(worst, float((out["fast"] - out["eager"]).abs()[real].max()))
    return worst


# --------------------------------------------------------------------------- time


def time_case(name: str, loaded: Any, batch: int, n: int, args: argparse.Namespace) -> dict:
    device = next(loaded.model.parameters()).device
    inputs = batch_inputs(loaded, batch, n, device)
    methods = {
        "sdpa": forward_fn(loaded, inputs, "sdpa"),
        "eager_forward": forward_fn(loaded, inputs, "eager"),
        "fast": analysis_fn(loaded, inputs, "fast"),
        "eager": analysis_fn(loaded, inputs, "eager"),
    }
    diff = float((methods["fast"]() - methods["eager"]()).abs().max())  # no padding
    sync = synchronizer(device)
    # Two interleaved loops: the fast path against SDPA alone (as a job runs it), then the
    # eager pair. Interleaved with the eager path, every fast or SDPA call would follow a
    # [batch, heads, n, n] allocation that leaves the allocator's heap in another state
    # (at n = 2048 on CPU that alone moved fast / SDPA by +0.1–0.2×).
    pair = ("sdpa", "fast")
    times = interleaved({k: methods[k] for k in pair}, args.reps, sync, warmup=1)
    others = {k: v for k, v in methods.items() if k not in pair}
    times |= interleaved({"sdpa_again": methods["sdpa"], **others}, args.reps, sync, warmup=1)
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    return {
        "model": name,
        "n": n,
        "batch": batch,
        "sdpa_s": med["sdpa"],
        "fast_over_sdpa": paired_ratio(times["fast"], times["sdpa"]),
        "eager_over_sdpa": paired_ratio(times["eager"], times["sdpa_again"]),
        "eager_over_eager_forward": paired_ratio(times["eager"], times["eager_forward"]),
        "max_diff": max(diff, padded_agreement(loaded, min(n, 512))),
        "goal": 1.15 if n < 2048 else 1.10,
    }


# --------------------------------------------------------------------------- memory


def memory_peak(mode: str, n: int, args: argparse.Namespace) -> float | None:
    """Peak MiB of one (mode, n); None when it ran out of memory. ``mode``: "sdpa", or an
    attention path with optional groups, "fast" / "eager" / "fast@paper,ff". On CUDA in
    this process (``max_memory_allocated`` counts this call alone), on the CPU in a fresh
    one (:func:`memory_child`: RSS counts the whole process)."""
    attention, _, measures = mode.partition("@")
    device = torch.device(args.device)
    loaded = llama("memory", device, _dtype(args.dtype), max(n, 512))
    inputs = batch_inputs(loaded, 1, n, device)
    fn = (
        forward_fn(loaded, inputs, "sdpa")
        if mode == "sdpa"
        else analysis_fn(loaded, inputs, attention, measures or None)
    )
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        try:
            fn()
            torch.cuda.synchronize()
            peak = (torch.cuda.max_memory_allocated() - base) / 2**20
        except torch.cuda.OutOfMemoryError:
            peak = None
        del loaded, inputs, fn
        gc.collect()
        torch.cuda.empty_cache()
    else:
        with open("/proc/self/statm") as fh:
            virtual = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        cap = virtual + int(args.cpu_cap_gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (cap, resource.RLIM_INFINITY))
        base = current_rss()
        try:
            with RssSampler() as sampler:
                fn()
            peak = (sampler.peak - base) / 2**20
        except (RuntimeError, MemoryError):
            peak = None
    return peak


def memory_child(spec: str, args: argparse.Namespace) -> None:
    """One (mode, n) in this fresh process (``spec``: "mode:n"); prints one JSON line."""
    mode, n = spec.rsplit(":", 1)
    torch.set_num_threads(args.threads)
    print(json.dumps({"mode": mode, "n": int(n), "peak_mib": memory_peak(mode, int(n), args)}))


def memory_row(mode: str, n: int, args: argparse.Namespace) -> dict:
    """One (mode, n) of the curve: in this process on CUDA, in a fresh one on the CPU."""
    if args.device.startswith("cuda"):
        return {"mode": mode, "n": n, "peak_mib": memory_peak(mode, n, args)}
    cmd = [sys.executable, __file__, "--memory-child", f"{mode}:{n}",
           "--device", args.device, "--dtype", args.dtype, "--threads",
           str(args.threads), "--cpu-cap-gib", str(args.cpu_cap_gib)]  # fmt: skip
    env = {**os.environ, **MALLOC_ENV}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    row = json.loads(lines[-1]) if lines else {"mode": mode, "n": n, "peak_mib": None}
    if not lines:  # killed (the OOM killer) or crashed: out of memory too
        row["error"] = (done.stderr.strip().splitlines() or ["exit"])[-1][:80]
    return row


def memory_curve(
    args: argparse.Namespace, modes: tuple[str, ...] = ("sdpa", "fast", "eager")
) -> list[dict]:
    """Peak memory of each mode at each n (``args.memory_n``, :func:`memory_row`); eager
    is not tried again at a larger n once it ran out of memory."""
    rows: list[dict] = []
    eager_alive = True
    for n in args.memory_n:
        for mode in modes:
            if mode == "eager" and not eager_alive:
                rows.append({"mode": mode, "n": n, "peak_mib": None, "skipped": True})
                continue
            row = memory_row(mode, n, args)
            rows.append(row)
            if mode == "eager" and row["peak_mib"] is None:
                eager_alive = False
            print(f"  memory {mode:>5} n={n:>6}: {mib(row['peak_mib'])}", flush=True)
    return rows


# --------------------------------------------------------------------------- report


def memory_shape() -> str:
    """The memory curve's Llama config in words ("hidden size 128, …, key value heads 2")."""
    fields = SHAPES["llama-memory"][1].items()
    return ", ".join(
        f"{k.removeprefix('num_').replace('_', ' ')} {v}" for k, v in fields if k != "vocab_size"
    )


def mib(v: float | None) -> str:
    return "out of memory" if v is None else f"{v:,.1f} MiB"


def _dtype(name: str) -> torch.dtype:
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def report(times: list[dict], memory: list[dict], args: argparse.Namespace) -> str:
    """The results as markdown (what ``--save`` writes for the README)."""
    out: list[str] = []
    say = out.append
    say(f"Fast attention ({args.device}, {args.dtype}, {torch.get_num_threads()} threads; "
        f"code {source_state()}; `python benchmarks/attention.py{_flags(args)}`):")  # fmt: skip
    say("")
    say("| model | n × batch | SDPA forward | fast / SDPA (goal) | eager / SDPA "
        "| eager / eager forward | max abs(fast − eager), padded too |")  # fmt: skip
    say("|---|---|---|---|---|---|---|")
    for t in times:
        ok = "met" if t["fast_over_sdpa"] <= t["goal"] else "NOT met"
        say(
            f"| {t['model']} | {t['n']:,} × {t['batch']} | {t['sdpa_s'] * 1e3:,.1f} ms "
            f"| **{t['fast_over_sdpa']:.3f}×** (≤ {t['goal']:.2f}, {ok}) "
            f"| {t['eager_over_sdpa']:.3f}× | {t['eager_over_eager_forward']:.3f}× "
            f"| {t['max_diff']:.1e} |"
        )
    if memory:
        shape = memory_shape()
        kind = "peak RSS increase" if args.device == "cpu" else "max_memory_allocated"
        say("")
        say(f"Peak memory of one sequence of n tokens, a Llama-family config ({shape}); {kind}, "
            f"eager capped at {args.cpu_cap_gib:g} GiB on CPU:")  # fmt: skip
        say("")
        say("| n | SDPA forward | fast analysis | eager analysis | fast MiB per 1k tokens |")
        say("|---|---|---|---|---|")
        by = {(r["mode"], r["n"]): r["peak_mib"] for r in memory}
        for n in args.memory_n:
            fast = by.get(("fast", n))
            per_k = "" if fast is None else f"{fast / (n / 1000):,.2f}"
            say(f"| {n:,} | {mib(by.get(('sdpa', n)))} | {mib(fast)} "
                f"| {mib(by.get(('eager', n)))} | {per_k} |")  # fmt: skip
        ns = [n for n in args.memory_n if by.get(("fast", n))]
        if len(ns) >= 2:
            lo, hi = ns[0], ns[-1]
            growth = by[("fast", hi)] / by[("fast", lo)]
            say("")
            say(f"Fast path: ×{growth:.1f} memory for ×{hi / lo:.0f} tokens ({lo:,} → {hi:,}); "
                f"linear is ×{hi / lo:.0f}, quadratic ×{(hi / lo) ** 2:.0f}.")  # fmt: skip
    return "\n".join(out) + "\n"


def _flags(args: argparse.Namespace) -> str:
    flags = [f"--device {args.device}"] if args.device != "cpu" else []
    flags += [f"--dtype {args.dtype}"] if args.dtype != "float32" else []
    flags += ["--gpu"] if args.gpu else []
    flags += ["--quick"] if args.quick else []
    return "".join(" " + f for f in flags)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2)))
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="smoke test: small n, 1 repetition")
    p.add_argument(
        "--gpu", action="store_true", help="GPU shapes: random BERT-base, 1B Llama, n to 32k"
    )
    p.add_argument("--cpu-cap-gib", type=float, default=6.0, help="eager's memory cap (CPU)")
    p.add_argument("--no-memory", action="store_true", help="skip the memory curve")
    p.add_argument("--memory-max", type=int, default=None, help="largest n of the memory curve")
    p.add_argument("--save", action="store_true", help=f"also write {RESULTS} (the README's)")
    p.add_argument("--decoder", default=None, help="random decoders to time (gemma3,olmo2)")
    p.add_argument("--decoder-n", type=int, default=1024, help="their sequence length")
    p.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def decoder_table(args: argparse.Namespace, device: torch.device) -> None:
    """fast / SDPA (and eager) for the random decoders named by ``--decoder`` (the 2024–26
    layouts: ``gemma3``, ``olmo2``; benchmarks/models.py), one sequence of ``--decoder-n``
    tokens each, printed and, with ``--save``, written as ``attention-decoders.md``."""
    from common import publish
    from models import DECODER_CONFIGS, build_decoder

    rows = []
    for name in args.decoder.split(","):
        if name not in DECODER_CONFIGS:
            raise SystemExit(f"unknown decoder {name!r}; choose from {sorted(DECODER_CONFIGS)}")
        loaded = build_decoder(name, device, None if args.dtype == "float32" else args.dtype)
        print(f"  timing random {name} n={args.decoder_n} …", flush=True)
        rows.append(time_case(f"{name} (random)", loaded, 1, args.decoder_n, args))
        del loaded
        gc.collect()
    lines = [
        f"Fast attention on the 2024–26 layouts ({args.device}, {args.dtype}, "
        f"{torch.get_num_threads()} threads; code {source_state()}; `python "
        f"benchmarks/attention.py --decoder {args.decoder} --decoder-n {args.decoder_n}`):",
        "",
        "| model | n × batch | SDPA forward | fast / SDPA (goal ≤ 1.15) | eager / SDPA "
        "| max abs(fast − eager), padded too |",
        "|---|---|---|---|---|---|",
    ]
    for t in rows:
        ok = "met" if t["fast_over_sdpa"] <= 1.15 else "NOT met"
        lines.append(
            f"| {t['model']} | {t['n']:,} × {t['batch']} | {t['sdpa_s'] * 1e3:,.1f} ms "
            f"| **{t['fast_over_sdpa']:.3f}×** ({ok}) | {t['eager_over_sdpa']:.3f}× "
            f"| {t['max_diff']:.1e} |"
        )
    publish("attention-decoders", lines, args.save)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    top = 4096 if args.quick else (32768 if args.gpu else 16384)
    top = min(top, args.memory_max or top)
    args.memory_n = [n for n in (512, 1024, 2048, 4096, 8192, 16384, 32768) if n <= top]
    if args.memory_child:
        memory_child(args.memory_child, args)
        return
    if args.quick:
        args.reps = 1
    torch.set_num_threads(args.threads)
    device, dtype = torch.device(args.device), _dtype(args.dtype)
    if args.decoder:  # one random decoder of benchmarks/models.py at n = --decoder-n
        decoder_table(args, device)
        return
    cases: list[tuple[str, Any, int, int]] = []
    label, mini = encoder(args, device, dtype)
    cases.append((label, mini, 8 if not args.gpu else (4 if args.quick else 64), 128))
    shape = llama_shape(args)
    lengths = [1024] if args.quick else ([2048, 8192] if args.gpu else [2048])
    big = llama(shape, device, dtype, max(lengths))
    cases += [(LABELS[f"llama-{shape}"], big, 1, n) for n in lengths]
    times = []
    for name, loaded, batch, n in cases:
        print(f"  timing {name} n={n} batch={batch} …", flush=True)
        times.append(time_case(name, loaded, batch, n, args))
    del big, mini, cases
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    memory = [] if args.no_memory else memory_curve(args)
    text = report(times, memory, args)
    print("\n" + text)
    if args.save:
        path = RESULTS if args.device == "cpu" else GPU_RESULTS
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path} (python benchmarks/readme.py puts it in the README)")


if __name__ == "__main__":
    main()
