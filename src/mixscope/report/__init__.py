"""The report: the paper's tables and figures for a results root, as one HTML page or PNGs.

``data`` (the SQL it needs), ``example`` (an example sequence's contribution maps),
``plots`` (matplotlib figures), ``html`` (the self-contained page), ``build``
(:func:`build_report`). Importing this package imports neither matplotlib nor torch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["build_report"]


def build_report(*args: Any, **kwargs: Any) -> Any:
    from mixscope.report.build import build_report as _build

    return _build(*args, **kwargs)
