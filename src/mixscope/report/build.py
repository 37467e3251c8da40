"""``build_report``: from a results root to one self-contained HTML page, or to PNG files.

Sections, in order: runs, summary (Table 2), per-layer curves, token types × layer
(Figure 3), frequency rank vs ratio (Figure 4, with ρ), checkpoint trend (models with
several steps), the comparison of two runs (``--compare A B``, report/comparison.py),
contribution maps of one example sequence per layer (Figure 1). The same figures, not
rendered, are what :meth:`mixscope.results.Results.plot` returns (report/figures.py).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mixscope import MEASURES, __version__
from mixscope.errors import MixscopeError
from mixscope.report import data
from mixscope.report import html as H
from mixscope.report.example import MAX_TOKENS
from mixscope.store.atomic import write_text

FORMATS = ("html", "png")

#: section id → heading (every report has all of them, with a note where there is nothing)
SECTIONS = {
    "runs": "Runs",
    "summary": "Summary: mean mixing ratio per measure",
    "layers": "Per-layer mixing ratio",
    "token-types": "Token types by layer",
    "frequency": "Frequency rank and mixing ratio",
    "trend": "Checkpoint trend",
    "compare": "Comparison of two runs",
    "contributions": "Contribution maps of an example sequence",
}

#: contribution maps are drawn for at most this many runs (each needs its model loaded)
MAX_EXAMPLE_RUNS = 3


@dataclass
class Plot:
    section: str
    name: str  # file stem in --format png
    title: str
    png: bytes


@dataclass
class Built:
    """What was written: the page (html) or the files (png), and every plot."""

    output: str
    files: list[str] = field(default_factory=list)
    plots: list[Plot] = field(default_factory=list)
    sections: list[H.Section] = field(default_factory=list)


def _pct(x: float | None) -> H.Cell:
    if x is None:
        return H.Cell("")
    return H.Cell(f"{100 * x:.2f}", value=float(x), numeric=True)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(text)).strip("_") or "run"


def _pairs(record: dict[str, Any] | None) -> str:
    """The run's pair counts (kept, split, skipped) in words; "" without pairs."""
    from mixscope.runtime.status import pair_counts

    return pair_counts(((record or {}).get("corpus") or {}).get("pairs"))


def _short_model(model: str | None) -> str:
    if not model:
        return ""
    return os.path.basename(model.rstrip("/")) if os.sep in model else model


def _label(run: dict[str, Any]) -> str:
    parts = [run.get("name") or "run"]
    if run.get("step") is not None:
        parts.append(f"step {run['step']}")
    parts.append(f"run {run['run_id']}")
    return " · ".join(parts)


def select_runs(root: str, run_ids: list[str] | None) -> list[dict[str, Any]]:
    """The run records to report on, oldest first; clear errors for empty or unknown."""
    from mixscope.store.layout import Layout
    from mixscope.store.runs import list_runs

    if "://" not in root and not Path(root).is_dir():
        raise MixscopeError(f"results root {root} does not exist")
    layout = Layout.open(root)
    records = list_runs(layout)
    if not records:
        raise MixscopeError(f"no runs in {root} (run a job with `mixscope run` first)")
    known = [r["run_id"] for r in records]
    if run_ids:
        unknown = [r for r in run_ids if r not in known]
        if unknown:
            raise MixscopeError(f"unknown run {unknown[0]!r} in {root}; runs: {', '.join(known)}")
        records = [r for r in records if r["run_id"] in run_ids]
    return records


