"""The report's figures (matplotlib, Agg backend), one function per kind of plot.

Every function takes plain tables (see :mod:`mixscope.report.data`) and returns a
matplotlib ``Figure``; the caller renders and closes it. Ratios are shown in percent, as in
the paper; layers are 1-based; measures carry the paper's names.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

from mixscope.registry import all_columns

#: every measure's label, colour and line style, from its group's file
LABELS = {c.name: c.label for c in all_columns()}
COLORS = {c.name: c.color for c in all_columns()}
LINESTYLES = {c.name: "--" if c.dashed else "-" for c in all_columns()}
#: registry order
_ORDER = {c.name: k for k, c in enumerate(all_columns())}
#: the buckets of a profile (Column.profile): drawn by their group's own figure
_PROFILE = frozenset(c.name for c in all_columns() if c.profile is not None)
#: grid lines: light grey, under the data
GRID_MAJOR = "#d9d9d9"
GRID_MINOR = "#eeeeee"
CATEGORIES = ("cls", "sep", "mask", "normal", "other_special")
CATEGORY_LABELS = {
    "cls": "[CLS]",
    "sep": "[SEP]",
    "mask": "[MASK]",
    "normal": "normal",
    "other_special": "other special",
    "overall": "overall",
}


def measures_in(rows: list[dict]) -> list[str]:
    """The measures that ``rows`` have (a ``measure`` column), in registry order: a figure
    shows the measures of the runs it is about. A profile's buckets (the distance group's)
    are no line or panel of their own: their group's section draws them as one heatmap."""
    present = {r["measure"] for r in rows if r.get("measure") in _ORDER} - _PROFILE
    return sorted(present, key=_ORDER.__getitem__)


def _panels(plt: Any, n: int) -> tuple[Any, list[Any]]:
    """A figure of ``n`` measure panels and one more for the legend, three per row."""
    import numpy as np

    rows = max(1, math.ceil((n + 1) / 3))
    fig, axes = plt.subplots(rows, 3, figsize=(15, 4.5 * rows), layout="constrained")
    flat = list(np.ravel(axes))
    for ax in flat[n + 1 :]:
        ax.axis("off")
    return fig, flat


def pyplot() -> Any:
    """matplotlib.pyplot, imported on first use only: on the Agg backend, unless pyplot was
    imported before (a notebook's inline backend is kept, so returned figures display)."""
    import sys

    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "figure.dpi": 100,
            "font.size": 11,
            "axes.titlesize": 12,
            "axes.labelsize": 11,
            "axes.grid": False,
        }
    )
    return plt


def layer_axis(ax: Any, layers: list[int]) -> None:
    ax.set_xlabel("layer")
    if layers:
        step = max(1, math.ceil(len(layers) / 24))
        ax.set_xticks(layers[::step])


def token_type_heatmap(types: list[dict], profile: list[dict], title: str) -> Any:
    """Token category × layer per-sequence mean ratio, one panel per measure (Figure 3)."""
    import numpy as np

    plt = pyplot()
    layers = sorted({int(r["layer"]) for r in profile} | {int(r["layer"]) for r in types})
    present = {r["category"] for r in types}
    cats = [c for c in CATEGORIES if c in present] + ["overall"]
    width = max(8.0, 2.5 + 0.55 * len(layers))
    measures = measures_in(profile + types)
    fig, axes = plt.subplots(
        len(measures),
        1,
        figsize=(width, 1.0 + len(measures) * (0.45 * len(cats) + 0.9)),
        layout="constrained",
    )
    col = {layer: k for k, layer in enumerate(layers)}
    for ax, m in zip(np.atleast_1d(axes), measures, strict=True):
        grid = np.full((len(cats), len(layers)), np.nan)
        for r in types:
            if r["measure"] == m:
                grid[cats.index(r["category"]), col[int(r["layer"])]] = 100 * r["seq_mean"]
        for r in profile:
            if r["measure"] == m:
                grid[-1, col[int(r["layer"])]] = 100 * r["seq_mean"]
        im = ax.imshow(grid, aspect="auto", cmap="viridis", interpolation="nearest")
        finite = grid[np.isfinite(grid)]
        mid = (finite.min() + finite.max()) / 2 if finite.size else 0
        label_grid(ax, grid, cats, layers, "{:.0f}", 10, partial(_text_on_viridis, mid))
        ax.set_title(LABELS[m])
        bar = fig.colorbar(im, ax=ax, pad=0.01, fraction=0.04)
        bar.set_label("ratio (%)")
    fig.suptitle(title)
    return fig


def label_grid(
    ax: Any,
    grid: Any,  # [categories, layers]
    cats: list[str],
    layers: list[int],
    fmt: str,
    fontsize: int,
    color: Callable[[float], str],
) -> None:
    """A category × layer heat map's axes: each cell's value written in it (up to 24
    layers, beyond that the cells are too narrow), categories down, layers across."""
    import numpy as np

    if len(layers) <= 24:
        for (i, j), v in np.ndenumerate(grid):
            if np.isfinite(v):
                ax.text(
                    j, i, fmt.format(v), ha="center", va="center", fontsize=fontsize, color=color(v)
                )
    ax.set_yticks(range(len(cats)), [CATEGORY_LABELS[c] for c in cats])
    step = max(1, math.ceil(len(layers) / 24))
    ax.set_xticks(range(0, len(layers), step), [str(x) for x in layers[::step]])
    ax.set_xlabel("layer")


