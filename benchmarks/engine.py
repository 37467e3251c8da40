"""Engine benchmark: eager forward vs MixingEngine vs the naive per-pair decomposition.

Measured side by side in one run, on the same model, batch and machine:

1. the plain eager forward pass ``model(**inputs)`` (and SDPA, for reference),
2. ``MixingEngine.run`` on the same pre-tokenized batch, and ``mixscope.analyze`` end to
   end (tokenization and table building included),
3. a naive decomposition as the authors' code does it (Kobayashi et al. 2021): per layer,
   the ``[batch, heads, n, n, hidden]`` tensor of α^h_ij f^h(x_j), the residual and LN
   split per pair, then the norms and ratios (at a size where it fits; naive.py),
4. the ratios engine/forward and naive/engine,
5. peak memory of the engine vs the eager forward at several sequence lengths (peak RSS
   increase in a fresh subprocess per configuration on CPU, ``max_memory_allocated`` on
   CUDA; engine_memory.py).

Repetitions are interleaved (the order rotates every repetition) and medians reported, so
slow drifts and noisy neighbours hit every method alike. Inputs are real WikiText-2 text,
every sequence exactly ``n`` tokens, no padding.

    python benchmarks/engine.py                 # MiniLM-L6, CPU, ~2-3 minutes
    python benchmarks/engine.py --quick         # smoke test
    python benchmarks/engine.py --random-config base --device cuda --batch-size 32

Pre-LN decoders are benchmarked by decoder.py (``engine.py --decoder X …`` forwards to it).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch

from common import fmt_row, machine, minilm_path, progress, rule, save_results, wikitext_path
from engine_markdown import engine_markdown
from engine_memory import memory_child, memory_cpu, memory_cuda, print_memory
from models import DECODER_CONFIGS, RANDOM_CONFIGS, build_encoder, real_batch
from naive import NaiveDecomposition, naive_tensor_mb
from timing import interleaved, paired_ratio, quartiles, start

# --------------------------------------------------------------------------- arguments


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="model directory (default: all-MiniLM-L6-v2)")
    p.add_argument(
        "--random-config",
        "--config-size",
        dest="random_config",
        choices=sorted(RANDOM_CONFIGS),
        default=None,
        help="build a randomly initialized BERT of this size instead of loading weights",
    )
    p.add_argument("--corpus", type=Path, default=wikitext_path(), help="WikiText-style text")
    p.add_argument(
        "--decoder",
        choices=sorted(DECODER_CONFIGS),
        default=None,
        help="run decoder.py instead (a random pre-LN decoder; all arguments passed on)",
    )
    p.add_argument("--dtype", default=None, help="decoder weights dtype (with --decoder)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--reps", type=int, default=None, help="timed repetitions (default 15)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda")
    p.add_argument("--quick", action="store_true", help="few repetitions, small sizes")
    p.add_argument("--naive-batch", type=int, default=None, help="batch of the naive run (2)")
    p.add_argument("--naive-seq-len", type=int, default=128)
    p.add_argument("--mem-batch", type=int, default=None, help="batch of the memory rows (4)")
    p.add_argument(
        "--mem-seq-lens", default=None, help="comma-separated lengths (default 128,256,512)"
    )
    p.add_argument("--no-memory", action="store_true", help="skip the memory section")
    p.add_argument("--no-sdpa", action="store_true", help="skip the SDPA reference row")
    p.add_argument("--json", default=None, help="also write all numbers to this file")
    p.add_argument("--save", action="store_true", help="also write benchmarks/results/engine.md")
    p.add_argument("--_memory-child", dest="memory_child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.reps is None:
        args.reps = 3 if args.quick else 15
    if args.naive_batch is None:
        args.naive_batch = 1 if args.quick else 2
    if args.mem_batch is None:
        args.mem_batch = 2 if args.quick else 4
    if args.mem_seq_lens is None:
        args.mem_seq_lens = "128" if args.quick else "128,256,512"
    args.mem_seq_lens = [int(s) for s in str(args.mem_seq_lens).split(",") if s.strip()]
    if args.threads is None:
        args.threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    if args.model is None and args.random_config is None:
        args.model = str(minilm_path())
    return args


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> dict[str, Any]:  # noqa: C901 - a script's steps
    args = parse_args(argv)
    if args.decoder is not None:  # pre-LN decoders: decoder.py, with the same arguments
        import decoder

        return decoder.main(sys.argv[1:] if argv is None else argv)
    if args.memory_child:
        memory_child(args)
        return {}

    import mixscope
    from mixscope.mixing.engine import MixingEngine, attention_implementation

    # memory first (CPU), in fresh subprocesses, while this process is idle
    device, sync, t_start, mem_rows = start(args, memory_cpu, "memory: fresh subprocesses")
    progress("loading the model", t_start)

    loaded = build_encoder(args.model, args.random_config, device)
    model, tok = loaded.model, loaded.tokenizer
    engine = MixingEngine(loaded)
    # every group that applies (paper + globenc + sink on an encoder): what they add
    groups_engine = MixingEngine(loaded, measures="all")
    B, n = args.batch_size, args.seq_len

    def on(inputs):
        return {k: v.to(device) for k, v in inputs.items()}

    inputs_cpu, texts = real_batch(tok, B, n, args.corpus)
    inputs = on(inputs_cpu)

    def forward(inputs=inputs):
        return model(**inputs)

    def forward_sdpa(inputs=inputs):
        with attention_implementation(model, "sdpa"):
            return model(**inputs)

    def run_engine(inputs=inputs, pairs=False):
        return engine.run(
            inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"], pairs=pairs
        )

    def run_groups(inputs=inputs):
        return groups_engine.run(
            inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"]
        )

    analyze_rows: list[int] = []

    def run_analyze():
        table = mixscope.analyze((model, tok), texts, max_length=n, batch_size=B, device=device)
        analyze_rows.append(table.num_rows)
        return table

    main_methods: dict[str, Callable[[], Any]] = {
        "forward": forward,
        "engine": run_engine,
        "engine_groups": run_groups,
    }
    if not args.no_sdpa:
        main_methods["forward_sdpa"] = forward_sdpa
    main_methods["analyze"] = run_analyze
    progress(f"timing forward / engine / analyze at {B}×{n}", t_start)
    with torch.inference_mode():
        t_main = interleaved(main_methods, args.reps, sync, warmup=1 if args.quick else 2)

    # one cold analyze(path): loads the weights and tokenizer from disk as well
    t_cold = None
    if args.random_config is None:
        progress("analyze(path), cold", t_start)
        gc.collect()
        t0 = time.perf_counter()
        table = mixscope.analyze(args.model, texts, max_length=n, batch_size=B, device=device)
        sync()
        t_cold = time.perf_counter() - t0
        del table

    # naive comparison at a size where [B, H, n, n, d] fits
    nb, nn = args.naive_batch, args.naive_seq_len
    naive_inputs = on(real_batch(tok, nb, nn, args.corpus, offset_seqs=B)[0])
    naive = NaiveDecomposition(loaded)
    naive_methods = {
        "forward": lambda: forward(naive_inputs),
        "engine": lambda: run_engine(naive_inputs),
        "engine_pairs": lambda: run_engine(naive_inputs, pairs=True),
        "naive": lambda: naive.run(naive_inputs),
    }
    naive_reps = max(3, args.reps // 3)
    progress(f"timing the naive decomposition at {nb}×{nn}", t_start)
    with torch.inference_mode():
        t_naive = interleaved(naive_methods, naive_reps, sync, warmup=1)
        ref = run_engine(naive_inputs, pairs=True)
        nm, np_ = naive.run(naive_inputs)
    diff_measures = (nm - ref.measures).abs().max().item()
    diff_pairs = (np_ - ref.pairs).abs().max().item()

    if not args.no_memory and device.type == "cuda":
        mem_rows = memory_cuda(args, loaded, engine)

    name = args.model if args.random_config is None else f"random BERT-{args.random_config}"
    results = {
        "model": name,
        "device": str(device),
        "threads": args.threads,
        "batch": B,
        "seq_len": n,
        "times_s": t_main,
        "analyze_cold_s": t_cold,
        "naive_times_s": t_naive,
        "naive_batch": nb,
        "naive_seq_len": nn,
        "diff_measures": diff_measures,
        "diff_pairs": diff_pairs,
        "memory_mb": mem_rows,
        "groups": list(groups_engine.selection.groups),
    }
    rows = analyze_rows[-1] if analyze_rows else 0
    results["engine_over_forward"] = report(results, args, model, device, naive_reps, rows)
    print(f"\n(total {time.perf_counter() - t_start:.0f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    if args.save:
        cfg = model.config
        text = engine_markdown(
            results, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.hidden_size
        )
        save_results("engine", text)
    return results


# --------------------------------------------------------------------------- report


def report(
    results: dict[str, Any],
    args: argparse.Namespace,
    model: Any,
    device: torch.device,
    naive_reps: int,
    analyze_rows: int,
) -> float:
    """Print the tables and ratios; returns engine / forward (eager), the headline."""
    import transformers

    cfg = model.config
    layers, hidden, heads = cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads
    B, n = results["batch"], results["seq_len"]
    nb, nn = results["naive_batch"], results["naive_seq_len"]
    t_main, t_naive, mem_rows = results["times_s"], results["naive_times_s"], results["memory_mb"]
    t_cold = results["analyze_cold_s"]
    diff_measures, diff_pairs = results["diff_measures"], results["diff_pairs"]
    med = {k: statistics.median(v) for k, v in t_main.items()}
    medn = {k: statistics.median(v) for k, v in t_naive.items()}
    print("mixscope engine benchmark")
    print(f"  model    {results['model']}")
    print(
        f"           {cfg.model_type}, {layers} layers, hidden {hidden}, {heads} heads, "
        f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M params, "
        f"attn_implementation={cfg._attn_implementation}, {next(model.parameters()).dtype}"
    )
    print(
        f"  machine  {machine(device)}, torch {torch.__version__} ({args.threads} threads), "
        f"transformers {transformers.__version__}"
    )
    print(
        f"  data     {args.corpus} lines (no headings), every sequence exactly n tokens, "
        "no padding; torch.inference_mode"
    )
    print(
        f"  timing   interleaved, order rotating; {args.reps} reps (naive block {naive_reps}); "
        f"median, IQR"
    )
    print()

    widths = [44, 9, 10, 9, 17, 11]
    print(fmt_row(["timing", "batch×n", "median ms", "min ms", "IQR ms", "tokens/s"], widths))
    print(rule(widths))

    def line(label: str, times: list[float], b: int, seq: int) -> None:
        lo, hi = quartiles(times)
        m = statistics.median(times)
        print(
            fmt_row(
                [label, f"{b}×{seq}", f"{m * 1e3:.1f}", f"{min(times) * 1e3:.1f}",
                 f"{lo * 1e3:.1f}–{hi * 1e3:.1f}",
                 f"{b * seq / m:,.0f}"],
                widths,
            )
        )  # fmt: skip

    line("forward, eager  model(**inputs)", t_main["forward"], B, n)
    if "forward_sdpa" in t_main:
        line("forward, sdpa (reference only)", t_main["forward_sdpa"], B, n)
    line("engine.run  (5 measures, pre-tokenized)", t_main["engine"], B, n)
    line("engine.run  (every group that applies)", t_main["engine_groups"], B, n)
    line("analyze() end to end (tokenize + table)", t_main["analyze"], B, n)
    if t_cold is not None:
        line("analyze(path) cold, + loading (1 run)", [t_cold], B, n)
    print()
    line("forward, eager", t_naive["forward"], nb, nn)
    line("engine.run  (5 measures)", t_naive["engine"], nb, nn)
    line("engine.run  (+ pair maps, Gram form)", t_naive["engine_pairs"], nb, nn)
    line("naive  [B,H,n,n,d] per layer (authors')", t_naive["naive"], nb, nn)
    naive_mb = naive_tensor_mb(nb, heads, nn, hidden)
    print(
        f"  naive vs engine, same batch: max |Δ| measures {diff_measures:.1e}, "
        f"pair maps {diff_pairs:.1e}; the naive [B,H,n,n,d] tensor is {naive_mb:,.0f} MiB "
        f"per layer"
    )
    rows = analyze_rows
    print(f"  analyze() table: {rows:,} rows (= {B}×{n} tokens × {layers} layers: "
          f"{'yes' if rows == B * n * layers else 'NO'})")  # fmt: skip

    if mem_rows:
        print()
        print_memory(mem_rows, args.mem_batch, device, heads, hidden)

    print()
    print("ratios")
    r_eng = med["engine"] / med["forward"]
    r_eng_p = paired_ratio(t_main["engine"], t_main["forward"])
    r_eng_min = min(t_main["engine"]) / min(t_main["forward"])
    verdict = "OK" if r_eng <= 1.25 else ("above goal" if r_eng < 1.5 else "FAIL (≥ 1.5×)")
    ratio_lines = [
        (
            f"engine / forward (eager), {B}×{n}",
            f"{r_eng:.2f}×",
            f"paired {r_eng_p:.2f}×, of minima {r_eng_min:.2f}×; goal ≤ 1.25×, "
            f"must be < 1.5×: {verdict}",
        )
    ]
    if "forward_sdpa" in med:
        ratio_lines.append(
            ("engine / forward (sdpa)", f"{med['engine'] / med['forward_sdpa']:.2f}×", "")
        )
    ratio_lines += [
        (
            "every group / the paper's alone",
            f"{med['engine_groups'] / med['engine']:.3f}×",
            f"paired {paired_ratio(t_main['engine_groups'], t_main['engine']):.3f}×, of minima "
            f"{min(t_main['engine_groups']) / min(t_main['engine']):.3f}×; goal ≤ 1.05×",
        ),
        (
            "analyze() / engine.run",
            f"{med['analyze'] / med['engine']:.2f}×",
            f"paired {paired_ratio(t_main['analyze'], t_main['engine']):.2f}×: "
            "tokenization + table building",
        ),
        (
            f"engine / forward (eager), {nb}×{nn}",
            f"{medn['engine'] / medn['forward']:.2f}×",
            f"paired {paired_ratio(t_naive['engine'], t_naive['forward']):.2f}×",
        ),
        (
            f"naive / engine, {nb}×{nn}",
            f"{medn['naive'] / medn['engine']:.1f}×",
            f"paired {paired_ratio(t_naive['naive'], t_naive['engine']):.1f}×",
        ),
        (
            "naive / engine with pair maps",
            f"{medn['naive'] / medn['engine_pairs']:.1f}×",
            f"paired {paired_ratio(t_naive['naive'], t_naive['engine_pairs']):.1f}×",
        ),
    ]
    for r in mem_rows:
        note = f"naive / engine {r['naive'] / r['engine']:.0f}×" if "naive" in r else ""
        ratio_lines.append(
            (f"memory engine / forward, n={r['n']}", f"{r['engine'] / r['forward']:.2f}×", note)
        )
    for label, value, note in ratio_lines:
        print(f"  {label:<38} {value:>7}   {note}".rstrip())
    spreads = {
        k: (quartiles(v)[1] - quartiles(v)[0]) / statistics.median(v)
        for k, v in {**t_main, **{f"{k} ({nb}×{nn})": v for k, v in t_naive.items()}}.items()
    }
    worst = max(spreads, key=spreads.get)
    if spreads[worst] > 0.2:
        print(
            f"  WARNING: noisy timings (IQR of {worst} is {spreads[worst]:.0%} of its median); "
            "trust the paired ratios and minima more, or rerun with more --reps"
        )
    return r_eng


if __name__ == "__main__":
    main()
