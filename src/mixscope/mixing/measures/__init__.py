"""The measure groups' tensor code: one file per group, found from the registry.

The registry (``mixscope/registry.py``, torch-free) holds every group's metadata and the
one list of their names; this package maps each name to its tensor code, the file
``mixing/measures/<name>.py`` (its ``GROUP``): what the engine runs. The registry's
selection and column sets are re-exported here for the engine's side.
"""

from __future__ import annotations

import importlib
from typing import Any

from mixscope import registry
from mixscope.mixing.measures.base import MeasureGroup
from mixscope.registry import (
    ALL,
    CODES,
    DEFAULT_GROUPS,
    MeasureSet,
    Selection,
    all_columns,
    column,
    group_of,
    measure_set,
    parse_names,
    select,
    stored_measures_of,
)

__all__ = [
    "ALL",
    "CODES",
    "DEFAULT_GROUPS",
    "GROUPS",
    "MeasureGroup",
    "MeasureSet",
    "Selection",
    "all_columns",
    "column",
    "group_of",
    "measure_set",
    "parse_names",
    "resolved_measures",
    "select",
    "stored_measures_of",
]

#: every group's tensor code, in registry order: ``mixing/measures/<name>.py``'s ``GROUP``
GROUPS: dict[str, MeasureGroup] = {
    name: importlib.import_module(f"{__name__}.{name}").GROUP for name in registry.GROUPS
}


def resolved_measures(spec: str, names: Any, *, revision: str | None = None) -> Selection:
    """The measure groups a job on the model ``spec`` computes (``all`` expanded, a group
    that does not apply refused), from the model's config alone: no weights load (the run's
    identity needs it before any worker starts)."""
    from mixscope.models.adapters import adapter_for_config
    from mixscope.models.resolve import config_facts

    return select(names, adapter_for_config(config_facts(spec, revision=revision)))
