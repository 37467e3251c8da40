"""Arrow tables of statistics from numpy columns, in a kind's column order and types."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from mixscope.store.schema import StatsKind


def kind_table(
    kind: StatsKind,
    columns: dict[str, np.ndarray | pa.Array],
    singleton: np.ndarray | None = None,
) -> pa.Table:
    """The working table (float64 sums) of the given columns, in the kind's column order;
    numpy columns are cast to the field's type first (numpy casts are several times
    faster than Arrow's checked ones). ``singleton`` [rows]: the rows with ``n = 1``, whose
    ``kind.singletons`` columns are left NULL (``stats/singletons.py``)."""
    fields = [f for f in kind.schema if f.name in columns]
    nulls = kind.singleton_columns
    arrays = []
    for f in fields:
        c = columns[f.name]
        if isinstance(c, np.ndarray):
            c = np.ascontiguousarray(c, dtype=f.type.to_pandas_dtype())
        mask = singleton if singleton is not None and f.name in nulls else None
        arrays.append(pa.array(c, f.type, mask=mask))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=kind.schema.metadata))


def measure_columns(stats: dict[str, Any], stored: tuple[str, ...]) -> dict[str, np.ndarray]:
    """``{stat: [measure, keys, layers]}`` (an array, or a list of one [keys, layers] array
    per measure of ``stored``) → ``{"<measure>_<stat>": [keys · layers], …}`` (key-major,
    layer-minor rows)."""
    return {
        f"{m}_{stat}": arr[k].reshape(-1)
        for k, m in enumerate(stored)
        for stat, arr in stats.items()
    }
