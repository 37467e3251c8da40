"""mixscope: corpus-scale context-mixing analysis of Transformer language models.

The package root stays import-light (no torch) so that ``mixscope --help`` is fast;
``analyze`` and ``contribution_maps`` are loaded on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mixscope._version import __version__

__all__ = ["MEASURES", "__version__", "analyze", "contribution_maps"]

MEASURES = ("attn_w", "attn_n", "attnres_w", "attnres_n", "attnresln_n")

if TYPE_CHECKING:  # pragma: no cover
    from mixscope.api import analyze, contribution_maps


def __getattr__(name: str) -> Any:
    if name in ("analyze", "contribution_maps"):
        from mixscope import api

        return getattr(api, name)
    raise AttributeError(f"module 'mixscope' has no attribute {name!r}")
