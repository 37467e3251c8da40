"""The sections a measure group declares (``registry.Group.section``): one figure per run
that has the group, drawn from a named query, with a note where no run has it.

A group with a figure of its own (the first position: ``sink``; how far each layer
reaches: ``distance``) states it in the registry — section id, heading, query, figure
function, title, paragraph — and the report, ``Results.plot`` and the section list
follow from there: adding one is its registry entry and its figure function.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from mixscope.registry import GROUPS, Group, Section
from mixscope.report import data
from mixscope.report import html as H
from mixscope.report.context import Report, label, slug


def declared() -> dict[str, Group]:
    """Section id → the group that declares it, in registry order."""
    return {g.section.id: g for g in GROUPS.values() if g.section is not None}


def _figure(section: Section) -> Callable[[list[dict], str], Any]:
    module, name = section.figure.split(":")
    return getattr(importlib.import_module(module), name)


def group_section(rep: Report, group: Group) -> None:
    """The section ``group`` declares, on ``rep``."""
    sec = group.section
    assert sec is not None
    s = rep.sections[sec.id]
    have = data.runs_with_group(rep.con, group.name)
    runs = [r for r in rep.runs if r["run_id"] in have]
    if not runs:
        s.add(
            H.note(
                f"No run here has the {group.name} group (--measures paper,{group.name} or all)."
            )
        )
        return
    s.add(H.paragraph(sec.intro))
    profile = rep.by_run(data.named(rep.con, sec.query))
    draw = _figure(sec)
    figures = []
    for run in runs:
        rid, name = run["run_id"], label(run)
        fig = draw(profile.get(rid, []), f"{sec.title}\n{name}")
        figures.append(
            rep.plot(sec.id, f"{sec.id}-{slug(rid)}", f"{sec.id}, {name}", fig, add=False)
        )
    s.add(H.grid(figures))


def group_sections(rep: Report) -> None:
    """Every declared section, in registry order."""
    for group in declared().values():
        group_section(rep, group)
