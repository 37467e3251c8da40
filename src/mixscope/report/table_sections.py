"""The report's table sections: the runs shown and the summary (the paper's Table 2)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mixscope.report import data
from mixscope.report import html as H
from mixscope.report.context import Report, label, pct, short_corpus, short_model

if TYPE_CHECKING:
    from mixscope.store.run_record import RunRecord


def _pairs(record: RunRecord | None) -> str:
    """The run's pair counts (kept, split, skipped) in words; "" without pairs."""
    from mixscope.status import pair_counts

    return pair_counts(record.corpus.get("pairs") if record else None)


def runs_section(rep: Report) -> None:
    s = rep.sections["runs"]
    s.add(H.paragraph(f"{len(rep.runs)} run(s) with committed results in {rep.root}."))
    body = [
        [
            r["run_id"],
            r["name"] or "",
            short_model(r["model"]),
            short_corpus(r.get("corpus")),
            r["step"],
            r["dtype"] or "",
            r["n_docs"],
            r["tokens"],
            r["status"] or "",
        ]
        for r in rep.runs
    ]
    headers = ["run", "name", "model", "corpus", "step", "dtype", "documents", "tokens", "status"]
    pairs = {r["run_id"]: _pairs(rep.records.get(r["run_id"])) for r in rep.runs}
    if any(pairs.values()):  # corpus.pairs: pairs kept / split / skipped (corpus/plan.py)
        headers.append("pairs")
        for row, r in zip(body, rep.runs, strict=True):
            row.append(pairs[r["run_id"]])
    s.add(H.table(headers, body))
    skipped = [k for k in rep.records if k not in {r["run_id"] for r in rep.runs}]
    if skipped:
        s.add(H.note(f"Runs without committed results, left out: {', '.join(skipped)}."))


def summary_section(rep: Report) -> data.Rows:
    from mixscope.report.plots import LABELS

    rows = [r for rs in rep.by_run(data.named(rep.con, "summary")).values() for r in rs]
    s = rep.sections["summary"]
    s.add(
        H.paragraph(
            "Mean, maximum and minimum mixing ratio (%) over every token and layer "
            "(the paper's Table 2); rows = token-layer rows pooled."
        )
    )
    body, attrs = [], []
    names = {r["run_id"]: label(r) for r in rep.runs}
    for r in rows:
        body.append(
            [
                names.get(r["run_id"], r["run_id"]),
                LABELS[r["measure"]],
                pct(r["mean"]),
                pct(r["max"]),
                pct(r["min"]),
                H.Cell(f"{r['n']:,}", value=int(r["n"]), numeric=True),
            ]
        )
        attrs.append({"data-run": r["run_id"], "data-measure": r["measure"]})
    s.add(H.table(["run", "measure", "mean (%)", "max (%)", "min (%)", "rows"], body, attrs))
    return rows
