"""The numbers the report shows: named queries and one sampling query, as plain tables.

A table here is a list of ``dict`` rows (column name → Python value), or for the scatter
sample a dict of numpy columns. Nothing in this module plots or formats.
"""

from __future__ import annotations

from typing import Any

from mixscope.sql.named import expand, run_query
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
            "SELECT run_id, name, model, corpus, checkpoint_path, revision, step, n_docs, "
            "tokens, rows, "
            "status, options, created_at, dtype FROM runs "
            "ORDER BY name, step NULLS LAST, created_at, run_id",
        )
    )


def measures(con: Any) -> list[str]:
    """Every measure of the selected runs, in registry order (the ``measures`` table)."""
    return [m for (m,) in execute(con, "SELECT measure FROM measures ORDER BY ord").fetchall()]


def runs_with_group(con: Any, group: str) -> set[str]:
    """The selected runs that computed the measure group ``group``."""
    cur = execute(con, "SELECT DISTINCT run_id FROM run_measures WHERE grp = $g", {"g": group})
    return {r for (r,) in cur.fetchall()}


def runs_with_rows(con: Any) -> set[str]:
    """Runs with committed results (their statistics; per-token detail is optional)."""
    return {r["run_id"] for r in rows(execute(con, "SELECT DISTINCT run_id FROM layer_stats"))}


def runs_with_detail(con: Any) -> set[str]:
    """Runs with per-token rows (none at all: the detail views refuse to answer)."""
    from mixscope.errors import MixscopeError
    from mixscope.store.unreadable import read_failure

    try:
        return {r["run_id"] for r in rows(execute(con, "SELECT DISTINCT run_id FROM tokens"))}
    except MixscopeError as exc:
        if read_failure(exc):  # a damaged detail file, not "no detail": build_report names it
            raise
        return set()


# An occurrence is ranked by its ORIGINAL token (before masking; runs without original_id:
# as seen), as the frequency_* queries and the authors' analysis do: a [MASK] occurrence sits
# at the rank of the token it replaced, it is not ranked as [MASK] (which has no count and
# would drop out). The original token's string (for a reference keyed by strings) is the
# run's own frequency entry of that id.
_SAMPLE = """
WITH by_original AS (
    SELECT o.run_id, coalesce(o.original_id, o.token_id) AS token_id,
        coalesce(f.token, o.token::VARCHAR) AS token, o.category,
        {{measures:o.@}}
    FROM occurrences o LEFT JOIN frequencies f
        ON f.reference IS NULL AND f.run_id = o.run_id
        AND f.token_id = coalesce(o.original_id, o.token_id)
    WHERE o.run_id = $run_id
)
SELECT freq_rank, category, {{measures:@}}
FROM ranked(by_original, $reference)
USING SAMPLE reservoir({limit} ROWS) REPEATABLE (0)
"""


_TOKEN_MEANS = """
WITH by_original AS (
    SELECT s.run_id, coalesce(s.original_id, s.token_id) AS token_id, f.token, s.category,
        s.measure, s.n, s.sum
    FROM token_stats s LEFT JOIN frequencies f
        ON f.reference IS NULL AND f.run_id = s.run_id
        AND f.token_id = coalesce(s.original_id, s.token_id)
    WHERE s.run_id = $run_id
)
SELECT freq_rank, category, {means}
FROM ranked(by_original, $reference)
GROUP BY token_id, category, freq_rank
"""


def frequency_sample(
    con: Any,
    run_id: str,
    *,
    reference: str | None = None,
    limit: int = SAMPLE_SIZE,
    detail: bool = True,
) -> dict[str, Any]:
    """Points of the frequency scatter of one run: frequency rank and layer-averaged ratios.

    With per-token ``detail``: at most ``limit`` token occurrences (a reservoir sample with
    a fixed seed); without: one point per token and category, its mean over occurrences
    (token_stats). Ranks as the ``frequency_correlation`` query (the run's own corpus
    counts, or an imported ``reference``), by each occurrence's original token (a masked
    one at the rank of the token it replaced). ``label`` says which.
    """
    params = {"run_id": run_id, "reference": reference}
    names = measures(con)
    if detail:
        sql = expand(_SAMPLE, names, []).format(limit=int(limit))
        out = execute(con, sql, params).fetchnumpy()
        out["label"] = "token occurrences (sample)"
        return out
    means = ", ".join(
        f"sum(sum) FILTER (measure = '{m}') / sum(n) FILTER (measure = '{m}') AS {m}" for m in names
    )
    out = execute(con, _TOKEN_MEANS.format(means=means), params).fetchnumpy()
    out["label"] = "tokens (mean over occurrences)"
    return out
