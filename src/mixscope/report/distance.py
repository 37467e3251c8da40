"""The distance group's figure: how far each layer reaches, by norm beside weight (method.md
§5e). Its section is declared in the registry (report/group_sections.py builds it).

For the runs with the ``distance`` group: a layer × distance heatmap of the share of the
context that comes from each distance bucket by norm, the same by attention weight, and
their difference (norm − weight: blue where the weight overstates a distance, red where it
understates it); and the per-layer mean reach in tokens by each. From the named query
``distance_profile``, so the figure shows exactly what the query answers.

Drawn to be compared: norm and weight on one colour map and one scale (up to the larger
of their largest shares, so a 30% cell is not a dim 30 of 100); the buckets past the
farthest any layer reaches left out (a corpus of short texts fills 5 of 12, and seven
empty columns squeezed the rest), the x label saying so; the reach on a log axis labelled
in tokens.
"""

from __future__ import annotations

from typing import Any


def _grid(rows: list[dict], key: str, layers: list[int], buckets: list[int]) -> Any:
    import numpy as np

    grid = np.full((len(layers), len(buckets)), np.nan)
    for r in rows:
        grid[layers.index(int(r["layer"])), buckets.index(int(r["bucket"]))] = 100 * r[key]
    return grid


def _span(r: dict) -> str:
    lo, hi = int(r["lo"]), r["hi"]
    if hi is None:
        return f"≥{lo}"
    return str(lo) if lo == int(hi) else f"{lo}–{int(hi)}"


def distance_figure(rows: list[dict], title: str) -> Any:
    """Three layer × bucket heatmaps (norm, weight, difference) and the reach per layer,
    from ``distance_profile`` rows of one run."""
    import numpy as np

    from mixscope.report.plots import layer_axis, pyplot

    plt = pyplot()
    from matplotlib import ticker

    layers = sorted({int(r["layer"]) for r in rows})
    reached = [int(r["bucket"]) for r in rows if (r["share_n"] or 0) > 0 or (r["share_w"] or 0) > 0]
    every = sorted({int(r["bucket"]) for r in rows})
    buckets = [b for b in every if b <= max(reached, default=every[-1])]
    spans = {int(r["bucket"]): _span(r) for r in rows}
    rows = [r for r in rows if int(r["bucket"]) in buckets]
    height = max(3.8, 1.2 + 0.28 * len(layers))
    fig, axes = plt.subplots(
        1, 4, figsize=(20, height), layout="constrained", width_ratios=[1, 1, 1, 0.9]
    )
    norm, weight = _grid(rows, "share_n", layers, buckets), _grid(rows, "share_w", layers, buckets)
    diff = norm - weight
    finite = np.abs(diff[np.isfinite(diff)])
    bound = max(1.0, float(finite.max())) if finite.size else 1.0  # symmetric about 0
    shares = np.concatenate([norm[np.isfinite(norm)], weight[np.isfinite(weight)]])
    top = min(100.0, 5.0 * np.ceil(float(shares.max()) / 5.0)) if shares.size else 100.0
    top = max(top, 5.0)  # one scale for both, in steps of 5%
    panels = (
        (norm, "by norm", "viridis", 0.0, top),
        (weight, "by weight", "viridis", 0.0, top),
        (diff, "norm − weight", "RdBu", -bound, bound),
    )
    xlabel = "distance (tokens)"
    if len(buckets) < len(every):  # the farther buckets: no share in any layer
        xlabel += f"; {spans[buckets[-1]]} is the farthest with context"
    for ax, (grid, what, cmap, lo, hi) in zip(axes, panels, strict=False):
        im = ax.imshow(grid, aspect="auto", cmap=cmap, vmin=lo, vmax=hi, origin="lower")
        ax.set_xticks(range(len(buckets)), [spans[b] for b in buckets], rotation=60, fontsize=7)
        ax.set_yticks(range(len(layers)), [str(x) for x in layers], fontsize=7)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("layer")
        ax.set_title(f"share of the context {what} (%)")
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.03)
    ax = axes[3]
    reach = {int(r["layer"]): (r["reach_n"], r["reach_w"]) for r in rows}
    ax.plot(layers, [reach[x][0] for x in layers], "-o", color="#21908d", label="by norm")
    ax.plot(layers, [reach[x][1] for x in layers], "--s", color="#bc3754", label="by weight")
    layer_axis(ax, layers)
    ax.set_yscale("log", base=2)
    # powers of 2 and the 1.5× between them, labelled in tokens (not 2^k): a narrow range
    # (reach 5–9) still gets two or three labels
    ax.yaxis.set_major_locator(ticker.LogLocator(base=2, subs=(1.0, 1.5)))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_locator(ticker.NullLocator())
    ax.set_ylabel("mean reach (tokens)")
    ax.grid(True, alpha=0.3)
    ax.legend(frameon=False, fontsize=8)
    ax.set_title("mean distance of the context")
    fig.suptitle(title)
    return fig
