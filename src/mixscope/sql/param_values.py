"""A named query's parameter values checked against what the selected runs have.

A value that names a run, measure, layer or token category nobody has would answer no
rows, which reads like "nothing there" rather than "misspelled": such a value is a
one-line error listing what exists. Run ids (``run_id``, and ``a``/``b`` of the compare
queries) may be unique prefixes, as everywhere else (``store.runs.resolve_run_ids``); an
ambiguous prefix is an error naming the runs it matches.
"""

from __future__ import annotations

from typing import Any

from mixscope.errors import MixscopeError

#: the parameters that name a run
RUN_PARAMS = ("run_id", "a", "b")


def match_run(given: str, known: list[str], what: str) -> str:
    """The run of ``known`` whose id is ``given`` or starts with it (one-line errors)."""
    prefix = given.strip()
    matches = [k for k in known if k == prefix] or [
        k for k in known if prefix and k.startswith(prefix)
    ]
    if not matches:
        listed = ", ".join(known) or "none"
        raise MixscopeError(f"{what}: no selected run {given!r}; selected runs: {listed}")
    if len(matches) > 1:
        raise MixscopeError(
            f"{what}: run {given!r} is ambiguous: {', '.join(matches)} (give more characters)"
        )
    return matches[0]


def _distinct(con: Any, column: str, run_id: str | None) -> list[Any]:
    cur = con.execute(
        f"SELECT DISTINCT {column} FROM layer_stats WHERE ? IS NULL OR run_id = ? ORDER BY 1",
        [run_id, run_id],
    )
    return [v for (v,) in cur.fetchall() if v is not None]


def checked(con: Any, query: str, bound: dict[str, Any]) -> dict[str, Any]:
    """``bound`` with run-id prefixes made full ids; a run, measure, layer or category that
    no selected run (the ``run_id`` one, when given) has is a :class:`MixscopeError`."""
    out = dict(bound)
    known: list[str] | None = None
    for name in RUN_PARAMS:
        if out.get(name) is None:
            continue
        if known is None:
            known = [
                r for (r,) in con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()
            ]
        out[name] = match_run(str(out[name]), known, f"query {query} --param {name}")
    run_id = out.get("run_id")
    nobody = f"run {run_id} has no" if run_id is not None else "no selected run has"
    if out.get("measure") is not None:
        have = [m for (m,) in con.execute("SELECT measure FROM measures ORDER BY ord").fetchall()]
        if run_id is not None:
            mine = con.execute("SELECT measure FROM run_measures WHERE run_id = ?", [run_id])
            own = {m for (m,) in mine.fetchall()}
            have = [m for m in have if m in own]
        if out["measure"] not in have:
            raise MixscopeError(
                f"query {query}: {nobody} measure {out['measure']!r}; "
                f"measures: {', '.join(have) or 'none'}"
            )
    if out.get("layer") is not None:
        try:
            out["layer"] = int(out["layer"])
        except ValueError:
            raise MixscopeError(
                f"query {query}: --param layer expects a layer number, got {out['layer']!r}"
            ) from None
        layers = _distinct(con, "layer", run_id)
        if out["layer"] not in layers:
            listed = f"{layers[0]}-{layers[-1]}" if layers else "none"
            raise MixscopeError(f"query {query}: {nobody} layer {out['layer']}; layers: {listed}")
    if out.get("category") is not None:
        categories = _distinct(con, "category", run_id)
        if out["category"] not in categories:
            raise MixscopeError(
                f"query {query}: {nobody} tokens of category {out['category']!r}; "
                f"categories: {', '.join(categories) or 'none'}"
            )
    return out
