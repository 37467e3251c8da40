"""Ad-hoc SQL that can only read: one SELECT (or WITH … SELECT, DESCRIBE, SHOW) at a time.

The connection itself (``views.connect``) already forbids file access outside the results
root and locks its settings; this check refuses every statement that is not a query, so
``COPY … TO``, ``ATTACH``, ``DROP``, ``DELETE``, ``INSTALL``, ``SET`` and friends never run.
"""

from __future__ import annotations

import re
from typing import Any

from mixscope.errors import MixscopeError, SqlError

#: where DuckDB's message turns to the statement's text (``LINE 1: …`` and a caret line)
_CONTEXT = re.compile(r"^LINE \d+:")


def sql_message(exc: BaseException) -> str:
    """DuckDB's error as one line: the error and its hints ("Did you mean …",
    "Candidate bindings: …"), without the quoted statement and caret that follow them
    (they need the terminal's layout to point at anything)."""
    kept = []
    for line in str(exc).splitlines():
        if _CONTEXT.match(line.strip()):
            break
        if line.strip():
            kept.append(line.strip().replace("bindings: : ", "bindings: "))
    return " ".join(kept)


def check_read_only(sql: str) -> None:
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise MixscopeError(f"SQL error: {sql_message(exc)}") from None
    if not statements:
        raise MixscopeError("no SQL statement given")
    if len(statements) > 1:
        raise MixscopeError("one statement at a time, please")
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        name = getattr(kind, "name", str(kind))
        raise MixscopeError(f"read-only: {name} statements are not allowed (only queries)")


def execute(con: Any, sql: str, params: dict[str, Any] | None = None) -> Any:
    """Run one read-only query with bound parameters; a DuckDB error becomes one line that
    keeps DuckDB's hints (:func:`sql_message`)."""
    import duckdb

    check_read_only(sql)
    try:
        return con.execute(sql, params or None)
    except duckdb.Error as exc:
        raise SqlError(
            missing_measure(con, str(exc)) or f"SQL error: {sql_message(exc)}", exc
        ) from None


def missing_measure(con: Any, message: str) -> str | None:
    """A query that names a measure no selected run has: say so (which group computes it)
    instead of DuckDB's "column not found"."""
    from mixscope.registry import all_columns, group_of

    names = {c.name for c in all_columns()}
    found = re.search(
        r'(?:column|Column) (?:with name )?"?(\w+)"? (?:not found|does not exist)', message
    )
    if not found or found.group(1) not in names:
        return None
    measure = found.group(1)
    present = [m for (m,) in con.execute("SELECT measure FROM measures ORDER BY ord").fetchall()]
    if measure in present:
        return None
    group = group_of(measure)
    return (
        f"no selected run has the measure {measure} (group {group}); the runs here have "
        f"{', '.join(present)}: run the job with --measures including {group} (or all)"
    )
