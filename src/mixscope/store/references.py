"""Imported reference frequency tables (``mixscope frequencies import``).

A reference corpus's token counts, so frequency analyses can rank tokens by a large
reference corpus rather than by the analysed one. Accepted files: ``count token`` lines
(whitespace separated, e.g. the output of ``sort | uniq -c``), or CSV/TSV/Parquet with
``count`` and ``token`` and/or ``token_id`` columns (``rank`` is recomputed).
Stored as ``ROOT/references/name=<NAME>/part-000000.parquet``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa

from mixscope.errors import MixscopeError
from mixscope.store.layout import Layout
from mixscope.store.writer import write_parquet

REFERENCE_SCHEMA = pa.schema(
    [("token_id", pa.int32()), ("token", pa.string()), ("count", pa.int64())]
)
COUNT_TOKEN_LINE = re.compile(r"^\s*\d+ +\S")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def reference_file(layout: Layout, name: str) -> str:
    return f"{layout.base}/references/name={name}/part-000000.parquet"


def _from_columns(table: pa.Table, source: str) -> pa.Table:
    names = [n.lower().strip() for n in table.column_names]
    table = table.rename_columns(names)
    if "count" not in names or not ({"token", "token_id"} & set(names)):
        raise MixscopeError(
            f"{source}: needs a count column and a token or token_id column "
            f"(found: {', '.join(names)})"
        )
    n = table.num_rows
    try:
        count = table["count"].cast(pa.int64())
        token_id = (
            table["token_id"].cast(pa.int32()) if "token_id" in names else pa.nulls(n, pa.int32())
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise MixscopeError(f"{source}: count and token_id must be integers ({exc})") from None
    token = table["token"].cast(pa.string()) if "token" in names else pa.nulls(n, pa.string())
    return pa.Table.from_arrays([token_id, token, count], schema=REFERENCE_SCHEMA)


def _from_count_token_lines(path: Path) -> pa.Table:
    counts, tokens = [], []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        parts = line.strip().split(None, 1)
        if len(parts) != 2 or not parts[0].isdigit():
            raise MixscopeError(
                f"{path}:{lineno}: expected 'count token', got {line.strip()[:60]!r}"
            )
        counts.append(int(parts[0]))
        tokens.append(parts[1])
    return pa.Table.from_arrays(
        [
            pa.nulls(len(counts), pa.int32()),
            pa.array(tokens, pa.string()),
            pa.array(counts, pa.int64()),
        ],
        schema=REFERENCE_SCHEMA,
    )


def read_reference(path: str) -> pa.Table:
    p = Path(path)
    if not p.is_file():
        raise MixscopeError(f"frequency file {path} does not exist")
    suffix = p.suffix.lower()
    if suffix in (".parquet", ".pq"):
        import pyarrow.parquet as pq

        return _from_columns(pq.read_table(p), path)
    head = p.read_text(encoding="utf-8", errors="replace").splitlines()[:1]
    first = head[0] if head else ""
    # 'count token' lines first: the top line of `uniq -c | sort -rn` is often the token ','
    if not COUNT_TOKEN_LINE.match(first) and ("," in first or "\t" in first):
        import pyarrow.csv as pcsv

        delimiter = "\t" if "\t" in first else ","
        try:
            table = pcsv.read_csv(p, parse_options=pcsv.ParseOptions(delimiter=delimiter))
        except pa.ArrowInvalid as exc:
            raise MixscopeError(f"{path}: not a readable CSV ({exc})") from None
        return _from_columns(table, path)
    return _from_count_token_lines(p)


def import_reference(root: str, path: str, name: str) -> int:
    """Store a reference table under ``name`` (replacing one of the same name); its row count."""
    if not NAME.match(name):
        raise MixscopeError(f"invalid reference name {name!r}: letters, digits, '_', '.', '-'")
    table = read_reference(path)
    if table.num_rows == 0:
        raise MixscopeError(f"frequency file {path} has no rows")
    layout = Layout.open(root)
    write_parquet(layout, reference_file(layout, name), table)
    return table.num_rows


def reference_files(layout: Layout) -> dict[str, str]:
    names = [d.split("=", 1)[1] for d in layout.list_dirs(f"{layout.base}/references") if "=" in d]
    return {n: reference_file(layout, n) for n in names}