def _text_on_viridis(mid: float, v: float) -> str:
    """Readable text on a viridis cell: black on the bright upper half."""
    return "black" if v > mid else "white"


def text_on_diverging(top: float, v: float) -> str:
    """Readable text on a RdBu cell: white on the saturated ends."""
    return "white" if abs(v) > 0.6 * top else "black"


def _bin_centre(r: dict) -> float:
    return math.sqrt(r["rank_lo"] * r["rank_hi"])


def frequency(
    bins: list[dict], sample: dict[str, Any], rho: list[dict], title: str, total: int | None = None
) -> Any:
    """Frequency rank vs layer-averaged ratio: sampled occurrences and bin means (Figure 4)."""
    import numpy as np

    plt = pyplot()
    measures = measures_in(bins + rho) or [m for m in LABELS if m in sample]
    fig, flat = _panels(plt, len(measures))
    ranks = np.asarray(sample.get("freq_rank", []), dtype=float)
    by_measure = {r["measure"]: r for r in rho}
    for ax, m in zip(flat, measures, strict=False):
        if ranks.size and m in sample:
            ax.scatter(
                ranks,
                100 * np.asarray(sample[m], dtype=float),
                s=6,
                alpha=0.25,
                color="#7f7f7f",
                linewidths=0,
                label=sample.get("label", "token occurrences"),
                rasterized=True,
            )
        pts = sorted((_bin_centre(r), 100 * r["mean"]) for r in bins if r["measure"] == m)
        if pts:
            xs, ys = zip(*pts, strict=True)
            ax.plot(xs, ys, "-o", color=COLORS[m], linewidth=2, markersize=5, label="bin mean")
        ax.set_xscale("log")
        ax.set_xlabel("frequency rank (1 = most frequent, log scale)")
        ax.set_ylabel("layer-averaged ratio (%)")
        ax.set_ylim(0, 100)
        light_grid(ax)
        r = by_measure.get(m)
        rho_text = ""
        if r and r.get("rho_all") is not None:
            rho_text = f"\nρ = {r['rho_all']:+.2f}"
            if r.get("rho_no_special") is not None:
                rho_text += f" (without [CLS]/[SEP]: {r['rho_no_special']:+.2f})"
        ax.set_title(LABELS[m] + rho_text)
    legend_ax = flat[len(measures)]
    legend_ax.axis("off")
    handles, names = flat[0].get_legend_handles_labels()
    if handles:
        legend_ax.legend(handles, names, loc="center", frameon=False, markerscale=3)
    n = int(ranks.size)
    shown = (
        f"all {n:,} occurrences" if not total or total <= n else f"{n:,} of {total:,} occurrences"
    )
    legend_ax.text(
        0.5,
        0.2,
        f"{shown} shown\nρ: Spearman, frequency rank vs ratio,\nover every occurrence",
        ha="center",
        va="center",
        transform=legend_ax.transAxes,
    )
    fig.suptitle(title)
    return fig


def checkpoint_trend(trend: list[dict], title: str) -> Any:
    """Mean ratio vs training step: one line per layer and the all-layer mean, per measure."""

    plt = pyplot()
    cmap = plt.get_cmap("viridis")
    measures = measures_in(trend)
    fig, flat = _panels(plt, len(measures))
    layers = sorted({int(r["layer"]) for r in trend})
    steps = sorted({int(r["step"]) for r in trend})
    for ax, m in zip(flat, measures, strict=False):
        rows = [r for r in trend if r["measure"] == m]
        for k, layer in enumerate(layers):
            pts = sorted((int(r["step"]), 100 * r["mean"]) for r in rows if r["layer"] == layer)
            if pts:
                xs, ys = zip(*pts, strict=True)
                shade = cmap(0.85 * k / max(1, len(layers) - 1))  # no pale yellow
                ax.plot(
                    xs, ys, "-o", color=shade, linewidth=1.2, markersize=3, label=f"layer {layer}"
                )
        overall = []
        for s in steps:
            at = [r for r in rows if int(r["step"]) == s]
            total = sum(r["n"] for r in at)
            if total:
                overall.append((s, 100 * sum(r["mean"] * r["n"] for r in at) / total))
        if overall:
            xs, ys = zip(*overall, strict=True)
            ax.plot(xs, ys, "-o", color="black", linewidth=2.5, label="all layers")
        ax.set_title(LABELS[m])
        if len(steps) <= 12:
            ax.set_xticks(steps, [str(x) for x in steps], rotation=45 if len(steps) > 6 else 0)
        ax.set_xlabel("training step")
        ax.set_ylabel("mean ratio (%)")
        ax.grid(True, alpha=0.3)
    legend_ax = flat[len(measures)]
    legend_ax.axis("off")
    handles, names = flat[0].get_legend_handles_labels()
    if handles:
        legend_ax.legend(handles, names, loc="center", frameon=False, ncol=1 + len(names) // 14)
    fig.suptitle(title)
    return fig


def contribution_maps(tokens: list[str], maps: dict[str, Any], layer: int, title: str) -> Any:
    """‖P_ij‖ of one sequence at one layer (0-based index ``layer``), one panel per map."""
    plt = pyplot()
    n = len(tokens)
    names = sorted(maps, key=_ORDER.__getitem__)
    size = max(4.0, min(6.0, 0.13 * n + 0.8))  # inches per panel: ~15 px per token
    fig, axes = plt.subplots(
        1, len(names), figsize=(3 * size + 1.5, 0.8 * size + 1.3), layout="constrained"
    )
    font = 9 if n <= 32 else (8 if n <= 40 else 6)
    for ax, m in zip(axes, names, strict=True):
        im = ax.imshow(maps[m][layer], cmap="Reds", interpolation="nearest", vmin=0)
        ax.set_xticks(range(n), tokens, rotation=90, fontsize=font)
        ax.set_xlabel("source token j (gives)")
        if ax is axes[0]:  # the rows are the same tokens in every panel
            ax.set_yticks(range(n), tokens, fontsize=font)
            ax.set_ylabel("target token i (receives)")
        else:
            ax.set_yticks([])
        ax.set_title(f"{LABELS[m]}, layer {layer + 1}")
        bar = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.03)
        bar.set_label(r"$\|P_{ij}\|$")
    fig.suptitle(title)
    return fig


