"""The report's comparison of two runs (``mixscope report ROOT --compare RUN_A RUN_B``).

Asked for explicitly: which two runs to put side by side (two checkpoints, two models,
float32 vs bfloat16) is the user's question, not something to guess from a root that may
hold dozens. The numbers are the ``compare_runs`` and ``compare_token_types`` queries
(via :mod:`mixscope.compare`); the figures are drawn by :mod:`mixscope.report.compare_plots`.
"""

from __future__ import annotations

from mixscope.report import data
from mixscope.report import html as H
from mixscope.report.context import Report, pct


def with_compared(
    root: str, run_ids: list[str] | None, compare: tuple[str, str] | None
) -> tuple[list[str] | None, tuple[str, str] | None]:
    """The compared runs' full ids, added to an explicit ``--run`` selection (the report
    must see them); ``run_ids`` unchanged without a comparison."""
    if not compare:
        return run_ids, None
    from mixscope.store.layout import Layout
    from mixscope.store.runs import resolve_run_ids

    a, b = resolve_run_ids(Layout.open(root), list(compare))
    if run_ids:
        run_ids = [*run_ids, *(r for r in (a, b) if r not in run_ids)]
    return run_ids, (a, b)


def compare_section(rep: Report, compare: tuple[str, str] | None) -> None:
    """Fill ``rep``'s ``compare`` section."""
    from mixscope.compare import compare_cursor, resolve_pair
    from mixscope.report import compare_plots, plots

    s = rep.sections["compare"]
    if not compare:
        s.add(
            H.note(
                "No comparison asked for: `mixscope report ROOT --compare RUN_A RUN_B` shows "
                "two runs side by side (per layer and per token type, with the difference)."
            )
        )
        return
    pair = resolve_pair(rep.con, rep.root, *compare)
    layers = data.rows(compare_cursor(rep.con, pair, "layer"))
    types = data.rows(compare_cursor(rep.con, pair, "token-type"))
    s.add(
        H.paragraph(
            f"a = {pair.label_a}; b = {pair.label_b}. Token-level mean ratio (%) of each "
            "run per layer and measure, and the difference b − a in percentage points; "
            "the same numbers as `mixscope compare` (queries compare_runs and "
            "compare_token_types)."
        )
    )
    body = [
        [
            r["layer"],
            plots.LABELS[r["measure"]],
            pct(r["mean_a"]),
            pct(r["mean_b"]),
            pct(r["diff"]),
            "" if r["n_a"] is None else f"{r['n_a']:,}",
            "" if r["n_b"] is None else f"{r['n_b']:,}",
        ]
        for r in layers
    ]
    s.add(
        H.table(["layer", "measure", "a (%)", "b (%)", "b − a (pp)", "tokens a", "tokens b"], body)
    )
    slug = f"{pair.a}-{pair.b}"
    title = f"Per-layer comparison\na = {pair.label_a}\nb = {pair.label_b}"
    fig = compare_plots.compare_layers(layers, title)
    rep.plot("compare", f"compare_layers-{slug}", "per-layer comparison", fig)
    title = f"Token type × layer, b − a (percentage points)\na = {pair.label_a}\nb = {pair.label_b}"
    fig = compare_plots.compare_token_types(types, title)
    rep.plot("compare", f"compare_token_types-{slug}", "per-token-type comparison", fig)
