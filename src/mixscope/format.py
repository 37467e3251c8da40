"""Plain-text tables for the terminal (no heavy imports)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _cell(v: Any, digits: int) -> str:
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    if isinstance(v, bool):
        return "yes" if v else ""
    return str(v)


def aligned_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], digits: int = 4) -> str:
    """Columns padded to their widest cell; numbers right-aligned, text left-aligned."""
    cells = [[_cell(v, digits) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[k]) for r in cells)]) for k, h in enumerate(headers)]
    numeric = [
        bool(rows)
        and all(isinstance(r[k], int | float) and not isinstance(r[k], bool) for r in rows)
        for k in range(len(headers))
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    out = [line(list(headers)), line(["-" * w for w in widths])]
    out += [line(r) for r in cells]
    return "\n".join(out)