def sink_profile(profile: list[dict], title: str) -> Any:
    """Per layer, the first position's attention weight (dashed) and norm share (solid) by
    token category (``sink_profile`` rows): the attention-sink weight against what the
    first token really contributes; and, for a run with learned sinks (gpt-oss), their
    mass (dotted), the weight no token gets."""
    from mixscope.registry import GROUPS

    weight, norm = (c.name for c in GROUPS["sink"].columns)  # the query's two columns
    (learned,) = (c.name for c in GROUPS["learned_sink"].columns)  # its learned sinks' mass
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 5.5), layout="constrained")
    layers = sorted({int(r["layer"]) for r in profile})
    shades = plt.get_cmap("tab10")
    present = {r["category"] for r in profile}
    cats = ["all"] + [c for c in CATEGORIES if c in present]
    for k, cat in enumerate(cats):
        rows = sorted((r for r in profile if r["category"] == cat), key=lambda r: r["layer"])
        if not rows:
            continue
        xs = [int(r["layer"]) for r in rows]
        color = "black" if cat == "all" else shades(k)
        width = 2.5 if cat == "all" else 1.5
        name = "all tokens" if cat == "all" else CATEGORY_LABELS[cat]
        ax.plot(
            xs,
            [100 * r[weight] for r in rows],
            "--",
            marker="s",
            color=color,
            linewidth=width,
            markersize=4,
            label=f"{name}: weight",
        )
        ax.plot(
            xs,
            [100 * r[norm] for r in rows],
            "-",
            marker="o",
            color=color,
            linewidth=width,
            markersize=4,
            label=f"{name}: norm",
        )
        if any(r.get(learned) is not None for r in rows):  # gpt-oss: a learned sink's mass
            ax.plot(
                xs,
                [100 * (r[learned] or 0.0) for r in rows],
                ":",
                marker="^",
                color=color,
                linewidth=width,
                markersize=4,
                label=f"{name}: learned sink",
            )
    layer_axis(ax, layers)
    ax.set_ylabel("drawn from the first position (%)")
    ax.set_ylim(0, 100)
    ax.grid(True, alpha=0.3)
    ax.set_title(title)
    fig.legend(loc="outside lower center", ncol=4, frameon=False, fontsize=8)
    return fig


def light_grid(ax: Any) -> None:
    """Light grid lines under the data (a log axis gets its minor decades too): readable
    values off a dense scatter without the grid competing with the points."""
    ax.set_axisbelow(True)
    ax.grid(True, which="major", color=GRID_MAJOR, linewidth=0.8)
    ax.grid(True, which="minor", color=GRID_MINOR, linewidth=0.5)


def to_vector(fig: Any, fmt: str) -> bytes:
    """``fig`` as an SVG or PDF document (not closed: :func:`to_png` renders it next).
    No creation date and fixed SVG ids, so the same figure gives the same file."""
    import io

    plt = pyplot()
    buf = io.BytesIO()
    date = "Date" if fmt == "svg" else "CreationDate"
    with plt.rc_context({"svg.hashsalt": "mixscope", "svg.fonttype": "path"}):
        fig.savefig(
            buf, format=fmt, metadata={date: None}, dpi=200, bbox_inches=None, pad_inches=0.1
        )
    return buf.getvalue()


def to_png(fig: Any) -> bytes:
    """Render and close."""
    import io

    plt = pyplot()
    buf = io.BytesIO()
    try:
        # constrained layout already fits everything: one draw instead of two
        fig.savefig(buf, format="png", dpi=100, bbox_inches=None, pad_inches=0.1)
    finally:
        plt.close(fig)
    return buf.getvalue()
