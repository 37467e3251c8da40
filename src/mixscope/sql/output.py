"""Query results to the terminal or a file: aligned table, CSV, JSON, Parquet."""

from __future__ import annotations

import json
import math
from typing import Any

from mixscope.errors import MixscopeError
from mixscope.store.atomic import replacing

FORMATS = ("table", "csv", "json", "parquet")


def _arrow(headers: list[str], rows: list[tuple]) -> Any:
    import pyarrow as pa

    return pa.table({h: [r[k] for r in rows] for k, h in enumerate(headers)})


def _clean(v: Any) -> Any:
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def render(cur: Any, fmt: str, output: str | None) -> str | None:
    """Text for stdout, or None when written to ``output``."""
    if fmt not in FORMATS:
        raise MixscopeError(f"unknown format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    headers = [d[0] for d in cur.description]
    rows = cur.fetchall()
    if fmt == "parquet" and not output:
        raise MixscopeError("--format parquet needs --output FILE")
    if fmt == "table":
        from mixscope.format import aligned_table

        text = aligned_table(
            headers, [[("" if v is None else v) for v in r] for r in rows], digits=4
        )
        text += f"\n({len(rows)} row{'s' if len(rows) != 1 else ''})"
    elif fmt == "json":
        text = json.dumps(
            [{h: _clean(v) for h, v in zip(headers, r, strict=True)} for r in rows],
            default=str,
            indent=1,
        )
    elif fmt == "csv":
        import csv
        import io

        buf = io.StringIO()
        writer = csv.writer(buf)
        writer.writerow(headers)
        writer.writerows(rows)
        text = buf.getvalue().rstrip("\n")
    else:
        text = ""
    if output:
        with replacing(output) as tmp:
            if fmt == "parquet":
                import pyarrow.parquet as pq

                pq.write_table(_arrow(headers, rows), tmp, compression="zstd")
            else:
                tmp.write_text(text + "\n", encoding="utf-8")
        return None
    return text
