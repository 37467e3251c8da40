"""Decoder benchmark: eager forward vs MixingEngine vs analyze, and memory vs n, pre-LN decoders.

A randomly initialized decoder of a known shape (no download): GPT-2 small, a CPU-sized
Llama (RMSNorm, rotary, SwiGLU, grouped-query attention) or a Llama-3.2-1B shape. Measured
side by side in one run: the eager forward ``model(...)``, ``MixingEngine.run`` and
``mixscope.analyze`` on the same batch of real WikiText-2 text (MiniLM WordPiece ids, every
sequence exactly ``n`` tokens), interleaved repetitions, medians; then peak memory of the
engine vs the forward at several n (peak RSS increase in a fresh subprocess per
configuration on CPU, ``max_memory_allocated`` on CUDA).

    python benchmarks/decoder.py --decoder gpt2      # random GPT-2 small: time at 1×512,
    python benchmarks/decoder.py --decoder llama     #   memory at n = 256 … 2048 (~5 min CPU)
    python benchmarks/decoder.py --decoder llama-1b --device cuda --dtype bfloat16
    python benchmarks/decoder.py --decoder gpt2 --quick   # smoke test

(``python benchmarks/engine.py --decoder X …`` runs this too.)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch

from common import fmt_row, machine, progress, rule, save_results, wikitext_path
from models import DECODER_CONFIGS, build_decoder, real_batch
from timing import (
    cuda_peak_mib,
    interleaved,
    paired_ratio,
    quartiles,
    rss_peak_increase,
    run_child,
    start,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--decoder",
        choices=sorted(DECODER_CONFIGS),
        default="gpt2",
        help="the random pre-LN decoder's shape (default gpt2)",
    )
    p.add_argument("--corpus", type=Path, default=wikitext_path(), help="WikiText-style text")
    p.add_argument("--dtype", default=None, help="weights dtype (e.g. bfloat16 on GPU)")
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--seq-len", type=int, default=None, help="default 512 (--quick: 128)")
    p.add_argument("--reps", type=int, default=None, help="timed repetitions (default 5)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda")
    p.add_argument("--quick", action="store_true", help="few repetitions, small sizes")
    p.add_argument("--mem-batch", type=int, default=1, help="batch of the memory rows (1)")
    p.add_argument(
        "--mem-seq-lens", default=None, help="comma-separated lengths (default 256,512,1024,2048)"
    )
    p.add_argument("--no-memory", action="store_true", help="skip the memory section")
    p.add_argument("--json", default=None, help="also write all numbers to this file")
    p.add_argument("--save", action="store_true", help="also write results/decoder-NAME.md")
    p.add_argument("--_memory-child", dest="memory_child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.seq_len is None:
        args.seq_len = 128 if args.quick else 512
    if args.reps is None:
        args.reps = 2 if args.quick else 5
    if args.mem_seq_lens is None:
        args.mem_seq_lens = "256" if args.quick else "256,512,1024,2048"
    args.mem_seq_lens = [int(s) for s in str(args.mem_seq_lens).split(",") if s.strip()]
    if args.threads is None:
        args.threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    return args


# --------------------------------------------------------------------------- memory


def memory_child(args: argparse.Namespace) -> None:
    """One (mode, n, batch) of a decoder in a fresh process: a JSON line with the peak."""
    import transformers

    from mixscope.mixing.engine import MixingEngine

    mode, n, batch = args.memory_child.split(":")
    n, batch = int(n), int(batch)
    torch.set_num_threads(args.threads)
    transformers.utils.logging.disable_progress_bar()
    loaded = build_decoder(args.decoder, torch.device("cpu"), args.dtype)
    inputs, _ = real_batch(loaded.tokenizer, batch, n, args.corpus)
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    if mode == "forward":
        model = loaded.model

        def fn():
            return model(input_ids=ids, attention_mask=mask, use_cache=False)
    else:
        engine = MixingEngine(loaded)

        def fn():
            return engine.run(ids, mask)

    _, increase = rss_peak_increase(fn)
    print(json.dumps({"mode": mode, "n": n, "peak_increase_mb": increase / 2**20}))


def memory_cpu(args: argparse.Namespace) -> list[dict[str, Any]]:
    cmd = [sys.executable, os.path.abspath(__file__), "--threads", str(args.threads)]
    cmd += ["--decoder", args.decoder, "--corpus", str(args.corpus)]
    cmd += ["--dtype", args.dtype] if args.dtype else []
    rows = []
    for n in args.mem_seq_lens:
        row: dict[str, Any] = {"n": n, "batch": args.mem_batch}
        for mode in ("forward", "engine"):
            child = [*cmd, "--_memory-child", f"{mode}:{n}:{args.mem_batch}"]
            row[mode] = run_child(child, f"{mode} n={n}")["peak_increase_mb"]
        rows.append(row)
    return rows


def memory_cuda(args: argparse.Namespace, loaded: Any, engine: Any) -> list[dict]:
    device = next(loaded.model.parameters()).device
    rows = []
    for n in args.mem_seq_lens:
        inputs, _ = real_batch(loaded.tokenizer, args.mem_batch, n, args.corpus)
        ids, mask = inputs["input_ids"].to(device), inputs["attention_mask"].to(device)
        fns = {
            "forward": lambda ids=ids, mask=mask: loaded.model(
                input_ids=ids, attention_mask=mask, use_cache=False
            ),
            "engine": lambda ids=ids, mask=mask: engine.run(ids, mask),
        }
        row: dict[str, Any] = {"n": n, "batch": args.mem_batch}
        for mode, fn in fns.items():
            row[mode] = cuda_peak_mib(fn)
        rows.append(row)
    return rows


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Forward vs engine vs analyze and peak memory vs n for one random decoder config."""
    args = parse_args(argv)
    if args.memory_child:
        memory_child(args)
        return {}

    import transformers

    import mixscope
    from mixscope.mixing.engine import MixingEngine

    what = f"memory: fresh subprocesses, n = {args.mem_seq_lens}"
    device, sync, t_start, mem_rows = start(args, memory_cpu, what)
    progress(f"building a random {args.decoder}", t_start)
    loaded = build_decoder(args.decoder, device, args.dtype)
    model, tok = loaded.model, loaded.tokenizer
    cfg = model.config
    engine = MixingEngine(loaded)
    B, n = args.batch_size, args.seq_len
    inputs_cpu, texts = real_batch(tok, B, n, args.corpus)
    ids = inputs_cpu["input_ids"].to(device)
    mask = inputs_cpu["attention_mask"].to(device)

    def forward():
        return model(input_ids=ids, attention_mask=mask, use_cache=False)

    def run_engine():
        return engine.run(ids, mask)

    def run_analyze():
        return mixscope.analyze((model, tok), texts, max_length=n, batch_size=B, device=device)

    methods = {"forward": forward, "engine": run_engine, "analyze": run_analyze}
    progress(f"timing forward / engine / analyze at {B}×{n}", t_start)
    with torch.inference_mode():
        times = interleaved(methods, args.reps, sync, warmup=1)
    if not args.no_memory and device.type == "cuda":
        mem_rows = memory_cuda(args, loaded, engine)

    med = {k: statistics.median(v) for k, v in times.items()}
    heads = cfg.num_attention_heads
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    print("mixscope engine benchmark: pre-LN decoder")
    print(f"  model    random {args.decoder}: {cfg.model_type}, {cfg.num_hidden_layers} layers, "
          f"hidden {cfg.hidden_size}, {heads} heads ({kv} key/value), "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.0f}M params, "
          f"{next(model.parameters()).dtype}, attn_implementation=eager")  # fmt: skip
    print(f"  machine  {machine(device)}, torch {torch.__version__} ({args.threads} threads), "
          f"transformers {transformers.__version__}")  # fmt: skip
    print(f"  data     {args.corpus} lines as WordPiece ids, every sequence exactly n tokens")
    print(f"  timing   interleaved, order rotating, {args.reps} reps, median, IQR")
    print()
    widths = [40, 9, 10, 9, 17, 11]
    print(fmt_row(["timing", "batch×n", "median ms", "min ms", "IQR ms", "tokens/s"], widths))
    print(rule(widths))
    for label, key in (
        ("forward, eager  model(...)", "forward"),
        ("engine.run  (5 measures)", "engine"),
        ("analyze() end to end", "analyze"),
    ):
        lo, hi = quartiles(times[key])
        m = med[key]
        print(fmt_row([label, f"{B}×{n}", f"{m * 1e3:.0f}", f"{min(times[key]) * 1e3:.0f}",
                       f"{lo * 1e3:.0f}–{hi * 1e3:.0f}", f"{B * n / m:,.0f}"], widths))  # fmt: skip
    ratio = med["engine"] / med["forward"]
    verdict = "OK" if ratio <= 1.25 else ("above goal" if ratio < 1.5 else "FAIL (≥ 1.5×)")
    r_min = min(times["engine"]) / min(times["forward"])
    print(f"  engine / forward {ratio:.2f}× (paired "
          f"{paired_ratio(times['engine'], times['forward']):.2f}×, of minima {r_min:.2f}×; "
          f"goal ≤ 1.25×: {verdict}); analyze / forward "
          f"{med['analyze'] / med['forward']:.2f}×")  # fmt: skip
    if mem_rows:
        how = (
            "torch.cuda.max_memory_allocated above the loaded model"
            if device.type == "cuda"
            else "peak RSS increase over the loaded model, fresh subprocess each"
        )
        print()
        print(f"peak memory, batch {args.mem_batch}: {how}")
        mw = [6, 12, 11, 15, 11, 17]
        print(fmt_row(["n", "forward MiB", "engine MiB", "engine/forward", "engine−fwd",
                       "attn probs/layer"], mw))  # fmt: skip
        print(rule(mw))
        for r in mem_rows:
            probs = r["batch"] * heads * r["n"] ** 2 * 4 / 2**20
            cells = [
                str(r["n"]),
                f"{r['forward']:.1f}",
                f"{r['engine']:.1f}",
                f"{r['engine'] / r['forward']:.2f}×",
                f"{r['engine'] - r['forward']:+.1f}",
                f"{probs:.0f} MiB",
            ]
            print(fmt_row(cells, mw))
    print(f"\n(total {time.perf_counter() - t_start:.0f} s)")
    results = {
        "model": f"random {args.decoder}",
        "device": str(device),
        "threads": args.threads,
        "batch": B,
        "seq_len": n,
        "times_s": times,
        "memory_mb": mem_rows,
        "engine_over_forward": ratio,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    if args.save:
        line = (
            f"- random {args.decoder} ({cfg.model_type}, {cfg.num_hidden_layers} layers, hidden "
            f"{cfg.hidden_size}, {heads} heads, {kv} key/value; `benchmarks/decoder.py --decoder "
            f"{args.decoder} --save`, {device.type}, {args.threads} threads): engine / eager "
            f"forward **{ratio:.2f}×** at {B} × {n} (paired "
            f"{paired_ratio(times['engine'], times['forward']):.2f}×), analyze / forward "
            f"{med['analyze'] / med['forward']:.2f}×"
        )
        if mem_rows:
            worst = max(r["engine"] / r["forward"] for r in mem_rows)
            line += (
                f"; peak memory engine / forward at most {worst:.2f}× for n = "
                f"{mem_rows[0]['n']}–{mem_rows[-1]['n']}"
            )
        save_results(f"decoder-{args.decoder}", line + ".\n")
    return results


if __name__ == "__main__":
    main()
