"""The checkpoint-trend section: the mean ratio per training step, per layer."""

from __future__ import annotations

from mixscope.report import data
from mixscope.report import html as H
from mixscope.report.context import Report, slug


def trend_section(rep: Report) -> None:
    from mixscope.report import plots

    rows = [r for r in data.named(rep.con, "checkpoint_trend") if r["run_id"] in rep.records]
    s = rep.sections["trend"]
    by_model: dict[str, data.Rows] = {}
    for r in rows:
        by_model.setdefault(r["model"], []).append(r)
    several = {m: rs for m, rs in by_model.items() if len({r["step"] for r in rs}) > 1}
    if not several:
        s.add(
            H.note(
                "No model has results at several training steps (runs of one job name "
                "with different `step`), so there is no trend to show."
            )
        )
        return
    s.add(
        H.paragraph(
            "Mean ratio per training step, one thin line per layer (purple: first, green: "
            "last) and the mean over all layers (black); runs grouped by job name."
        )
    )
    for model, rs in several.items():
        steps = sorted({r["step"] for r in rs})
        title = f"Checkpoint trend: {model} ({len(steps)} steps, {steps[0]}–{steps[-1]})"
        rep.plot("trend", f"trend-{slug(model)}", title, plots.checkpoint_trend(rs, title))
