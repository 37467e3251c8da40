"""The state every report section works on: the runs, the views connection, the figures.

Sections are plain functions of a :class:`Report` (report/table_sections.py, layers.py,
frequency.py, components.py, trend.py, comparison.py, contributions.py), so
``build_report`` renders them into a page and ``Results.plot`` (report/figures.py) takes
the very same figures unrendered.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mixscope.errors import MixscopeError
from mixscope.registry import GROUPS
from mixscope.report import data
from mixscope.report import html as H

if TYPE_CHECKING:
    from mixscope.store.run_record import RunRecord

_FIRST = {
    "runs": "Runs",
    "summary": "Summary: mean mixing ratio per measure",
    "layers": "Per-layer mixing ratio",
    "token-types": "Token types by layer",
    "frequency": "Frequency rank and mixing ratio",
}
_LAST = {
    "components": "Through the block: attention to feed-forward",
    "trend": "Checkpoint trend",
    "compare": "Comparison of two runs",
    "contributions": "Contribution maps of an example sequence",
}


def section_headings() -> dict[str, str]:
    """Section id → heading (every report has all of them, with a note where there is
    nothing); after the frequency section, the sections the measure groups declare
    (registry order: ``registry.Group.section``, built by report/group_sections.py)."""
    declared = {g.section.id: g.section.heading for g in GROUPS.values() if g.section}
    return {**_FIRST, **declared, **_LAST}


#: the sections of a report built with the registry as it is
SECTIONS = section_headings()


@dataclass
class Plot:
    section: str
    name: str  # file stem in --format png / svg / pdf (stable: kind and run id)
    title: str
    png: bytes
    vector: bytes | None = None  # the SVG or PDF document (--format svg / pdf)


def pct(x: float | None) -> H.Cell:
    """A ratio as a percentage cell (sortable by its value); empty for NULL."""
    if x is None:
        return H.Cell("")
    return H.Cell(f"{100 * x:.2f}", value=float(x), numeric=True)


def slug(text: str) -> str:
    """``text`` as a file-name stem (PNG names)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(text)).strip("_") or "run"


def short_model(model: str | None) -> str:
    """A model in titles and tables: a local directory by its last part, a hub id whole."""
    if not model:
        return ""
    return os.path.basename(model.rstrip("/")) if os.sep in model else model


def short_corpus(corpus: str | None) -> str:
    """A corpus in titles: each path by its file name (the ``runs`` view joins them)."""
    parts = [p.strip() for p in (corpus or "").split(",") if p.strip()]
    return ", ".join(os.path.basename(p.rstrip("/")) or p for p in parts)


def _title(run: dict[str, Any]) -> str:
    """What a reader of a figure needs to know: the model and corpus, then the job name
    and step where there are (the run id is added only where two titles would be equal)."""
    model = short_model(run.get("model")) or "unknown model"
    corpus = short_corpus(run.get("corpus"))
    parts = [f"{model} on {corpus}" if corpus else model]
    if run.get("name") and run["name"] != model:
        parts.append(str(run["name"]))
    if run.get("step") is not None:
        parts.append(f"step {run['step']}")
    return " · ".join(parts)


def label(run: dict[str, Any]) -> str:
    """A run in titles: model and corpus, name and step (:func:`_title`); the
    :class:`Report` sets ``title`` on each run, with the run id where titles collide."""
    return run.get("title") or _title(run)


def _titles(runs: list[dict[str, Any]]) -> None:
    """Set each run's ``title``: two runs that would read the same get their ids."""
    seen: dict[str, int] = {}
    for r in runs:
        seen[_title(r)] = seen.get(_title(r), 0) + 1
    for r in runs:
        t = _title(r)
        r["title"] = f"{t} · run {r['run_id']}" if seen[t] > 1 else t


def select_runs(root: str, run_ids: list[str] | None) -> list[RunRecord]:
    """The run records to report on, oldest first; clear errors for empty or unknown."""
    from mixscope.store.layout import Layout
    from mixscope.store.runs import load_runs

    if "://" not in root and not Path(root).is_dir():
        raise MixscopeError(f"results root {root} does not exist")
    layout = Layout.open(root)
    records = load_runs(layout)
    if not records:
        raise MixscopeError(f"no runs in {root} (run a job with `mixscope run` first)")
    known = sorted(r.run_id for r in records)  # by id: not by creation second
    if run_ids:
        unknown = [r for r in run_ids if r not in known]
        if unknown:
            raise MixscopeError(f"unknown run {unknown[0]!r} in {root}; runs: {', '.join(known)}")
        records = [r for r in records if r.run_id in run_ids]
    return records


class Report:
    """The report's sections over ``records``. ``con``: a views connection to reuse (it may
    see more runs; only ``records`` are shown). ``render=False`` keeps each figure as the
    matplotlib object in ``figures`` instead of rendering it (``Results.plot``).
    ``vector``: ``svg`` or ``pdf`` renders each figure as that document too, to be written
    beside the page under its plot name (the page links it)."""

    def __init__(
        self,
        root: str,
        records: list[RunRecord],
        reference: str | None,
        *,
        con: Any = None,
        render: bool = True,
        vector: str | None = None,
    ):
        from mixscope.sql.views import connect

        self.root = root
        self.reference = reference
        self.render = render
        self.vector = vector  # "svg" or "pdf": each figure also as a vector document
        self.figures: list[tuple[str, Any]] = []  # (section, Figure) when not rendering
        self.records = {r.run_id: r for r in records}
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
        _titles(self.runs)
        self.plots: list[Plot] = []
        self.sections = {k: H.Section(k, v) for k, v in section_headings().items()}
        self.measures = data.measures(self.con)  # the selected runs' measures

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
        from mixscope.report.plots import to_png, to_vector

        if not self.render:
            self.figures.append((section, fig))
            return ""
        vector = to_vector(fig, self.vector) if self.vector else None
        png = to_png(fig)
        self.plots.append(Plot(section, name, title, png, vector))
        link = f"{name}.{self.vector}" if self.vector else None
        fragment = H.figure(png, title, caption, link)
        if add:
            self.sections[section].add(fragment)
        return fragment

    def by_run(self, table: data.Rows) -> dict[str, data.Rows]:
        """Rows per run, in the report's run order."""
        out: dict[str, data.Rows] = {r["run_id"]: [] for r in self.runs}
        for r in table:
            out.setdefault(r["run_id"], []).append(r)
        return out
