"""``mixscope compare ROOT RUN_A RUN_B``: two runs side by side (two checkpoints, two models,
float32 vs bfloat16), per layer or per layer and token category, with the difference b - a.

The numbers are the named queries ``compare_runs`` and ``compare_token_types`` (token-level
means from the statistics, so every ``output.detail`` mode answers); this module only finds
the two runs (full ids or unique prefixes) and says which is which. The CLI command, the
report's comparison section and :meth:`mixscope.results.Results.plot` all come through here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mixscope.errors import MixscopeError

#: ``--by`` → the named query that answers it
QUERIES = {"layer": "compare_runs", "token-type": "compare_token_types"}


@dataclass(frozen=True)
class Pair:
    """The two runs of a comparison: full ids and one-line descriptions."""

    a: str
    b: str
    label_a: str
    label_b: str

    def header(self) -> str:
        return f"a = {self.label_a}\nb = {self.label_b}\ndiff = b - a"


def describe(run: dict[str, Any]) -> str:
    """``run_id (name, model, step N, dtype)``: what tells two runs apart at a glance."""
    parts = [run.get("name") or "", run.get("model") or ""]
    if run.get("step") is not None:
        parts.append(f"step {run['step']}")
    parts.append(run.get("dtype") or "float32")
    return f"{run['run_id']} ({', '.join(p for p in parts if p)})"


def resolve_pair(con: Any, root: str, run_a: str, run_b: str) -> Pair:
    """Both runs by id or unique prefix; one-line errors for unknown, ambiguous or the same.

    ``con``: a views connection (``sql.views.connect``) over ``root``, for the labels.
    """
    from mixscope.sql.readonly import execute
    from mixscope.store.layout import Layout
    from mixscope.store.runs import resolve_run_ids

    a, b = resolve_run_ids(Layout.open(root), [run_a, run_b])
    if a == b:
        raise MixscopeError(f"both names give run {a}: compare two different runs")
    cur = execute(
        con,
        "SELECT run_id, name, model, step, dtype FROM runs WHERE run_id IN ($a, $b)",
        {"a": a, "b": b},
    )
    names = [d[0] for d in cur.description]
    runs = {r[0]: dict(zip(names, r, strict=True)) for r in cur.fetchall()}
    label = {k: describe(runs[k]) if k in runs else k for k in (a, b)}
    return Pair(a, b, label[a], label[b])


def compare_cursor(con: Any, pair: Pair, by: str = "layer") -> Any:
    """The comparison table (a DuckDB cursor): ``compare_runs`` for ``by="layer"``,
    ``compare_token_types`` for ``by="token-type"``."""
    from mixscope.sql.named import run_query

    if by not in QUERIES:
        raise MixscopeError(f"--by must be one of {', '.join(QUERIES)}, got {by!r}")
    return run_query(con, QUERIES[by], {"a": pair.a, "b": pair.b})
