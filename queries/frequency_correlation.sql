-- name: frequency_correlation
-- description: Per run and measure: Spearman rho between frequency rank and each token occurrence's layer-averaged ratio, all tokens and without [CLS]/[SEP] (Table 3).
-- param: run_id = null | only this run (default: every run)
-- param: reference = null | an imported frequency table (default: the run's own corpus counts)
-- columns: run_id, measure, rho_all, rho_no_special, n, n_no_special, bound
-- From token_hist: occurrences per (token, bin of the layer-averaged value), so ranks of
-- values come from bin totals (ties share the mean of their ranks); frequency ranks are
-- exact. Every occurrence is in each stored measure's histogram, so the frequency side
-- (counts per token, their centred mean ranks dx) is computed once per run from one
-- measure's rows, on ~vocabulary rows; then token_hist is read once more, each row joined
-- to its token's dx by integer keys and summed per (run, measure, bin): the ranks of the
-- values need only those <= 4,096 bins per measure. `bound` is the worst-case
-- |rho - exact rho| of the two (README, "Spearman's rho from histograms"):
-- s + s^2/2, s^2 = sum c_b (c_b^2 - 1) / (12 sum c_b dy_b^2). frequency_correlation_exact
-- computes rho from the per-token rows. A derived measure (exactly a factor times a stored
-- one) has its source's ranks, so its source's rho. Tokens missing from a reference table
-- are left out. Every measure of the selected runs (the `measures` table); a run answers
-- for the measures its groups have.
-- An occurrence is ranked by its ORIGINAL token (token_hist.original_id, before masking):
-- a [MASK] occurrence counts at the frequency rank of the token it replaced, as in the
-- authors' analysis (its value is still the one computed at [MASK]); its string, for a
-- reference keyed by strings, is that token's in the run's own counts. Runs of schema 2
-- (no original_id) rank by the token as seen, where [MASK] has no count and drops out.
WITH hist AS NOT MATERIALIZED (  -- the stored measures' bins by original token; c2: not [CLS]/[SEP]
    SELECT run_id, coalesce(original_id, token_id) AS token_id, measure, bin, count,
        CASE WHEN category IN ('cls', 'sep') THEN 0 ELSE count END AS c2
    FROM token_hist_by_id  -- token_hist without its strings (not needed here)
    WHERE ($run_id IS NULL OR run_id = $run_id)
        AND measure IN (SELECT measure FROM measures WHERE stored)
),
one_measure AS (  -- per run, one stored measure it has (every one counts each occurrence)
    SELECT run_id, min(measure) AS measure
    FROM run_measures WHERE measure IN (SELECT measure FROM measures WHERE stored)
    GROUP BY run_id
),
counts AS (  -- occurrences of each original token (the same in every measure's histogram)
    SELECT run_id, token_id, sum(count) AS c, sum(c2) AS c2
    FROM hist JOIN one_measure USING (run_id, measure)
    GROUP BY run_id, token_id
),
per_token AS (  -- with the original token's string (the run's own counts name every one)
    SELECT p.run_id, p.token_id, f.token, p.c, p.c2
    FROM counts p LEFT JOIN frequencies f
        ON f.reference IS NULL AND f.run_id = p.run_id AND f.token_id = p.token_id
),
tok AS (
    SELECT run_id, token_id, c, c2, freq_rank AS x
    FROM ranked(per_token, $reference)   -- helper macros of the views
),
xs AS (SELECT run_id, x, sum(c) AS cx, sum(c2) AS cx2 FROM tok GROUP BY run_id, x),
xn AS (
    SELECT *, sum(cx) OVER r AS n, sum(cx2) OVER r AS n2 FROM xs WINDOW r AS (PARTITION BY run_id)
),
xd AS (  -- each distinct frequency rank: its counts and centred mean ranks
    SELECT run_id, x, cx, cx2, n, n2,
        sum(cx) OVER w - (cx - 1) / 2.0 - (n + 1) / 2.0 AS dx,
        sum(cx2) OVER w - (cx2 - 1) / 2.0 - (n2 + 1) / 2.0 AS dx2
    FROM xn WINDOW w AS (PARTITION BY run_id ORDER BY x ROWS UNBOUNDED PRECEDING)
),
sx AS (  -- per run: n and sum c dx^2, and an integer key g for the per-row work
    SELECT run_id, row_number() OVER (ORDER BY run_id) AS g, any_value(n) AS n,
        any_value(n2) AS n2, sum(cx * dx * dx) AS sxx, sum(cx2 * dx2 * dx2) AS sxx2
    FROM xd GROUP BY run_id
),
tokd AS (  -- each token's centred frequency ranks
    SELECT t.run_id, t.token_id, sx.g, xd.dx, xd.dx2
    FROM tok t JOIN xd USING (run_id, x) JOIN sx USING (run_id)
),
ys AS (  -- each (run, measure, bin): its counts and sum c dx of its cells
    SELECT t.g, h.measure, h.bin, sum(h.count) AS cy, sum(h.c2) AS cy2,
        sum(h.count * t.dx) AS sdx, sum(h.c2 * t.dx2) AS sdx2
    FROM hist h JOIN tokd t USING (run_id, token_id)
    GROUP BY t.g, h.measure, h.bin
),
yd AS (  -- the bins' centred mean ranks
    SELECT sx.run_id, ys.measure, cy, cy2, sdx, sdx2,
        sum(cy) OVER w - (cy - 1) / 2.0 - (sx.n + 1) / 2.0 AS dy,
        sum(cy2) OVER w - (cy2 - 1) / 2.0 - (sx.n2 + 1) / 2.0 AS dy2
    FROM ys JOIN sx USING (g)
    WINDOW w AS (PARTITION BY ys.g, ys.measure ORDER BY ys.bin ROWS UNBOUNDED PRECEDING)
),
sy AS (
    SELECT run_id, measure AS source,
        sum(sdx * dy) AS sxy, sum(cy * dy * dy) AS syy, sum(cy * (cy * cy - 1.0)) AS ties,
        sum(sdx2 * dy2) AS sxy2, sum(cy2 * dy2 * dy2) AS syy2,
        sum(cy2 * (cy2 * cy2 - 1.0)) AS ties2
    FROM yd GROUP BY run_id, measure
),
rho AS (
    SELECT run_id, source, n::BIGINT AS n, sxy / sqrt(sxx * syy) AS rho,
        CASE WHEN syy = 0 THEN 'nan'::DOUBLE
            ELSE sqrt(ties / (12 * syy)) + ties / (24 * syy) END AS bound,
        n2::BIGINT AS n2, sxy2 / sqrt(sxx2 * syy2) AS rho2,
        CASE WHEN syy2 = 0 THEN 'nan'::DOUBLE
            ELSE sqrt(ties2 / (12 * syy2)) + ties2 / (24 * syy2) END AS bound2
    FROM sy JOIN sx USING (run_id)
)
SELECT run_id, m.measure, rho AS rho_all, rho2 AS rho_no_special, n, n2 AS n_no_special,
    greatest(bound, bound2) AS bound
FROM rho JOIN measures m USING (source)
ORDER BY run_id, m.ord
