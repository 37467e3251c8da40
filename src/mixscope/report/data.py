"""The numbers the report shows: named queries and one sampling query, as plain tables.

A table here is a list of ``dict`` rows (column name → Python value), or for the scatter
sample a dict of numpy columns. Nothing in this module plots or formats.
"""

from __future__ import annotations

from typing import Any

from mixscope.sql.named import run_query
from mixscope.sql.readonly import execute

Rows = list[dict[str, Any]]

#: at most this many token occurrences in a frequency scatter
SAMPLE_SIZE = 20_000


def rows(cur: Any) -> Rows:
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def named(con: Any, name: str, **params: Any) -> Rows:
    """A named query's rows (``summary``, ``layer_profile``, …), parameters bound."""
    return rows(run_query(con, name, {k: v for k, v in params.items() if v is not None}))


def runs(con: Any) -> Rows:
    """The selected runs, oldest first, with the columns the report shows."""
    return rows(
        execute(
            con,
            "SELECT run_id, name, model, checkpoint_path, revision, step, n_docs, tokens, rows, "
            "status, options, created_at FROM runs "
            "ORDER BY name, step NULLS LAST, created_at, run_id",
        )
    )


def runs_with_rows(con: Any) -> set[str]:
    return {r["run_id"] for r in rows(execute(con, "SELECT DISTINCT run_id FROM tokens"))}


_SAMPLE = """
SELECT freq_rank, category, attn_w, attn_n, attnres_w, attnres_n, attnresln_n
FROM ranked_occurrences($reference)
WHERE run_id = $run_id
USING SAMPLE reservoir({limit} ROWS) REPEATABLE (0)
"""


def frequency_sample(
    con: Any, run_id: str, *, reference: str | None = None, limit: int = SAMPLE_SIZE
) -> dict[str, Any]:
    """At most ``limit`` token occurrences of one run: frequency rank and layer-averaged ratios.

    Same occurrences and ranks as the ``frequency_correlation`` query (the run's own corpus
    counts, or an imported ``reference``); a reservoir sample with a fixed seed.
    """
    sql = _SAMPLE.format(limit=int(limit))
    cur = execute(con, sql, {"run_id": run_id, "reference": reference})
    return cur.fetchnumpy()
