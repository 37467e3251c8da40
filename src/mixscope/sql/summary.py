"""The per-layer summary printed at the end of ``mixscope run``."""

from __future__ import annotations

from typing import Any


def layer_summary(root: str, run_id: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    from mixscope.sql.named import run_query
    from mixscope.sql.views import connect
    from mixscope.store.unreadable import naming_unreadable

    with naming_unreadable(root, [run_id]):  # a damaged file: named, not a decoder's riddle
        cur = run_query(connect(root, run_ids=[run_id]), "layer_summary", {"run_id": run_id})
        headers = [d[0] for d in cur.description][1:]  # one run: no run_id column
        return headers, [row[1:] for row in cur.fetchall()]
