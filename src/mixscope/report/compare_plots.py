"""The figures of a two-run comparison (``report/comparison.py``): per layer and per token type."""

from __future__ import annotations

from functools import partial
from typing import Any

from mixscope.report.plots import (
    CATEGORIES,
    COLORS,
    LABELS,
    label_grid,
    layer_axis,
    measures_in,
    pyplot,
    text_on_diverging,
)


def compare_layers(rows: list[dict], title: str) -> Any:
    """Two runs per layer (``compare_runs`` rows): left, each measure's mean of run a
    (dashed, squares) and run b (solid, circles); right, the difference b − a in points."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.5), layout="constrained")
    layers = sorted({int(r["layer"]) for r in rows})
    for m in measures_in(rows):
        mine = sorted((r for r in rows if r["measure"] == m), key=lambda r: int(r["layer"]))
        for side, style, marker in (("a", "--", "s"), ("b", "-", "o")):
            pts = [
                (int(r["layer"]), 100 * r[f"mean_{side}"])
                for r in mine
                if r[f"mean_{side}"] is not None
            ]
            if pts:
                xs, ys = zip(*pts, strict=True)
                left.plot(
                    xs,
                    ys,
                    style,
                    marker=marker,
                    color=COLORS[m],
                    linewidth=1.8,
                    markersize=4,
                    label=f"{LABELS[m]} ({side})",
                )
        pts = [(int(r["layer"]), 100 * r["diff"]) for r in mine if r["diff"] is not None]
        if pts:
            xs, ys = zip(*pts, strict=True)
            right.plot(xs, ys, "-o", color=COLORS[m], linewidth=2, markersize=5, label=LABELS[m])
    right.axhline(0, color="#969696", linewidth=1, linestyle=":")  # measures may be black
    for ax in (left, right):
        layer_axis(ax, layers)
        ax.grid(True, alpha=0.3)
    left.set_ylabel("mean ratio (%)")
    left.set_ylim(0, 100)
    left.set_title("a (dashed) and b (solid)")
    right.set_ylabel("b − a (percentage points)")
    right.set_title("difference")
    left.legend(loc="best", fontsize=8, ncol=2, frameon=False)
    fig.suptitle(title)
    return fig


def compare_token_types(rows: list[dict], title: str) -> Any:
    """The difference b − a (points) by token category × layer (``compare_token_types``
    rows), one panel per measure, on a diverging scale centred on 0 (red: b mixes more)."""
    import numpy as np

    plt = pyplot()
    layers = sorted({int(r["layer"]) for r in rows})
    present = {r["category"] for r in rows}
    cats = [c for c in CATEGORIES if c in present]
    width = max(8.0, 2.5 + 0.55 * len(layers))
    measures = measures_in(rows)
    fig, axes = plt.subplots(
        len(measures),
        1,
        figsize=(width, 1.0 + len(measures) * (0.45 * max(1, len(cats)) + 0.9)),
        layout="constrained",
    )
    col = {layer: k for k, layer in enumerate(layers)}
    grids = {m: np.full((len(cats), len(layers)), np.nan) for m in measures}
    for r in rows:
        if r["diff"] is not None and r["category"] in cats:
            grids[r["measure"]][cats.index(r["category"]), col[int(r["layer"])]] = 100 * r["diff"]
    for ax, m in zip(np.atleast_1d(axes), measures, strict=True):
        grid = grids[m]
        finite = np.abs(grid[np.isfinite(grid)])
        top = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
        im = ax.imshow(
            grid, aspect="auto", cmap="RdBu_r", vmin=-top, vmax=top, interpolation="nearest"
        )
        label_grid(
            ax,
            grid,
            cats,
            layers,
            "{:+.1f}",
            9,
            partial(text_on_diverging, top),
        )
        ax.set_title(LABELS[m])
        bar = fig.colorbar(im, ax=ax, pad=0.01, fraction=0.04)
        bar.set_label("b − a (pp)")
    fig.suptitle(title)
    return fig
