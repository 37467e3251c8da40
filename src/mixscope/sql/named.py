"""Named queries: one analysis per ``.sql`` file, described by its header comment.

    -- name: summary
    -- description: one line
    -- param: run_id = null | what it does       (default parsed as YAML; ``required``: no default)
    -- columns: run_id, measure, …               (the output contract)

Parameters are bound by DuckDB (``$name``), never pasted into the SQL text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib.resources import files
from typing import Any

from mixscope.errors import MixscopeError

REQUIRED = object()


@dataclass(frozen=True)
class Param:
    name: str
    default: Any  # REQUIRED when the caller must give it
    help: str = ""


@dataclass(frozen=True)
class NamedQuery:
    name: str
    description: str
    sql: str
    params: tuple[Param, ...] = field(default_factory=tuple)
    columns: tuple[str, ...] = field(default_factory=tuple)

    def bind(self, given: dict[str, Any]) -> dict[str, Any]:
        """Defaults + given values, coerced to the default's type; clear errors otherwise."""
        valid = {p.name: p for p in self.params}
        unknown = sorted(set(given) - set(valid))
        if unknown:
            listed = ", ".join(valid) or "none"
            raise MixscopeError(
                f"query {self.name} has no parameter {unknown[0]!r}; valid: {listed}"
            )
        out: dict[str, Any] = {}
        for p in self.params:
            if p.name in given:
                out[p.name] = _coerce(given[p.name], p, self.name)
            elif p.default is REQUIRED:
                listed = ", ".join(valid)
                raise MixscopeError(
                    f"query {self.name} needs --param {p.name}=… ({p.help}); parameters: {listed}"
                )
            else:
                out[p.name] = p.default
        return out


def _coerce(value: Any, p: Param, query: str) -> Any:
    if not isinstance(value, str) or p.default is REQUIRED or p.default is None:
        return value
    if isinstance(p.default, bool):
        return value.lower() in ("1", "true", "yes")
    try:
        if isinstance(p.default, int):
            return int(value)
        if isinstance(p.default, float):
            return float(value)
    except ValueError:
        kind = type(p.default).__name__
        raise MixscopeError(
            f"query {query}: --param {p.name} expects {kind}, got {value!r}"
        ) from None
    return value


_HEADER = re.compile(r"^--\s*(name|description|param|columns):\s*(.*)$")


def parse(text: str) -> NamedQuery:
    import yaml

    meta: dict[str, Any] = {"params": []}
    for line in text.splitlines():
        m = _HEADER.match(line.strip())
        if not m:
            continue
        key, value = m.groups()
        if key == "param":
            spec, _, help_text = value.partition("|")
            pname, _, default = spec.partition("=")
            default = default.strip()
            parsed = REQUIRED if default == "required" else yaml.safe_load(default or "null")
            meta["params"].append(Param(pname.strip(), parsed, help_text.strip()))
        elif key == "columns":
            meta["columns"] = tuple(c.strip() for c in value.split(","))
        else:
            meta[key] = value.strip()
    if "name" not in meta:
        raise MixscopeError("a named query needs a '-- name:' header line")
    return NamedQuery(
        meta["name"],
        meta.get("description", ""),
        text,
        tuple(meta["params"]),
        meta.get("columns", ()),
    )


def all_queries() -> dict[str, NamedQuery]:
    """Every query shipped in ``mixscope/queries`` (the repository's ``queries/``)."""
    out = {}
    for entry in sorted(files("mixscope.queries").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            q = parse(entry.read_text(encoding="utf-8"))
            out[q.name] = q
    return out


def get_query(name: str) -> NamedQuery:
    queries = all_queries()
    if name not in queries:
        raise MixscopeError(f"no query named {name!r}; available: {', '.join(queries)}")
    return queries[name]


def run_query(con: Any, name: str, params: dict[str, Any] | None = None) -> Any:
    """Execute a named query on a views connection; returns the DuckDB cursor."""
    from mixscope.sql.readonly import execute

    q = get_query(name)
    bound = q.bind(params or {})
    if bound.get("reference") is not None:  # a typo would otherwise just give no rows
        known = [
            r
            for (r,) in con.execute(
                "SELECT DISTINCT reference FROM frequencies WHERE reference IS NOT NULL ORDER BY 1"
            ).fetchall()
        ]
        if bound["reference"] not in known:
            raise MixscopeError(
                f"no reference frequency table {bound['reference']!r}; imported: "
                + (", ".join(known) or "none (mixscope frequencies import ROOT FILE --name NAME)")
            )
    return execute(con, q.sql, bound)
