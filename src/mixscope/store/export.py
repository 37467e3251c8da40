"""A results table to a file the user names: Parquet or CSV, written atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mixscope.errors import MixscopeError

#: the suffixes ``mixscope analyze --output`` writes
TABLE_SUFFIXES = (".parquet", ".csv")


def table_suffix(output: str) -> str:
    """The format ``output`` names by its suffix; a one-line error for any other, so a
    command can refuse a bad name before it computes anything."""
    suffix = Path(output).suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        raise MixscopeError(f"--output must end in .parquet or .csv, got {output!r}")
    return suffix


def write_table(table: Any, output: str) -> None:
    """``table`` (pyarrow) to ``output``: zstd Parquet, or CSV with tokens as plain strings
    (CSV has no dictionary type). Readers never see a half-written file (store/atomic.py)."""
    suffix = table_suffix(output)
    from mixscope.store.atomic import replacing

    with replacing(Path(output)) as tmp:
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            pq.write_table(table, tmp, compression="zstd")
        else:
            import pyarrow as pa
            import pyarrow.csv as pcsv

            plain = table.set_column(
                table.schema.get_field_index("token"), "token", table["token"].cast(pa.string())
            )
            pcsv.write_csv(plain, tmp)
