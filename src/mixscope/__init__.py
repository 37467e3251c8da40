"""mixscope: corpus-scale context-mixing analysis of Transformer language models.

The package root stays import-light (no torch) so that ``mixscope --help`` is fast;
``analyze``, ``contribution_maps``, ``open`` (the results API, ``mixscope.results``) and
``to_pandas`` / ``to_polars`` (``mixscope.frames``) are loaded on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mixscope._version import __version__
from mixscope.registry import DEFAULT, measure_groups

__all__ = [
    "MEASURES",
    "Results",
    "__version__",
    "analyze",
    "contribution_maps",
    "measure_groups",
    "open",
    "to_pandas",
    "to_polars",
]

#: the default selection's columns (the paper's group)
MEASURES = DEFAULT.columns

if TYPE_CHECKING:  # pragma: no cover
    from mixscope.api import analyze, contribution_maps
    from mixscope.frames import to_pandas, to_polars
    from mixscope.results import Results, open


def __dir__() -> list[str]:
    """The public API, the lazily loaded names included (``dir(mixscope)``, completion)."""
    return sorted(__all__)


def __getattr__(name: str) -> Any:
    if name in ("analyze", "contribution_maps"):
        from mixscope import api

        return getattr(api, name)
    if name in ("to_pandas", "to_polars"):
        from mixscope import frames

        return getattr(frames, name)
    if name in ("open", "Results"):
        from mixscope import results

        return getattr(results, name)
    raise AttributeError(f"module 'mixscope' has no attribute {name!r}")
