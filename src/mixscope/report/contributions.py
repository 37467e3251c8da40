"""The contribution-maps section: ‖P_ij‖ of one example sequence per layer (Figure 1)."""

from __future__ import annotations

from mixscope.report import html as H
from mixscope.report.context import Report, label, slug
from mixscope.report.example import MAX_TOKENS

#: contribution maps are drawn for at most this many runs (each needs its model loaded)
MAX_EXAMPLE_RUNS = 3


def contributions_section(rep: Report, enabled: bool) -> None:
    from mixscope.report import plots
    from mixscope.report.example import example_for

    s = rep.sections["contributions"]
    s.add(
        H.paragraph(
            "Per-pair contribution norms ‖P_ij‖ (row i receives, column j gives) of the "
            "run's first document, layer by layer (the paper's Figure 1): ATTN-N = "
            "attention only, ATTNRES-N = + residual, ATTNRESLN-N = + layer norm. "
            f"At most the first {MAX_TOKENS} tokens are shown, analysed as one sequence "
            "with the run's model and masking."
        )
    )
    if not enabled:
        s.add(H.note("Not computed (--no-examples)."))
        return
    chosen = rep.runs[:MAX_EXAMPLE_RUNS]
    if len(rep.runs) > len(chosen):
        s.add(
            H.note(
                f"Shown for the first {len(chosen)} of {len(rep.runs)} runs; "
                "pick others with --run."
            )
        )
    for run in chosen:
        rid = run["run_id"]
        s.add(H.subheading(label(run)))
        ex = example_for(rep.root, rep.records[rid])
        if ex.error:
            s.add(H.note(f"No contribution maps for this run: {ex.error}"))
            continue
        longer = " (the document is longer; its first segment is shown)" if ex.truncated else ""
        s.add(H.paragraph(f"Document {ex.doc_id}, {len(ex.tokens)} tokens{longer}."))
        for layer in range(ex.n_layers):
            title = f"Contribution maps, layer {layer + 1}: {label(run)}"
            fig = plots.contribution_maps(ex.tokens, ex.maps, layer, title)
            rep.plot("contributions", f"contributions-{slug(rid)}-layer{layer + 1:02d}", title, fig)
