"""The contribution-maps section: ‖P_ij‖ of one example sequence per layer (Figure 1)."""

from __future__ import annotations

from mixscope.report import html as H
from mixscope.report.context import Report, label, slug
from mixscope.report.example import MAX_TOKENS, MIN_TOKENS

#: contribution maps are drawn for at most this many runs (each needs its model loaded)
MAX_EXAMPLE_RUNS = 3


def check_example(rep: Report, doc_id: int | None) -> None:
    """Refuse an ``--example`` document that a run with contribution maps does not have:
    before any figure is drawn or model loaded (one line listing the run's ids)."""
    from mixscope.report.example import choose_document, documents

    if doc_id is None:
        return
    for run in rep.runs[:MAX_EXAMPLE_RUNS]:
        record = rep.records[run["run_id"]]
        choose_document(documents(rep.root, record), record.run_id, doc_id)


def contributions_section(rep: Report, enabled: bool, doc_id: int | None = None) -> None:
    """The maps of document ``doc_id`` (``--example``; default: the first document with
    at least MIN_TOKENS tokens) for the first runs."""
    from mixscope.report import plots
    from mixscope.report.example import example_for

    chosen_doc = (
        f"document {doc_id} (--example)"
        if doc_id is not None
        else f"the run's first document with at least {MIN_TOKENS} tokens (else its longest; "
        "another with --example N)"
    )
    s = rep.sections["contributions"]
    s.add(
        H.paragraph(
            "Per-pair contribution norms ‖P_ij‖ (row i receives, column j gives) of "
            f"{chosen_doc}, layer by layer (the paper's Figure 1): ATTN-N = "
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
        ex = example_for(rep.root, rep.records[rid], doc_id=doc_id)
        if ex.error:
            s.add(H.note(f"No contribution maps for this run: {ex.error}"))
            continue
        longer = " (the document is longer; its first segment is shown)" if ex.truncated else ""
        shown = f"{len(ex.tokens)} tokens" + (
            f" of {ex.doc_tokens}" if ex.doc_tokens > len(ex.tokens) else ""
        )
        s.add(H.paragraph(f"Document {ex.doc_id}, {shown}{longer}."))
        for layer in range(ex.n_layers):
            title = f"Contribution maps, layer {layer + 1}: {label(run)}"
            fig = plots.contribution_maps(ex.tokens, ex.maps, layer, title)
            rep.plot("contributions", f"contributions-{slug(rid)}-layer{layer + 1:02d}", title, fig)
