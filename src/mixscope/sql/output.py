"""Query results to the terminal or a file: aligned table, CSV, JSON, Parquet.

JSON is an array of objects, one per row, keys = the result's columns in order (a named
query's ``columns`` header: its contract): strict JSON (NaN and infinities are ``null``),
integers stay integers (DuckDB's HUGEINT sums included), timestamps are ISO 8601 strings.
Parquet keeps DuckDB's own Arrow types, as :meth:`mixscope.results.Results.query` returns.
"""

from __future__ import annotations

import json
import math
from typing import Any

from mixscope.errors import MixscopeError
from mixscope.store.atomic import replacing

FORMATS = ("table", "csv", "json", "parquet")


def to_arrow(cur: Any) -> Any:
    """The rest of a DuckDB result as a ``pyarrow.Table`` with DuckDB's column types."""
    import warnings

    with warnings.catch_warnings():  # "an extra copy of the rows": fine for results
        warnings.simplefilter("ignore")
        return cur.to_arrow_table()


def _clean(v: Any) -> Any:
    """NaN and ±inf → None (strict JSON has neither), inside LIST and STRUCT values too."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, list | tuple):
        return [_clean(x) for x in v]
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    return v


def _json_value(v: Any) -> Any:
    """What ``json`` cannot write itself: DuckDB's Decimal, dates, times, UUIDs, blobs."""
    import datetime
    import decimal

    if isinstance(v, decimal.Decimal):
        if not v.is_finite():
            return None
        return int(v) if v == v.to_integral_value() else float(v)
    if isinstance(v, datetime.date | datetime.time):
        return v.isoformat()
    if isinstance(v, bytes | bytearray | memoryview):
        return bytes(v).hex()
    return str(v)


def _json_rows(headers: list[str], rows: list[tuple]) -> list[dict[str, Any]]:
    return [{h: _clean(v) for h, v in zip(headers, r, strict=True)} for r in rows]


def render(cur: Any, fmt: str, output: str | None) -> str | None:
    """Text for stdout, or None when written to ``output``."""
    if fmt not in FORMATS:
        raise MixscopeError(f"unknown format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    headers = [d[0] for d in cur.description]
    if fmt == "parquet":
        if not output:
            raise MixscopeError("--format parquet needs --output FILE")
        import pyarrow.parquet as pq

        table = to_arrow(cur)
        with replacing(output) as tmp:
            pq.write_table(table, tmp, compression="zstd")
        return None
    rows = cur.fetchall()
    if fmt == "table":
        from mixscope.format import aligned_table

        text = aligned_table(
            headers, [[("" if v is None else v) for v in r] for r in rows], digits=4
        )
        text += f"\n({len(rows)} row{'s' if len(rows) != 1 else ''})"
    elif fmt == "json":
        text = json.dumps(_json_rows(headers, rows), default=_json_value, indent=1, allow_nan=False)
    elif fmt == "csv":
        import csv
        import io

        buf = io.StringIO()
        writer = csv.writer(buf)
        writer.writerow(headers)
        writer.writerows(rows)
        text = buf.getvalue().rstrip("\n")
    if output:
        with replacing(output) as tmp:
            tmp.write_text(text + "\n", encoding="utf-8")
        return None
    return text
