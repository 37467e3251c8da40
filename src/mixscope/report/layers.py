"""The per-layer sections: mixing ratio curves per layer and token types × layer (Figure 3)."""

from __future__ import annotations

from mixscope.report import data
from mixscope.report import html as H
from mixscope.report.context import Report, label, slug


def layer_sections(rep: Report) -> None:
    from mixscope.report import plots
    from mixscope.report.layer_plots import describe, layer_curves, layer_panels

    profile = rep.by_run(data.named(rep.con, "layer_profile"))
    types = rep.by_run(data.named(rep.con, "token_types"))
    s = rep.sections["layers"]
    s.add(
        H.paragraph(
            "Per-sequence mean mixing ratio at each layer (mean over sequences of each "
            "sequence's mean, as in the paper), one panel per measure group: norm-based "
            "ratios, weight-based ones (dashed) and the share drawn from the first position "
            "(sink) each on their own axis."
        )
    )
    t = rep.sections["token-types"]
    t.add(
        H.paragraph(
            "Per-sequence mean ratio (%) by token category and layer (the paper's Figure 3); "
            "'overall' is every token."
        )
    )
    curves, heatmaps = [], []
    for run in rep.runs:
        rid, name = run["run_id"], label(run)
        prof = profile.get(rid, [])
        fig = layer_curves(prof, f"Mixing ratio per layer\n{name}")
        caption = describe(layer_panels(plots.measures_in(prof)))
        curves.append(
            rep.plot(
                "layers", f"layers-{slug(rid)}", f"per-layer curves, {name}", fig, caption, False
            )
        )
        fig = plots.token_type_heatmap(types.get(rid, []), prof, f"Token type × layer\n{name}")
        heatmaps.append(
            rep.plot(
                "token-types",
                f"token_types-{slug(rid)}",
                f"token types, {name}",
                fig,
                add=False,
            )
        )
    s.add(H.grid(curves))
    t.add(H.grid(heatmaps))
