"""The report's figures as matplotlib objects, section by section (``Results.plot``).

The very section functions that build the report (on a ``report.context.Report`` that
does not render) make them, so a notebook's figure is the report's figure.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from mixscope.errors import MixscopeError
from mixscope.registry import GROUPS

if TYPE_CHECKING:
    from mixscope.report.context import Report


def plot_names() -> tuple[str, ...]:
    """The sections with figures (layers and token types are drawn together); the measure
    groups' own sections (``registry.Group.section``) after the frequency one."""
    declared = (g.section.id for g in GROUPS.values() if g.section is not None)
    return ("layers", "token-types", "frequency", *declared, *_LAST)


_LAST = ("components", "trend", "compare", "contributions")
#: the plot names with the registry as it is
SECTIONS = plot_names()


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
    from mixscope.report.frequency import frequency_section
    from mixscope.report.group_sections import declared, group_section
    from mixscope.report.layers import layer_sections
    from mixscope.report.plots import pyplot
    from mixscope.report.trend import trend_section

    if name not in plot_names():
        raise MixscopeError(f"no plot named {name!r}; plots: {', '.join(plot_names())}")
    run_ids, compare = with_compared(root, run_ids, compare)
    rep = Report(root, select_runs(root, run_ids), reference, con=con, render=False)
    draw: dict[str, Callable[[Report], None]] = {
        "layers": layer_sections,
        "token-types": layer_sections,
        "frequency": frequency_section,
        **{sid: partial(group_section, group=g) for sid, g in declared().items()},
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