class _Report:
    """The report's sections over ``records``. ``con``: a views connection to reuse (it may
    see more runs; only ``records`` are shown). ``render=False`` keeps each figure as the
    matplotlib object in ``figures`` instead of rendering it (``Results.plot``)."""

    def __init__(
        self,
        root: str,
        records: list[dict[str, Any]],
        reference: str | None,
        *,
        con: Any = None,
        render: bool = True,
    ):
        from mixscope.sql.views import connect

        self.root = root
        self.reference = reference
        self.render = render
        self.figures: list[tuple[str, Any]] = []  # (section, Figure) when not rendering
        self.records = {r["run_id"]: r for r in records}
        self.con = con if con is not None else connect(root, run_ids=list(self.records))
        present = data.runs_with_rows(self.con)
        self.with_detail = data.runs_with_detail(self.con)
        self.runs = [
            r for r in data.runs(self.con) if r["run_id"] in present and r["run_id"] in self.records
        ]
        if not self.runs:
            raise MixscopeError(
                f"no committed results in {root} for runs {', '.join(self.records)}"
            )
        self.plots: list[Plot] = []
        self.sections = {k: H.Section(k, v) for k, v in SECTIONS.items()}

    def plot(
        self,
        section: str,
        name: str,
        title: str,
        fig: Any,
        caption: str | None = None,
        add: bool = True,
    ) -> str:
        """Render ``fig``; its HTML fragment is added to the section unless ``add=False``."""
        from mixscope.report.plots import to_png

        if not self.render:
            self.figures.append((section, fig))
            return ""
        png = to_png(fig)
        self.plots.append(Plot(section, name, title, png))
        fragment = H.figure(png, title, caption)
        if add:
            self.sections[section].add(fragment)
        return fragment

    def _by_run(self, table: data.Rows) -> dict[str, data.Rows]:
        """Rows per run, in the report's run order."""
        out: dict[str, data.Rows] = {r["run_id"]: [] for r in self.runs}
        for r in table:
            out.setdefault(r["run_id"], []).append(r)
        return out

    # -- sections ---------------------------------------------------------------------

    def runs_section(self) -> None:
        s = self.sections["runs"]
        s.add(H.paragraph(f"{len(self.runs)} run(s) with committed results in {self.root}."))
        body = [
            [
                r["run_id"],
                r["name"] or "",
                _short_model(r["model"]),
                r["step"],
                r["dtype"] or "",
                r["n_docs"],
                r["tokens"],
                r["status"] or "",
            ]
            for r in self.runs
        ]
        headers = ["run", "name", "model", "step", "dtype", "documents", "tokens", "status"]
        pairs = {r["run_id"]: _pairs(self.records.get(r["run_id"])) for r in self.runs}
        if any(pairs.values()):  # corpus.pairs: pairs kept / split / skipped (corpus/plan.py)
            headers.append("pairs")
            for row, r in zip(body, self.runs, strict=True):
                row.append(pairs[r["run_id"]])
        s.add(H.table(headers, body))
        skipped = [k for k in self.records if k not in {r["run_id"] for r in self.runs}]
        if skipped:
            s.add(H.note(f"Runs without committed results, left out: {', '.join(skipped)}."))

    def summary_section(self) -> data.Rows:
        from mixscope.report.plots import LABELS

        rows = [r for rs in self._by_run(data.named(self.con, "summary")).values() for r in rs]
        s = self.sections["summary"]
        s.add(
            H.paragraph(
                "Mean, maximum and minimum mixing ratio (%) over every token and layer "
                "(the paper's Table 2); rows = token-layer rows pooled."
            )
        )
        body, attrs = [], []
        names = {r["run_id"]: _label(r) for r in self.runs}
        for r in rows:
            body.append(
                [
                    names.get(r["run_id"], r["run_id"]),
                    LABELS[r["measure"]],
                    _pct(r["mean"]),
                    _pct(r["max"]),
                    _pct(r["min"]),
                    H.Cell(f"{r['n']:,}", value=int(r["n"]), numeric=True),
                ]
            )
            attrs.append({"data-run": r["run_id"], "data-measure": r["measure"]})
        s.add(H.table(["run", "measure", "mean (%)", "max (%)", "min (%)", "rows"], body, attrs))
        return rows

    def layer_sections(self) -> None:
        from mixscope.report import plots

        profile = self._by_run(data.named(self.con, "layer_profile"))
        types = self._by_run(data.named(self.con, "token_types"))
        s = self.sections["layers"]
        s.add(
            H.paragraph(
                "Per-sequence mean mixing ratio at each layer (mean over sequences of each "
                "sequence's mean, as in the paper). Dashed: weight-based measures."
            )
        )
        t = self.sections["token-types"]
        t.add(
            H.paragraph(
                "Per-sequence mean ratio (%) by token category and layer (the paper's Figure 3); "
                "'overall' is every token."
            )
        )
        curves, heatmaps = [], []
        for run in self.runs:
            rid, label = run["run_id"], _label(run)
            prof = profile.get(rid, [])
            fig = plots.layer_curves(prof, f"Mixing ratio per layer\n{label}")
            curves.append(
                self.plot(
                    "layers", f"layers-{_slug(rid)}", f"per-layer curves, {label}", fig, add=False
                )
            )
            fig = plots.token_type_heatmap(types.get(rid, []), prof, f"Token type × layer\n{label}")
            heatmaps.append(
                self.plot(
                    "token-types",
                    f"token_types-{_slug(rid)}",
                    f"token types, {label}",
                    fig,
                    add=False,
                )
            )
        s.add(H.grid(curves))
        t.add(H.grid(heatmaps))

    def frequency_section(self) -> None:
        from mixscope.report import plots

        ref = self.reference
        rho = self._by_run(data.named(self.con, "frequency_correlation", reference=ref))
        bins = self._by_run(data.named(self.con, "frequency_bins", reference=ref))
        s = self.sections["frequency"]
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
        names = {r["run_id"]: _label(r) for r in self.runs}
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
        for run in self.runs:
            rid = run["run_id"]
            sample = data.frequency_sample(
                self.con, rid, reference=ref, detail=rid in self.with_detail
            )
            if not len(sample.get("freq_rank", [])):
                s.add(H.note(f"{_label(run)}: no token occurrence has a frequency rank."))
                continue
            total = max((int(r["n"]) for r in rho.get(rid, [])), default=None)
            fig = plots.frequency(
                bins.get(rid, []),
                sample,
                rho.get(rid, []),
                f"Frequency rank vs layer-averaged ratio: {_label(run)}",
                total=total,
            )
            self.plot("frequency", f"frequency-{_slug(rid)}", f"frequency, {_label(run)}", fig)

    def trend_section(self) -> None:
        from mixscope.report import plots

        rows = [r for r in data.named(self.con, "checkpoint_trend") if r["run_id"] in self.records]
        s = self.sections["trend"]
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
            self.plot("trend", f"trend-{_slug(model)}", title, plots.checkpoint_trend(rs, title))

    def contributions_section(self, enabled: bool) -> None:
        from mixscope.report import plots
        from mixscope.report.example import example_for

        s = self.sections["contributions"]
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
        chosen = self.runs[:MAX_EXAMPLE_RUNS]
        if len(self.runs) > len(chosen):
            s.add(
                H.note(
                    f"Shown for the first {len(chosen)} of {len(self.runs)} runs; "
                    "pick others with --run."
                )
            )
        for run in chosen:
            rid = run["run_id"]
            s.add(H.subheading(_label(run)))
            ex = example_for(self.root, self.records[rid])
            if ex.error:
                s.add(H.note(f"No contribution maps for this run: {ex.error}"))
                continue
            longer = " (the document is longer; its first segment is shown)" if ex.truncated else ""
            s.add(H.paragraph(f"Document {ex.doc_id}, {len(ex.tokens)} tokens{longer}."))
            for layer in range(ex.n_layers):
                title = f"Contribution maps, layer {layer + 1}: {_label(run)}"
                fig = plots.contribution_maps(ex.tokens, ex.maps, layer, title)
                self.plot(
                    "contributions", f"contributions-{_slug(rid)}-layer{layer + 1:02d}", title, fig
                )


