"""The default measure set's names: a torch-free view of the registry (``mixing/measures/``).

The names belong to their groups' files; this module only names the *default* selection
(the paper's group, what a job computes when it selects none), for the package root
(``mixscope.MEASURES``) and readers of runs that predate measure groups. A run's own
columns are its :class:`~mixscope.mixing.measures.MeasureSet`.
"""

from __future__ import annotations

from mixscope.mixing.measures import DEFAULT_GROUPS, measure_set

_DEFAULT = measure_set(DEFAULT_GROUPS)
#: the default selection's columns, in the order every table and query uses
MEASURE_COLUMNS = _DEFAULT.columns
#: derived exactly from a stored one: name → (source, factor)
DERIVED_MEASURES = _DEFAULT.derived
#: the default selection's stored measures (detail lists, statistics, histograms)
STORED_MEASURES = _DEFAULT.stored
#: the per-pair contribution norms of contribution maps
PAIR_MEASURES = _DEFAULT.pair


def measure_groups() -> dict[str, tuple[str, ...]]:
    """Every measure group (``analysis.measures``) and its columns, in registry order."""
    from mixscope.mixing.measures import GROUPS

    return {name: tuple(c.name for c in g.columns) for name, g in GROUPS.items()}
