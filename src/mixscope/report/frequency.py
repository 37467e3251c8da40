"""The frequency section: frequency rank against the layer-averaged ratio (Figure 4, ρ)."""

from __future__ import annotations

from mixscope.report import data
from mixscope.report import html as H
from mixscope.report.context import Report, label, slug


def frequency_section(rep: Report) -> None:
    from mixscope.report import plots

    ref = rep.reference
    rho = rep.by_run(data.named(rep.con, "frequency_correlation", reference=ref))
    bins = rep.by_run(data.named(rep.con, "frequency_bins", reference=ref))
    s = rep.sections["frequency"]
    source = f"the imported reference table {ref!r}" if ref else "the run's own corpus counts"
    s.add(
        H.paragraph(
            "Frequency rank of each token (1 = most frequent, from "
            f"{source}) against the token occurrence's ratio averaged over all layers "
            f"(the paper's Figure 4). Grey: a sample of at most {data.SAMPLE_SIZE:,} "
            "occurrences (runs without per-token detail: one point per token, its mean); "
            "line: mean per log-rank bin; ρ: Spearman over all occurrences."
        )
    )
    body = []
    names = {r["run_id"]: label(r) for r in rep.runs}
    for rid, rs in rho.items():
        for r in rs:
            body.append(
                [
                    names.get(rid, rid),
                    plots.LABELS[r["measure"]],
                    H.Cell(_fmt_rho(r["rho_all"]), r["rho_all"], True),
                    H.Cell(_fmt_rho(r["rho_no_special"]), r["rho_no_special"], True),
                    H.Cell(f"{r['n']:,}", int(r["n"]), True),
                ]
            )
    if body:
        s.add(H.table(["run", "measure", "ρ", "ρ without [CLS]/[SEP]", "occurrences"], body))
    for run in rep.runs:
        rid = run["run_id"]
        sample = data.frequency_sample(rep.con, rid, reference=ref, detail=rid in rep.with_detail)
        if not len(sample.get("freq_rank", [])):
            s.add(H.note(f"{label(run)}: no token occurrence has a frequency rank."))
            continue
        total = max((int(r["n"]) for r in rho.get(rid, [])), default=None)
        fig = plots.frequency(
            bins.get(rid, []),
            sample,
            rho.get(rid, []),
            f"Frequency rank vs layer-averaged ratio: {label(run)}",
            total=total,
        )
        rep.plot("frequency", f"frequency-{slug(rid)}", f"frequency, {label(run)}", fig)


def _fmt_rho(x: float | None) -> str:
    return "" if x is None else f"{x:+.3f}"
