"""The memory section of the engine benchmark (engine.py): engine vs forward (vs naive) vs n.

CPU: the peak RSS increase of one call, in a fresh process per configuration (engine.py
``--_memory-child mode:n:batch``, so that only that call's memory is counted); CUDA:
``torch.cuda.max_memory_allocated`` above the loaded model, in the benchmark's process.
The naive decomposition is measured only where one layer's [B,H,n,n,d] tensor fits.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

from common import fmt_row, rule
from models import RANDOM_CONFIGS, build_encoder, real_batch
from naive import NAIVE_MEASURE_MB, NaiveDecomposition, naive_tensor_mb
from timing import cuda_peak_mib, mem_available_mb, rss_peak_increase, run_child

#: the script whose ``--_memory-child`` runs one CPU configuration
ENGINE_SCRIPT = Path(__file__).resolve().with_name("engine.py")


def memory_child(args: argparse.Namespace) -> None:
    """One configuration in a fresh process: prints a JSON line with the RSS increase."""
    import transformers

    from mixscope.mixing.engine import MixingEngine

    mode, n, batch = args.memory_child.split(":")
    n, batch = int(n), int(batch)
    torch.set_num_threads(args.threads)
    transformers.utils.logging.disable_progress_bar()
    device = torch.device("cpu")
    loaded = build_encoder(args.model, args.random_config, device)
    inputs, _ = real_batch(loaded.tokenizer, batch, n, args.corpus)
    if mode == "forward":
        model = loaded.model

        def fn():
            return model(**inputs)
    elif mode == "naive":
        naive = NaiveDecomposition(loaded)

        def fn():
            return naive.run(inputs)
    else:
        engine = MixingEngine(loaded)

        def fn():
            return engine.run(
                inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"]
            )

    base, increase = rss_peak_increase(fn)
    print(
        json.dumps(
            {
                "mode": mode,
                "n": n,
                "batch": batch,
                "base_mb": base / 2**20,
                "peak_increase_mb": increase / 2**20,
            }
        )
    )


def model_shape(args: argparse.Namespace) -> tuple[int, int]:
    """(heads, hidden) without loading the weights."""
    if args.random_config:
        c = RANDOM_CONFIGS[args.random_config]
        return c["num_attention_heads"], c["hidden_size"]
    cfg = json.loads((Path(args.model) / "config.json").read_text())
    return int(cfg["num_attention_heads"]), int(cfg["hidden_size"])


def memory_cpu(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    heads, hidden = model_shape(args)
    # the naive run is measured only where its tensors (≈ 3 of them alive) fit comfortably
    naive_limit = min(NAIVE_MEASURE_MB, mem_available_mb() / 8)
    base_cmd = [sys.executable, str(ENGINE_SCRIPT), "--threads", str(args.threads)]
    base_cmd += ["--corpus", str(args.corpus)]
    if args.random_config:
        base_cmd += ["--random-config", args.random_config]
    else:
        base_cmd += ["--model", str(args.model)]
    for n in args.mem_seq_lens:
        row: dict[str, Any] = {"n": n, "batch": args.mem_batch}
        modes = ["forward", "engine"]
        if naive_tensor_mb(args.mem_batch, heads, n, hidden) <= naive_limit:
            modes.append("naive")
        for mode in modes:
            cmd = [*base_cmd, "--_memory-child", f"{mode}:{n}:{args.mem_batch}"]
            row[mode] = run_child(cmd, f"{mode} n={n}")["peak_increase_mb"]
        rows.append(row)
    return rows


def memory_cuda(args: argparse.Namespace, loaded: Any, engine: Any) -> list[dict[str, Any]]:
    rows = []
    device = next(loaded.model.parameters()).device
    cfg = loaded.model.config
    naive = NaiveDecomposition(loaded)
    free, _ = torch.cuda.mem_get_info(device)
    naive_limit = min(NAIVE_MEASURE_MB * 8, free / 2**20 / 8)
    for n in args.mem_seq_lens:
        inputs, _ = real_batch(loaded.tokenizer, args.mem_batch, n, args.corpus)
        inputs = {k: v.to(device) for k, v in inputs.items()}
        fns = {
            "forward": lambda inputs=inputs: loaded.model(**inputs),
            "engine": lambda inputs=inputs: engine.run(
                inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"]
            ),
        }
        size = naive_tensor_mb(args.mem_batch, cfg.num_attention_heads, n, cfg.hidden_size)
        if size <= naive_limit:
            fns["naive"] = lambda inputs=inputs: naive.run(inputs)
        row: dict[str, Any] = {"n": n, "batch": args.mem_batch}
        for mode, fn in fns.items():
            row[mode] = cuda_peak_mib(fn)
        rows.append(row)
    return rows


def print_memory(
    mem_rows: list[dict[str, Any]], mem_batch: int, device: torch.device, heads: int, hidden: int
) -> None:
    """The peak-memory table of the engine benchmark's report."""
    how = (
        "torch.cuda.max_memory_allocated above the loaded model"
        if device.type == "cuda"
        else "peak RSS increase over the loaded model, fresh subprocess each, 1 ms sampling"
    )
    print(f"peak memory, batch {mem_batch}: {how}")
    print(
        f"  naive measured where one layer's [B,H,n,n,d] tensor is ≤ {NAIVE_MEASURE_MB} MiB "
        "(and ≤ 1/8 of free memory)"
    )
    mw = [6, 11, 10, 15, 11, 17, 24, 16]
    print(
        fmt_row(
            ["n", "forward MiB", "engine MiB", "engine/forward", "engine−fwd",
             "attn probs/layer", "naive [B,H,n,n,d]/layer", "naive measured"],
            mw,
        )
    )  # fmt: skip
    print(rule(mw))
    for r in mem_rows:
        probs = r["batch"] * heads * r["n"] ** 2 * 4 / 2**20
        naive_t = probs * hidden
        print(
            fmt_row(
                [str(r["n"]), f"{r['forward']:.1f}", f"{r['engine']:.1f}",
                 f"{r['engine'] / r['forward']:.2f}×", f"{r['engine'] - r['forward']:+.1f}",
                 f"{probs:.1f} MiB", f"{naive_t:,.0f} MiB",
                 f"{r['naive']:,.0f} MiB" if "naive" in r else "too big"],
                mw,
            )
        )  # fmt: skip
    if len(mem_rows) > 1:
        a, b = mem_rows[0], mem_rows[-1]
        k = b["n"] / a["n"]
        print(
            f"  n ×{k:g}: forward ×{b['forward'] / a['forward']:.1f}, engine "
            f"×{b['engine'] / a['engine']:.1f} (linear ×{k:g}, n² ×{k * k:g})"
        )
