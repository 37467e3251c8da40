"""The per-layer summary printed at the end of ``mixscope run``."""

from __future__ import annotations

from importlib.resources import files
from typing import Any


def layer_summary(root: str, run_id: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    from mixscope.sql.views import connect

    sql = files("mixscope.sql").joinpath("layer_summary.sql").read_text()
    con = connect(root, run_ids=[run_id])
    cur = con.execute(sql, {"run_id": run_id})
    headers = [d[0] for d in cur.description]
    return headers, cur.fetchall()
