-- name: frequency_correlation
-- description: Per run and measure: Spearman rho between frequency rank and each token occurrence's layer-averaged ratio, all tokens and without [CLS]/[SEP] (Table 3).
-- param: run_id = null | only this run (default: every run)
-- param: reference = null | an imported frequency table (default: the run's own corpus counts)
-- columns: run_id, measure, rho_all, rho_no_special, n, n_no_special, bound
-- From token_hist: occurrences per (token, bin of the layer-averaged value), so ranks of
-- values come from bin totals (ties share the mean of their ranks). `bound` is the
-- worst-case |rho - exact rho| of the two (spearman macro); frequency_correlation_exact
-- computes it from the per-token rows. Tokens missing from a reference table are left out.
WITH with_rank AS (
    SELECT * FROM ranked(token_hist, $reference)   -- helper macros of the views
    WHERE $run_id IS NULL OR run_id = $run_id
),
cells AS (  -- every occurrence, and again without [CLS]/[SEP]
    SELECT {'run_id': run_id, 'measure': measure, 'subset': 'all'} AS grp,
        freq_rank AS x, bin AS y, count AS c
    FROM with_rank
    UNION ALL
    SELECT {'run_id': run_id, 'measure': measure, 'subset': 'no_special'},
        freq_rank, bin, count
    FROM with_rank WHERE category NOT IN ('cls', 'sep')
),
rho AS (SELECT grp.run_id, grp.measure, grp.subset, n, rho, bound FROM spearman(cells, true))
SELECT a.run_id, a.measure, a.rho AS rho_all, b.rho AS rho_no_special, a.n, b.n AS n_no_special,
    greatest(a.bound, b.bound) AS bound
FROM (SELECT * FROM rho WHERE subset = 'all') a
LEFT JOIN (SELECT * FROM rho WHERE subset = 'no_special') b USING (run_id, measure)
JOIN measures USING (measure)
ORDER BY a.run_id, ord
