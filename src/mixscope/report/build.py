"""``build_report``: from a results root to one self-contained HTML page, to PNG files, or
to the page with SVG / PDF figures beside it (``--format svg`` / ``pdf``, for papers).

Sections, in order: runs, summary (Table 2), per-layer curves, token types × layer
(Figure 3), frequency rank vs ratio (Figure 4, with ρ), the sections the measure groups
declare in the registry (the first position: runs with the ``sink`` group; how far each
layer reaches: runs with the ``distance`` group), the scopes through the block (runs with
the ``ff`` group), checkpoint
trend (models with several steps), the comparison of two runs (``--compare A B``,
report/comparison.py), contribution maps of one example sequence per layer (Figure 1).
The same figures, not rendered, are what :meth:`mixscope.results.Results.plot` returns
(report/figures.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from mixscope import __version__
from mixscope.errors import MixscopeError
from mixscope.report import data
from mixscope.report import html as H
from mixscope.report.context import SECTIONS, Plot, Report, select_runs
from mixscope.store.atomic import write_text

__all__ = ["SECTIONS", "Built", "Plot", "build_report", "select_runs"]

FORMATS = ("html", "png", "svg", "pdf")
#: the formats that write the page and, beside it, one vector file per figure
VECTOR = ("svg", "pdf")


@dataclass
class Built:
    """What was written: the page (html), the files (png), or the page and its vector
    figures (svg, pdf: ``files`` lists the page first); and every plot."""

    output: str
    files: list[str] = field(default_factory=list)
    plots: list[Plot] = field(default_factory=list)
    sections: list[H.Section] = field(default_factory=list)


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
    example: int | None = None,
) -> Built:
    """Build the report of ``root`` (the given runs, default all) and write it to ``output``.

    ``fmt="html"``: one self-contained page (default ``report.html``). ``fmt="png"``: one
    PNG per plot plus ``summary.csv`` in the directory ``output`` (default ``report``).
    ``fmt="svg"`` / ``"pdf"``: the page (PNG figures, so it stays one file to open) and
    one vector file per plot, ``NAME.svg`` / ``NAME.pdf`` under the PNG mode's names, plus
    ``summary.csv``, all in one folder: ``output`` when it is a directory (default
    ``report``, the page ``report.html`` in it), or the folder of ``output`` ending in
    ``.html``: figures for a paper, beside the page that shows them.
    ``compare``: two runs (ids or unique prefixes) drawn side by side; they join ``run_ids``.
    ``example``: the document of the contribution maps (default: the first with at least
    20 tokens); an id a shown run lacks is an error naming its ids, before any drawing.
    """
    from mixscope.report.comparison import compare_section, with_compared
    from mixscope.report.components import component_section
    from mixscope.report.contributions import check_example, contributions_section
    from mixscope.report.frequency import frequency_section
    from mixscope.report.group_sections import group_sections
    from mixscope.report.layers import layer_sections
    from mixscope.report.table_sections import runs_section, summary_section
    from mixscope.report.trend import trend_section
    from mixscope.store.unreadable import naming_unreadable

    if fmt not in FORMATS:
        raise MixscopeError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    with naming_unreadable(root):  # a damaged file: one line naming it
        run_ids, compare = with_compared(root, run_ids, compare)
        records = select_runs(root, list(run_ids) if run_ids else None)
        rep = Report(root, records, reference, vector=fmt if fmt in VECTOR else None)
        if examples:
            check_example(rep, example)
        runs_section(rep)
        summary = summary_section(rep)
        layer_sections(rep)
        frequency_section(rep)
        group_sections(rep)  # the groups' own (registry.Group.section)
        component_section(rep)
        trend_section(rep)
        compare_section(rep, compare)
        contributions_section(rep, examples, example)
    sections = list(rep.sections.values())

    if fmt == "html":
        out = Path(output or "report.html")
        if out.is_dir():
            out = out / "report.html"
        _page(rep, root, out, sections)
        return Built(str(out), [str(out)], rep.plots, sections)
    if fmt in VECTOR:
        return _vector(rep, root, output, fmt, summary, sections)

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


def _page(rep: Report, root: str, out: Path, sections: list[H.Section]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    meta = (
        f"mixscope {__version__} · {root} · {len(rep.runs)} run(s) · "
        f"measures {', '.join(rep.measures)} · built {stamp}"
    )
    write_text(out, H.page("mixscope report", meta, sections))


def _vector(
    rep: Report,
    root: str,
    output: str | None,
    fmt: str,
    summary: data.Rows,
    sections: list[H.Section],
) -> Built:
    """The page, then every figure as ``NAME.<fmt>`` and ``summary.csv`` beside it."""
    target = Path(output or "report")
    if target.suffix.lower() in (".html", ".htm"):
        page, folder = target, target.parent
    else:
        if target.exists() and not target.is_dir():
            raise MixscopeError(
                f"--format {fmt} writes into a directory (or a .html page); {target} is a file"
            )
        page, folder = target / "report.html", target
    folder.mkdir(parents=True, exist_ok=True)
    _page(rep, root, page, sections)
    files = [str(page)]
    for p in rep.plots:
        path = folder / f"{p.name}.{fmt}"
        path.write_bytes(p.vector or b"")
        files.append(str(path))
    csv = folder / "summary.csv"
    csv.write_text(_summary_csv(summary), encoding="utf-8")
    files.append(str(csv))
    return Built(str(page), files, rep.plots, sections)
