"""The registry of measure groups: one file per group, everything else generated from here.

``GROUPS`` is in registry order, which is append-only: a stored measure's ``code`` (its
index among every group's stored columns, in this order) is what the histogram files
store in their ``measure`` column, so a run written before a group existed reads the same.
Selection (``analysis.measures``, ``--measures``, ``analyze(measures=…)``) resolves group
names — or ``all``, every group that applies to the model — into a :class:`MeasureSet`,
the columns a run computes and stores. Torch-free: the schemas, the SQL views and the CLI
read it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mixscope.choices import (
    ALL_GROUPS,
    DEFAULT_MEASURE_GROUPS,
    MEASURE_GROUPS,
    parse_measure_groups,
)
from mixscope.errors import SpecError
from mixscope.mixing.measures import distance, ff, globenc, learned_sink, paper, sink
from mixscope.mixing.measures.base import Column, MeasureGroup

if TYPE_CHECKING:
    from mixscope.models.adapters import Adapter

#: every group, in registry order (append new groups at the end: stored codes follow it)
GROUPS: dict[str, MeasureGroup] = {
    g.name: g
    for g in (
        paper.GROUP,
        globenc.GROUP,
        sink.GROUP,
        ff.GROUP,
        learned_sink.GROUP,
        distance.GROUP,
    )
}
if tuple(GROUPS) != MEASURE_GROUPS:  # pragma: no cover - caught by any test run
    raise ImportError(f"choices.MEASURE_GROUPS {MEASURE_GROUPS} != the registry {tuple(GROUPS)}")
#: what a job computes when it names no groups (runs written before groups existed)
DEFAULT_GROUPS = DEFAULT_MEASURE_GROUPS
#: the selection word for every group that applies to the model
ALL = ALL_GROUPS


def all_columns() -> tuple[Column, ...]:
    """Every group's columns, in registry order."""
    return tuple(c for g in GROUPS.values() for c in g.columns)


def column(name: str) -> Column:
    """A column by name (any group)."""
    for c in all_columns():
        if c.name == name:
            return c
    raise KeyError(name)


#: the stable code of every stored measure (histogram files' ``measure`` column)
CODES: dict[str, int] = {
    c.name: k for k, c in enumerate(c for c in all_columns() if c.derived is None)
}


def group_of(measure: str) -> str:
    """The group a column belongs to."""
    for g in GROUPS.values():
        if any(c.name == measure for c in g.columns):
            return g.name
    raise KeyError(measure)


#: names → groups (the closed set and the parsing live in choices.py, for config/)
parse_names = parse_measure_groups


@dataclass(frozen=True)
class Selection:
    """Groups resolved for one model: those that run, and those ``all`` skipped (why)."""

    groups: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...] = ()

    @property
    def noteworthy_skips(self) -> dict[str, str]:
        """The skipped groups a user is told of: not those that measure a feature only some
        families have (``learned_sink`` on a model without learned sinks)."""
        return {n: r for n, r in self.skipped if not GROUPS[n].feature_of_some_families}

    @property
    def measures(self) -> MeasureSet:
        return measure_set(self.groups)


def select(value: str | Iterable[str] | None, adapter: Adapter) -> Selection:
    """The groups of ``value`` for the model ``adapter`` describes. A group named
    explicitly that does not apply is refused (one line naming it and why); ``all``
    skips it and says so in ``skipped``."""
    names = parse_names(value)
    if names == (ALL,):
        reasons = {n: g.unsupported(adapter) for n, g in GROUPS.items()}
        return Selection(
            tuple(n for n, r in reasons.items() if r is None),
            tuple((n, r) for n, r in reasons.items() if r is not None),
        )
    for n in names:
        reason = GROUPS[n].unsupported(adapter)
        if reason is not None:
            raise SpecError(f"measures: group {n!r} does not apply to this model: {reason}")
    return Selection(names)


@dataclass(frozen=True)
class MeasureSet:
    """The columns of a set of groups, in registry order: what a run computes and stores."""

    groups: tuple[str, ...]
    columns: tuple[str, ...] = field(init=False)
    stored: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        cols = [c for n in self.groups for c in GROUPS[n].columns]
        object.__setattr__(self, "columns", tuple(c.name for c in cols))
        object.__setattr__(self, "stored", tuple(c.name for c in cols if c.derived is None))

    @property
    def derived(self) -> dict[str, tuple[str, float]]:
        """Derived column → (its stored source, factor)."""
        return {c: d for c in self.columns if (d := column(c).derived) is not None}

    @property
    def pair(self) -> tuple[str, ...]:
        """The columns with per-pair contribution maps."""
        return tuple(c for c in self.columns if column(c).pair)

    @property
    def codes(self) -> tuple[int, ...]:
        """The stable code of each stored column (histogram files)."""
        return tuple(CODES[m] for m in self.stored)

    def stored_index(self) -> list[int]:
        """Where each stored column sits in ``columns`` (the engine's measure axis)."""
        return [self.columns.index(m) for m in self.stored]


@functools.cache
def measure_set(groups: tuple[str, ...] = DEFAULT_GROUPS) -> MeasureSet:
    """The (cached) :class:`MeasureSet` of ``groups``, put in registry order."""
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        raise SpecError(f"unknown measure group {unknown[0]!r}; groups: {', '.join(GROUPS)}")
    return MeasureSet(tuple(n for n in GROUPS if n in groups))


def stored_measures_of(names: Iterable[str]) -> tuple[str, ...]:
    """The stored measures among column names such as ``<measure>_sum`` or ``<measure>`` (a
    file's schema), in registry order: what a file written by any run holds."""
    present = set(names)
    out = []
    for m in CODES:
        if m in present or any(
            n.startswith(m + "_") and n[len(m) + 1 :] in _STATS for n in present
        ):
            out.append(m)
    return tuple(out)


#: the suffixes of a stored measure's statistics columns (store/schema.py)
_STATS = frozenset({"sum", "sumsq", "min", "max", "seq_sum", "seq_sumsq"})


def resolved_measures(spec: str, names: Any, *, revision: str | None = None) -> Selection:
    """The measure groups a job on the model ``spec`` computes (``all`` expanded, a group
    that does not apply refused), from the model's config alone: no weights load (the run's
    identity needs it before any worker starts)."""
    from mixscope.models.adapters import adapter_for_config
    from mixscope.models.resolve import config_facts

    return select(names, adapter_for_config(config_facts(spec, revision=revision)))
