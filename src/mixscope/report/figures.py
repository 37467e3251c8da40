"""The report's figures as matplotlib objects, section by section (``Results.plot``).

The very section functions that build the report (on a ``report.context.Report`` that
does not render) make them, so a notebook's figure is the report's figure.
"""

from __future__ import annotations

from typing import Any

from mixscope.errors import MixscopeError

#: the sections with figures (layers and token types are drawn together)
SECTIONS = (
    "layers",
    "token-types",
    "frequency",
    "sink",
    "distance",
    "components",
    "trend",
    "compare",
    "contributions",
)


def figures(
    root: str,
    con: Any,
    name: str,
    *,
    run_ids: list[str] | None = None,
    reference: str | None = None,
    compare: tuple[str, str] | None = None,
) -> list[Any]:
    """The ``Figure`` objects of section ``name`` for ``run_ids`` (default: all runs that
    ``con`` sees), in the report's order. ``con``: a views connection over ``root``."""
    from mixscope.report.comparison import compare_section, with_compared
    from mixscope.report.components import component_section
    from mixscope.report.context import Report, select_runs
    from mixscope.report.contributions import contributions_section
    from mixscope.report.distance import distance_section
    from mixscope.report.frequency import frequency_section
    from mixscope.report.layers import layer_sections, sink_section
    from mixscope.report.plots import pyplot
    from mixscope.report.trend import trend_section

    if name not in SECTIONS:
        raise MixscopeError(f"no plot named {name!r}; plots: {', '.join(SECTIONS)}")
    run_ids, compare = with_compared(root, run_ids, compare)
    rep = Report(root, select_runs(root, run_ids), reference, con=con, render=False)
    draw = {
        "layers": layer_sections,
        "token-types": layer_sections,
        "frequency": frequency_section,
        "sink": sink_section,
        "distance": distance_section,
        "components": component_section,
        "trend": trend_section,
        "compare": lambda r: compare_section(r, compare),
        "contributions": lambda r: contributions_section(r, True),
    }
    draw[name](rep)
    plt = pyplot()
    out = []
    for section, fig in rep.figures:
        if section == name:
            out.append(fig)
        else:  # drawn alongside (per-layer curves and token types): not asked for
            plt.close(fig)
    return out
