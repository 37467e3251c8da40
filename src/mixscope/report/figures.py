"""The report's figures as matplotlib objects, section by section (``Results.plot``).

The very code that builds the report (``report.build._Report``, not rendering) makes
them, so a notebook's figure is the report's figure.
"""

from __future__ import annotations

from typing import Any

from mixscope.errors import MixscopeError

#: section → the ``_Report`` method that draws it (layers and token types come together;
#: compare and contributions take arguments)
SECTIONS = {
    "layers": "layer_sections",
    "token-types": "layer_sections",
    "frequency": "frequency_section",
    "trend": "trend_section",
    "compare": "",
    "contributions": "",
}


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
    from mixscope.report.build import _Report, select_runs
    from mixscope.report.comparison import compare_section, with_compared
    from mixscope.report.plots import pyplot

    if name not in SECTIONS:
        raise MixscopeError(f"no plot named {name!r}; plots: {', '.join(SECTIONS)}")
    run_ids, compare = with_compared(root, run_ids, compare)
    rep = _Report(root, select_runs(root, run_ids), reference, con=con, render=False)
    if name == "compare":
        compare_section(rep, compare)
    elif name == "contributions":
        rep.contributions_section(True)
    else:
        getattr(rep, SECTIONS[name])()
    plt = pyplot()
    out = []
    for section, fig in rep.figures:
        if section == name:
            out.append(fig)
        else:  # drawn alongside (per-layer curves and token types): not asked for
            plt.close(fig)
    return out
