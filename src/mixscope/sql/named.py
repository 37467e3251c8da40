"""Named queries: one analysis per ``.sql`` file, described by its header comment.

    -- name: summary
    -- description: one line
    -- param: run_id = null | what it does       (default parsed as YAML; ``required``: no default)
    -- columns: run_id, measure, …               (the output contract)
    -- group: sink                               (optional: the measure group(s) it reads)
    -- also: learned_sink                        (optional: groups it shows where a run has them)

Parameters are bound by DuckDB (``$name``), never pasted into the SQL text.

Measure lists come from the registry, never spelled in a query: ``{{measures:FORMAT}}``
(every measure of the selected runs) and ``{{stored:FORMAT}}`` (the stored ones) expand to
``FORMAT`` once per measure, ``@`` replaced by its name, joined by ", " — e.g.
``{{measures:any_value(mean) FILTER (measure = '@') AS @}}`` — from the connection's
``measures`` table (sql/measure_tables.py), so a root holding runs of different groups
gets the columns its runs have. A query that names a ``group`` refuses, in one line, a
selection where no run has that group; one that names several (``-- group: paper, ff``:
it compares the scopes of two groups) refuses a selection where no run has them all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mixscope.errors import MixscopeError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

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
    #: the measure groups the query reads (its measures' groups), every one needed per run
    groups: tuple[str, ...] = ()
    #: groups whose measures it shows where a run has them (NULL elsewhere), not needed
    also: tuple[str, ...] = ()

    def expanded_columns(self, measures: list[str], stored: list[str]) -> tuple[str, ...]:
        """The ``columns`` header with its measure lists expanded (``expand``)."""
        return tuple(
            c.strip() for c in expand(", ".join(self.columns), measures, stored).split(",")
        )

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


_HEADER = re.compile(r"^--\s*(name|description|param|columns|group|also):\s*(.*)$")
#: ``{{measures:FORMAT}}`` / ``{{stored:FORMAT}}``: a measure list (module docstring)
_LIST = re.compile(r"\{\{(measures|stored):(.*?)\}\}")


def expand(text: str, measures: list[str], stored: list[str]) -> str:
    """``text`` with every ``{{measures:…}}`` / ``{{stored:…}}`` list expanded."""
    lists = {"measures": measures, "stored": stored}
    return _LIST.sub(
        lambda m: ", ".join(m.group(2).replace("@", x) for x in lists[m.group(1)]), text
    )


def measure_lists(root: str | None) -> tuple[list[str], list[str], str]:
    """(every measure, the stored ones, whose they are) that ``expand`` lists for the runs of
    ``root`` — or, without a root, for the default measure groups (what ``mixscope queries``
    shows: a template spelled ``{{measures:@}}`` means nothing to a reader)."""
    from mixscope.registry import DEFAULT_GROUPS, measure_set

    if root is None:
        ms = measure_set(DEFAULT_GROUPS)
        return list(ms.columns), list(ms.stored), f"the default groups: {', '.join(ms.groups)}"
    from pathlib import Path

    from mixscope.sql.measure_tables import measures_of_runs
    from mixscope.store.layout import Layout
    from mixscope.store.runs import load_runs

    if "://" not in root and not Path(root).is_dir():
        raise MixscopeError(f"results root {root} does not exist")
    ms = measures_of_runs(r.measure_set for r in load_runs(Layout.open(root)))
    return list(ms.columns), list(ms.stored), f"the runs in {root}: {', '.join(ms.groups)}"


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
        elif key in ("group", "also"):
            meta["groups" if key == "group" else key] = tuple(
                g.strip() for g in value.split(",") if g.strip()
            )
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
        meta.get("groups", ()),
        meta.get("also", ()),
    )


def query_folder() -> Traversable:
    """Where the shipped queries are: ``mixscope/queries`` in an installed wheel (the build
    copies the repository's top-level ``queries/`` there), else that folder itself, beside
    ``src/`` (a source checkout: an editable install or ``PYTHONPATH=src``)."""
    packaged = files("mixscope") / "queries"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[3] / "queries"


def all_queries() -> dict[str, NamedQuery]:
    """Every query shipped with mixscope (the repository's ``queries/``)."""
    out = {}
    for entry in sorted(query_folder().iterdir(), key=lambda e: e.name):
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
    from mixscope.sql.param_values import checked
    from mixscope.sql.readonly import execute

    q = get_query(name)
    bound = checked(con, q.name, q.bind(params or {}))  # run-id prefixes, misspelled values
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
    listed = con.execute("SELECT measure, stored FROM measures ORDER BY ord").fetchall()
    if q.groups:
        _needs_groups(con, q, bound.get("run_id"))
    sql = expand(q.sql, [m for m, _ in listed], [m for m, stored in listed if stored])
    return execute(con, sql, bound)


def _needs_groups(con: Any, q: NamedQuery, run_id: str | None) -> None:
    """Refuse, in one line, a selection where no run has every group ``q`` reads (the
    query would answer no rows, which reads like "nothing there" rather than "not
    computed")."""
    from mixscope.registry import GROUPS

    unknown = [g for g in (*q.groups, *q.also) if g not in GROUPS]
    if unknown:
        raise MixscopeError(f"query {q.name} reads an unknown measure group {unknown[0]!r}")
    have: dict[str, set[str]] = {}
    for g in q.groups:
        cur = con.execute(
            "SELECT DISTINCT run_id FROM run_measures WHERE grp = ? AND (? IS NULL OR run_id = ?)",
            [g, run_id, run_id],
        )
        have[g] = {r for (r,) in cur.fetchall()}
    flag = ",".join(dict.fromkeys(("paper", *q.groups)))
    missing = next((g for g in q.groups if not have[g]), None)
    if missing is not None:
        raise MixscopeError(
            f"query {q.name} needs the {missing!r} measure group and no selected run has "
            f"it; run the job with --measures {flag} (or all)"
        )
    if not set.intersection(*have.values()):
        listed = " and ".join(repr(g) for g in q.groups)
        raise MixscopeError(
            f"query {q.name} needs the {listed} measure groups in one run and no selected run "
            f"has them all; run the job with --measures {flag} (or all)"
        )
