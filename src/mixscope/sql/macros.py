"""The SQL macros every connection has: ``ranked``, ``ranked_occurrences``, ``spearman``.

Macros rather than views because they take parameters (a table, a frequency reference);
``spearman`` computes Spearman's rho from counts (ties share their mean rank), so the
frequency analyses never sort per-token rows (the error bound of binned ranks is derived
above ``SPEARMAN``).
"""

from __future__ import annotations

from typing import Any

# occurrences with the frequency rank of their token (the ``ranked`` macro below)
RANKED_OCCURRENCES = """
CREATE MACRO ranked_occurrences(ref) AS TABLE SELECT * FROM ranked(occurrences, ref)
"""

# Spearman's rho from counts, for a population and a sub-population at once. ``cells``:
# (grp, x, y, c, c2) = c observations at (x, y) in group grp (e.g. 'run|measure'), c2 of
# them also in the sub-population (e.g. without [CLS]/[SEP]; c2 = c for none). Ties share
# the mean of their ranks, computed from counts (cumulative sums over the distinct x and y),
# and Σ c·dx·dy is summed per distinct y as dy · Σ c·dx, so the cells are read twice and
# joined only with the (small) table of distinct x. With ``binned``, y is a histogram bin
# standing for values that may differ inside it; ``bound`` is then the worst case of
# |rho - rho of the values|: s + s²/2 with s² = Σ_b c_b (c_b² - 1) / (12 Σ_b c_b d_b²),
# d_b = the bin's mean rank - (n + 1)/2.
SPEARMAN = """
CREATE MACRO spearman(cells, binned) AS TABLE
WITH xs AS (
    SELECT grp, x, sum(c) AS cx, sum(c2) AS cx2 FROM query_table(cells) GROUP BY grp, x
),
xn AS (SELECT *, sum(cx) OVER g AS n, sum(cx2) OVER g AS n2 FROM xs WINDOW g AS (PARTITION BY grp)),
xd AS (  -- each distinct x: its counts and centred mean ranks
    SELECT grp, x, cx, cx2, n, n2,
        sum(cx) OVER w - (cx - 1) / 2.0 - (n + 1) / 2.0 AS dx,
        sum(cx2) OVER w - (cx2 - 1) / 2.0 - (n2 + 1) / 2.0 AS dx2
    FROM xn WINDOW w AS (PARTITION BY grp ORDER BY x ROWS UNBOUNDED PRECEDING)
),
ys AS (  -- each distinct y: its counts and Σ c·dx of its cells
    SELECT c.grp, c.y, sum(c.c) AS cy, sum(c.c2) AS cy2,
        sum(c.c * xd.dx) AS sdx, sum(c.c2 * xd.dx2) AS sdx2,
        any_value(xd.n) AS n, any_value(xd.n2) AS n2
    FROM query_table(cells) c JOIN xd ON c.grp = xd.grp AND c.x = xd.x
    GROUP BY c.grp, c.y
),
yd AS (
    SELECT grp, cy, cy2, sdx, sdx2, n, n2,
        sum(cy) OVER w - (cy - 1) / 2.0 - (n + 1) / 2.0 AS dy,
        sum(cy2) OVER w - (cy2 - 1) / 2.0 - (n2 + 1) / 2.0 AS dy2
    FROM ys WINDOW w AS (PARTITION BY grp ORDER BY y ROWS UNBOUNDED PRECEDING)
),
sx AS (
    SELECT grp, sum(cx * dx * dx) AS sxx, sum(cx2 * dx2 * dx2) AS sxx2 FROM xd GROUP BY grp
),
sy AS (
    SELECT grp, any_value(n) AS n, any_value(n2) AS n2,
        sum(sdx * dy) AS sxy, sum(cy * dy * dy) AS syy, sum(cy * (cy * cy - 1.0)) AS ties,
        sum(sdx2 * dy2) AS sxy2, sum(cy2 * dy2 * dy2) AS syy2,
        sum(cy2 * (cy2 * cy2 - 1.0)) AS ties2
    FROM yd GROUP BY grp
)
SELECT grp, n::BIGINT AS n, sxy / sqrt(sxx * syy) AS rho,
    CASE WHEN NOT binned THEN 0.0 WHEN syy = 0 THEN 'nan'::DOUBLE
        ELSE sqrt(ties / (12 * syy)) + ties / (24 * syy) END AS bound,
    n2::BIGINT AS n2, sxy2 / sqrt(sxx2 * syy2) AS rho2,
    CASE WHEN NOT binned THEN 0.0 WHEN syy2 = 0 THEN 'nan'::DOUBLE
        ELSE sqrt(ties2 / (12 * syy2)) + ties2 / (24 * syy2) END AS bound2
FROM sy JOIN sx USING (grp)
"""

# rows of any table with run_id, token_id and token (token_stats, token_hist, occurrences)
# with the frequency rank of their token: the run's own corpus counts when ``ref`` is NULL,
# else the imported reference table ``ref`` (keyed by token id, or by token string when the
# reference has no ids); tokens missing from a reference are left out.
RANKED = """
CREATE MACRO ranked(t, ref) AS TABLE
SELECT x.*, f.rank AS freq_rank
FROM query_table(t) x JOIN frequencies f ON f.run_id = x.run_id AND f.token_id = x.token_id
WHERE ref IS NULL
UNION ALL
SELECT x.*, f.rank
FROM query_table(t) x JOIN frequencies f ON f.token_id = x.token_id
WHERE f.reference = ref AND f.token_id IS NOT NULL
UNION ALL
SELECT x.*, f.rank
FROM query_table(t) x JOIN frequencies f ON f.token = x.token
WHERE f.reference = ref AND f.token_id IS NULL
"""


def create_macros(con: Any) -> None:
    """Define the macros on ``con`` (after the ``frequencies`` and ``occurrences`` views)."""
    con.execute(RANKED)
    con.execute(RANKED_OCCURRENCES)
    con.execute(SPEARMAN)
