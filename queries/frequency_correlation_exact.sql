-- name: frequency_correlation_exact
-- description: frequency_correlation from the per-token rows (output.detail full; sample: the sampled documents), exact.
-- param: run_id = null | only this run (default: every run)
-- param: reference = null | an imported frequency table (default: the run's own corpus counts)
-- columns: run_id, measure, rho_all, rho_no_special, n, n_no_special, bound
-- Average ranks from counts of distinct values, no window rank per occurrence: the
-- frequency side (occurrences per frequency rank, centred mean ranks dx) once per run, not
-- per measure; then one row per occurrence and stored measure carrying its dx, counted per
-- distinct value (one hash aggregation for both populations, integer keys) and the
-- distinct values' cumulative counts (one sort of them). A derived measure has its
-- source's ranks, so its source's rho. An occurrence is ranked by its ORIGINAL token
-- (original_id, before masking): a [MASK] occurrence counts at the frequency rank of the
-- token it replaced, as in the authors' analysis and in frequency_correlation; its string,
-- for a reference keyed by strings, is that token's in the run's own counts.
WITH by_original AS (  -- every occurrence under its original token
    SELECT o.run_id, o.original_id AS token_id, f.token, o.category,
        {{stored:o.@}}
    FROM occurrences o LEFT JOIN frequencies f
        ON f.reference IS NULL AND f.run_id = o.run_id AND f.token_id = o.original_id
    WHERE $run_id IS NULL OR o.run_id = $run_id
),
occ AS (  -- every occurrence with its frequency rank; c2: not [CLS]/[SEP]
    SELECT run_id, freq_rank AS x, CASE WHEN category IN ('cls', 'sep') THEN 0 ELSE 1 END AS c2,
        {{stored:@}}
    FROM ranked(by_original, $reference)   -- helper macros of the views
),
xs AS (SELECT run_id, x, count(*) AS cx, sum(c2) AS cx2 FROM occ GROUP BY run_id, x),
xn AS (
    SELECT *, sum(cx) OVER r AS n, sum(cx2) OVER r AS n2 FROM xs WINDOW r AS (PARTITION BY run_id)
),
xd AS (  -- each distinct frequency rank: centred mean ranks; g: the run as an integer
    SELECT run_id, x, cx, cx2, n, n2, dense_rank() OVER (ORDER BY run_id) AS g,
        sum(cx) OVER w - (cx - 1) / 2.0 - (n + 1) / 2.0 AS dx,
        sum(cx2) OVER w - (cx2 - 1) / 2.0 - (n2 + 1) / 2.0 AS dx2
    FROM xn WINDOW w AS (PARTITION BY run_id ORDER BY x ROWS UNBOUNDED PRECEDING)
),
sx AS (
    SELECT run_id, g, any_value(n) AS n, any_value(n2) AS n2,
        sum(cx * dx * dx) AS sxx, sum(cx2 * dx2 * dx2) AS sxx2
    FROM xd GROUP BY run_id, g
),
long AS (  -- one row per occurrence and stored measure k (its source's name)
    SELECT xd.g, o.c2, xd.dx, o.c2 * xd.dx2 AS dx2, unnest([{{stored:'@'}}]) AS k,
        unnest([{{stored:o.@}}]) AS y
    FROM occ o JOIN xd USING (run_id, x)
),
ys AS (  -- each distinct value: its counts and sum dx of its occurrences
    SELECT g, k, y, count(*) AS cy, sum(c2) AS cy2, sum(dx) AS sdx, sum(dx2) AS sdx2
    FROM long WHERE y IS NOT NULL  -- a run without the measure: no values
    GROUP BY g, k, y
),
yd AS (  -- centred mean ranks of the distinct values (partition totals: n, n2)
    SELECT g, k, cy, cy2, sdx, sdx2,
        sum(cy) OVER w - (cy - 1) / 2.0 - (sum(cy) OVER p + 1) / 2.0 AS dy,
        sum(cy2) OVER w - (cy2 - 1) / 2.0 - (sum(cy2) OVER p + 1) / 2.0 AS dy2
    FROM ys
    WINDOW p AS (PARTITION BY g, k), w AS (PARTITION BY g, k ORDER BY y ROWS UNBOUNDED PRECEDING)
),
sy AS (
    SELECT g, k, sum(sdx * dy) AS sxy, sum(cy * dy * dy) AS syy,
        sum(sdx2 * dy2) AS sxy2, sum(cy2 * dy2 * dy2) AS syy2
    FROM yd GROUP BY g, k
),
rho AS (
    SELECT run_id, k AS source,
        n::BIGINT AS n, sxy / sqrt(sxx * syy) AS rho,
        n2::BIGINT AS n2, sxy2 / sqrt(sxx2 * syy2) AS rho2
    FROM sy JOIN sx USING (g)
)
SELECT run_id, m.measure, rho AS rho_all, rho2 AS rho_no_special, n, n2 AS n_no_special,
    0.0::DOUBLE AS bound
FROM rho JOIN measures m USING (source)
ORDER BY run_id, m.ord
