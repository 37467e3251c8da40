"""pyarrow tables as DataFrames: ``mixscope.to_pandas(t)`` / ``mixscope.to_polars(t)``.

Every table mixscope returns (``analyze``, ``Results.query`` / ``.sql`` / ``.runs``) is
pyarrow, and pyarrow converts by itself (``t.to_pandas()``, ``polars.from_arrow(t)``). These
two do the same, but a missing library is one line that names the extra to install instead
of an ``ImportError`` from inside pyarrow: pandas and polars are extras, not dependencies.
"""

from __future__ import annotations

import importlib
from typing import Any

from mixscope.errors import MixscopeError


def _library(name: str, caller: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        raise MixscopeError(
            f'{caller} needs {name}, which is not installed: pip install "mixscope[{name}]"'
        ) from None


def to_pandas(table: Any) -> Any:
    """A ``pandas.DataFrame`` of a pyarrow table (the ``pandas`` extra)."""
    _library("pandas", "to_pandas")
    return table.to_pandas()


def to_polars(table: Any) -> Any:
    """A ``polars.DataFrame`` of a pyarrow table, zero-copy where polars can (the
    ``polars`` extra)."""
    return _library("polars", "to_polars").from_arrow(table)
