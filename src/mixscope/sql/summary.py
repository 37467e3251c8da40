"""The per-layer summary printed at the end of ``mixscope run``.

The ``layer_summary`` query's columns, for a terminal: a run with the distance group has
two dozen bucket shares per layer (the registry's profile columns), too wide to read
there, so they are replaced by the layer's mean reach in tokens by norm and by weight
(``distance_profile``'s ``reach_n`` / ``reach_w``); the shares per bucket stay one named
query away.
"""

from __future__ import annotations

from typing import Any


def profile_buckets() -> dict[str, int]:
    """Each profile column (the registry's ``Column.profile``) → its bucket, its place among
    its profile's columns, near to far (``profile == "dist_n"``, the third → 2): what a
    table too wide to print by bucket folds (here) or trims (``mixscope analyze``)."""
    from mixscope.registry import all_columns

    cols = [c for c in all_columns() if c.profile is not None]
    return {c.name: [d.name for d in cols if d.profile == c.profile].index(c.name) for c in cols}


def layer_summary(root: str, run_id: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    from mixscope.sql.named import run_query
    from mixscope.sql.views import connect
    from mixscope.store.unreadable import naming_unreadable

    with naming_unreadable(root, [run_id]):  # a damaged file: named, not a decoder's riddle
        con = connect(root, run_ids=[run_id])
        cur = run_query(con, "layer_summary", {"run_id": run_id})
        headers = [d[0] for d in cur.description][1:]  # one run: no run_id column
        rows = [row[1:] for row in cur.fetchall()]
        buckets = profile_buckets()  # the distance group's dist_n_<b> / dist_w_<b>
        keep = [i for i, h in enumerate(headers) if h not in buckets]
        if len(keep) == len(headers):
            return headers, rows
        profile = run_query(con, "distance_profile", {"run_id": run_id})
        names = [d[0] for d in profile.description]
        at = {k: names.index(k) for k in ("layer", "reach_n", "reach_w")}
        reach = {r[at["layer"]]: (r[at["reach_n"]], r[at["reach_w"]]) for r in profile.fetchall()}
    layer = headers.index("layer")
    return (
        [headers[i] for i in keep] + ["reach_n", "reach_w"],
        [tuple(row[i] for i in keep) + reach.get(row[layer], (None, None)) for row in rows],
    )
