"""Ad-hoc SQL that can only read: one SELECT (or WITH … SELECT, DESCRIBE, SHOW) at a time.

The connection itself (``views.connect``) already forbids file access outside the results
root and locks its settings; this check refuses every statement that is not a query, so
``COPY … TO``, ``ATTACH``, ``DROP``, ``DELETE``, ``INSTALL``, ``SET`` and friends never run.
"""

from __future__ import annotations

from typing import Any

from mixscope.errors import MixscopeError, first_line


def check_read_only(sql: str) -> None:
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise MixscopeError(f"SQL error: {first_line(exc)}") from None
    if not statements:
        raise MixscopeError("no SQL statement given")
    if len(statements) > 1:
        raise MixscopeError("one statement at a time, please")
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        name = getattr(kind, "name", str(kind))
        raise MixscopeError(f"read-only: {name} statements are not allowed (only queries)")


def execute(con: Any, sql: str, params: dict[str, Any] | None = None) -> Any:
    """Run one read-only query with bound parameters; a DuckDB error becomes one line."""
    import duckdb

    check_read_only(sql)
    try:
        return con.execute(sql, params or None)
    except duckdb.Error as exc:
        raise MixscopeError(f"SQL error: {first_line(exc)}") from None
