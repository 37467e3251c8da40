"""The per-layer figure: one panel per measure group, so no axis mixes unlike quantities.

A mixing ratio from norms, one from attention weights and the share drawn from the first
position are three different questions; on one axis eleven lines hide each other. The
panels come from the measure registry (``mixscope.registry``), so a new group gets
its panel without a list here: a group's norm-based columns share one axis, its
weight-based (dashed) columns get their own, and a group about the first position
(``first_position``: the sink group) keeps its weight and norm together. Each axis is
labelled with its group's ``axis_label`` (what its values are).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Panel:
    """One axis of the per-layer figure: its title, measures (registry order), y label."""

    title: str
    measures: tuple[str, ...]
    ylabel: str


def layer_panels(measures: list[str] | set[str]) -> list[Panel]:
    """The panels that show ``measures``, in registry order (groups with none: no panel)."""
    from mixscope.registry import GROUPS

    present = set(measures)
    out = []
    for g in GROUPS.values():
        # a profile's buckets (distance) are its group's heatmap, not lines here
        cols = [c for c in g.columns if c.name in present and c.profile is None]
        if not cols:
            continue
        if g.first_position:
            names = tuple(c.name for c in cols)
            out.append(Panel(f"{g.name}: first position", names, g.axis_label))
            continue
        norms = tuple(c.name for c in cols if not c.dashed)
        weights = tuple(c.name for c in cols if c.dashed)
        both = bool(norms and weights)
        if norms:
            title = f"{g.name}: norm-based" if both else g.name
            out.append(Panel(title, norms, g.axis_label))
        if weights:
            title = f"{g.name}: weight-based" if both else g.name
            out.append(Panel(title, weights, g.axis_label))
    return out


def describe(panels: list[Panel]) -> str:
    """The panels in words (the figure's caption): which measure is on which axis."""
    from mixscope.report.plots import LABELS

    return "Panels: " + "; ".join(
        f"{p.title} ({', '.join(LABELS[m] for m in p.measures)})" for p in panels
    )


def layer_curves(profile: list[dict], title: str) -> Any:
    """Per-layer mixing ratio (per-sequence means, as in the paper), one panel per
    :func:`layer_panels` entry, all on the same 0–100 % scale and the same layers."""
    from mixscope.report.plots import COLORS, LABELS, LINESTYLES, layer_axis, measures_in, pyplot

    plt = pyplot()
    panels = layer_panels(measures_in(profile))
    n = max(1, len(panels))
    ncols = min(n, 3)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(5.2 * ncols, 4.4 * nrows + 0.6), layout="constrained", squeeze=False
    )
    flat = [ax for row in axes for ax in row]
    layers = sorted({int(r["layer"]) for r in profile})
    for ax, panel in zip(flat, panels, strict=False):
        for m in panel.measures:
            pts = sorted(
                (int(r["layer"]), 100 * r["seq_mean"]) for r in profile if r["measure"] == m
            )
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(
                    xs,
                    ys,
                    LINESTYLES[m],
                    marker="o",
                    color=COLORS[m],
                    label=LABELS[m],
                    linewidth=2,
                    markersize=4,
                )
        layer_axis(ax, layers)
        ax.set_ylabel(panel.ylabel)
        ax.set_ylim(0, 100)
        ax.grid(True, alpha=0.3)
        ax.set_title(panel.title)
        ax.legend(loc="best", fontsize=9, frameon=False)
    for ax in flat[len(panels) :]:
        ax.axis("off")
    fig.suptitle(title)
    return fig