def _fmt_rho(x: float | None) -> str:
    return "" if x is None else f"{x:+.3f}"


def _summary_csv(rows: data.Rows) -> str:
    lines = ["run_id,measure,mean,max,min,n"]
    lines += [
        f"{r['run_id']},{r['measure']},{r['mean']!r},{r['max']!r},{r['min']!r},{r['n']}"
        for r in rows
    ]
    return "\n".join(lines) + "\n"


def build_report(
    root: str,
    run_ids: list[str] | None = None,
    output: str | None = None,
    fmt: str = "html",
    *,
    reference: str | None = None,
    examples: bool = True,
    compare: tuple[str, str] | None = None,
) -> Built:
    """Build the report of ``root`` (the given runs, default all) and write it to ``output``.

    ``fmt="html"``: one self-contained page (default ``report.html``). ``fmt="png"``: one
    PNG per plot plus ``summary.csv`` in the directory ``output`` (default ``report``).
    ``compare``: two runs (ids or unique prefixes) drawn side by side; they join ``run_ids``.
    """
    from mixscope.report.comparison import compare_section, with_compared

    if fmt not in FORMATS:
        raise MixscopeError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    run_ids, compare = with_compared(root, run_ids, compare)
    records = select_runs(root, list(run_ids) if run_ids else None)
    rep = _Report(root, records, reference)
    rep.runs_section()
    summary = rep.summary_section()
    rep.layer_sections()
    rep.frequency_section()
    rep.trend_section()
    compare_section(rep, compare)
    rep.contributions_section(examples)
    sections = list(rep.sections.values())

    if fmt == "html":
        out = Path(output or "report.html")
        if out.is_dir():
            out = out / "report.html"
        out.parent.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        meta = (
            f"mixscope {__version__} · {root} · {len(rep.runs)} run(s) · "
            f"measures {', '.join(MEASURES)} · built {stamp}"
        )
        text = H.page("mixscope report", meta, sections)
        write_text(out, text)
        return Built(str(out), [str(out)], rep.plots, sections)

    folder = Path(output or "report")
    if folder.suffix.lower() in (".html", ".htm"):
        raise MixscopeError(f"--format png writes into a directory, not {folder}")
    if folder.exists() and not folder.is_dir():
        raise MixscopeError(f"--format png writes into a directory; {folder} is a file")
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for p in rep.plots:
        path = folder / f"{p.name}.png"
        path.write_bytes(p.png)
        files.append(str(path))
    csv = folder / "summary.csv"
    csv.write_text(_summary_csv(summary), encoding="utf-8")
    files.append(str(csv))
    return Built(str(folder), files, rep.plots, sections)
