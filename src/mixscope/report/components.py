"""Through the block: the mean ratio at each scope, attention to feed-forward, per layer.

The ``component_profile`` query's scopes (attention, its residual, the norm after it, the
feed-forward, its residual, the norm after it) for the runs with both the ``paper`` and
the ``ff`` groups, and the FF's change: how much the feed-forward block moves the share of
context the attention block left (Kobayashi et al., ICLR 2024). Its own module: the
figure is drawn here too, beside the section that shows it.
"""

from __future__ import annotations

from typing import Any

from mixscope.report import data
from mixscope.report import html as H
from mixscope.report.context import Report, label, slug

QUERY = "component_profile"


def scopes() -> tuple[list[str], str]:
    """The query's scope columns in block order, and its change column: from the query's
    ``-- columns:`` contract, so the order is written once (in the SQL file)."""
    from mixscope.report.plots import LABELS
    from mixscope.sql.named import get_query

    columns = get_query(QUERY).columns
    return [c for c in columns if c in LABELS], columns[-1]


def component_section(rep: Report) -> None:
    """One figure per run that has every scope; a note where no run has."""
    from mixscope.sql.named import get_query

    s = rep.sections["components"]
    needs = get_query(QUERY).groups  # its ``-- group:`` header: a run needs every one
    have = set.intersection(*(data.runs_with_group(rep.con, g) for g in needs))
    runs = [r for r in rep.runs if r["run_id"] in have]
    if not runs:
        s.add(H.note("No run here has the ff group (--measures paper,ff or all)."))
        return
    s.add(
        H.paragraph(
            "Mean mixing ratio at each scope of the block, in the order a token's vector "
            "passes through it: the attention, its residual and the norm after it (the "
            "attention block's output), then the feed-forward, its residual and the norm "
            "after it (the layer's output). Shaded, and below as bars: the FF's change, "
            "the layer's output minus the attention block's output (green: the "
            "feed-forward block raises the share of context; red: it lowers it)."
        )
    )
    profile = rep.by_run(data.named(rep.con, QUERY))
    names, change = scopes()
    figures = []
    for run in runs:
        rid, name = run["run_id"], label(run)
        fig = component_profile(
            profile.get(rid, []), names, change, f"Through the block, layer by layer\n{name}"
        )
        figures.append(
            rep.plot("components", f"components-{slug(rid)}", f"components, {name}", fig, add=False)
        )
    s.add(H.grid(figures))


RAISE, LOWER = "#2ca02c", "#d62728"


def component_profile(rows: list[dict], names: list[str], change: str, title: str) -> Any:
    """Per layer, one line per scope (``names``, in block order) and, highlighted, the
    FF's change (column ``change``): shaded between the attention block's output (the
    last scope before the FF's) and the layer's output, and as bars in a panel below."""
    from mixscope.report.plots import COLORS, LABELS, layer_axis, pyplot

    plt = pyplot()
    rows = sorted(rows, key=lambda r: int(r["layer"]))
    layers = [int(r["layer"]) for r in rows]
    fig, (top, bottom) = plt.subplots(
        2,
        1,
        figsize=(7.5, 7.0),
        sharex=True,
        height_ratios=(3, 1.3),
        layout="constrained",
    )
    half = len(names) // 2  # the attention block's scopes, then the feed-forward's
    for k, m in enumerate(names):
        ys = [100 * r[m] if r[m] is not None else float("nan") for r in rows]
        ff_side = k >= half
        top.plot(
            layers,
            ys,
            "-",
            marker="s" if ff_side else "o",
            color=COLORS[m],
            label=LABELS[m],
            linewidth=2.2 if k in (half - 1, len(names) - 1) else 1.4,
            markersize=5,
        )
    before, after = names[half - 1], names[-1]  # the attention block's and the layer's output
    if rows and all(r[before] is not None and r[after] is not None for r in rows):
        lo = [100 * r[before] for r in rows]
        hi = [100 * r[after] for r in rows]
        up = [b >= a for a, b in zip(lo, hi, strict=True)]
        top.fill_between(layers, lo, hi, where=up, interpolate=True, color=RAISE, alpha=0.15)
        down = [not u for u in up]
        top.fill_between(layers, lo, hi, where=down, interpolate=True, color=LOWER, alpha=0.15)
    top.set_ylabel("mixing ratio (%)")
    top.set_ylim(0, 100)
    top.grid(True, alpha=0.3)
    top.set_title(title)
    deltas = [100 * r[change] if r[change] is not None else 0.0 for r in rows]
    bottom.bar(layers, deltas, color=[RAISE if d >= 0 else LOWER for d in deltas], width=0.6)
    bottom.axhline(0, color="black", linewidth=0.8)
    bottom.set_ylabel("FF's change (pp)")
    bottom.set_title(f"{LABELS[after]} − {LABELS[before]}", fontsize=10)
    bottom.grid(True, alpha=0.3, axis="y")
    layer_axis(bottom, layers)
    fig.legend(loc="outside lower center", ncol=2, frameon=False)  # attention | FF
    return fig
