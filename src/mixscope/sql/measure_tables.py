"""The measures a results root holds, for the views and the named queries.

A root may hold runs of different measure groups (``analysis.measures``). The views get a
column (``tokens``, ``occurrences``) or rows (the statistics views, long by measure) for
every measure of the runs they read, NULL or absent where a run has not the measure; the
tables here say which measures there are:

- ``measures``: one row per measure of the selected runs (registry order): ``ord``,
  ``measure``, ``source`` (the stored measure it is read from: itself, or a derived
  measure's source), ``grp`` (its group), ``label`` and ``stored``;
- ``run_measures``: one row per run and measure it has (``run_id``, ``measure``, ``grp``).

The named queries' measure lists are expanded from ``measures`` (sql/named.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from mixscope.registry import DEFAULT_GROUPS, GROUPS, MeasureSet, column, measure_set

_RUN = re.compile(r"run_id=([^/]+)/")


def runs_in(paths: Iterable[str]) -> list[str]:
    """The run ids of hive-partitioned file paths (``…/run_id=<id>/…``), first seen first."""
    out: dict[str, None] = {}
    for p in paths:
        m = _RUN.search(p)
        if m:
            out.setdefault(m.group(1), None)
    return list(out)


def measures_of_runs(sets: Iterable[MeasureSet]) -> MeasureSet:
    """The union of runs' measure sets (registry order); the default where there is none."""
    groups = {g for s in sets for g in s.groups}
    return measure_set(tuple(groups) if groups else DEFAULT_GROUPS)


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def create_measure_tables(con: Any, per_run: dict[str, MeasureSet]) -> None:
    """``measures`` and ``run_measures`` (see the module docstring) on ``con``."""
    union = measures_of_runs(per_run.values())
    derived = union.derived
    rows = []
    for k, m in enumerate(union.columns):
        c = column(m)
        source = derived.get(m, (m,))[0]
        group = next(g for g in union.groups if m in (x.name for x in GROUPS[g].columns))
        rows.append(
            f"({k}, {_quote(m)}, {_quote(source)}, {_quote(group)}, {_quote(c.label)}, "
            f"{'true' if c.derived is None else 'false'})"
        )
    con.execute(
        "CREATE TABLE measures AS SELECT * FROM (VALUES "
        + ", ".join(rows)
        + ") AS m(ord, measure, source, grp, label, stored)"
    )
    pairs = [
        f"({_quote(run)}, {_quote(m)}, {_quote(g)})"
        for run, ms in per_run.items()
        for g in ms.groups
        for m in (c.name for c in GROUPS[g].columns)
    ]
    values = ", ".join(pairs) or "(NULL, NULL, NULL)"
    con.execute(
        f"CREATE TABLE run_measures AS SELECT * FROM (VALUES {values}) AS r(run_id, measure, grp)"
        + ("" if pairs else " WHERE false")
    )
