-- name: frequency_correlation_exact
-- description: frequency_correlation from the per-token rows (output.detail full; sample: the sampled documents), exact.
-- param: run_id = null | only this run (default: every run)
-- param: reference = null | an imported frequency table (default: the run's own corpus counts)
-- columns: run_id, measure, rho_all, rho_no_special, n, n_no_special, bound
-- Average ranks from counts of distinct (frequency rank, value) pairs (spearman macro):
-- hash aggregation and sorts of distinct values, no window rank over every occurrence.
WITH with_rank AS (
    SELECT * FROM ranked_occurrences($reference)   -- helper macros of the views
    WHERE $run_id IS NULL OR run_id = $run_id
),
long AS (
    UNPIVOT with_rank
    ON attn_w, attn_n, attnres_w, attnres_n, attnresln_n
    INTO NAME measure VALUE value
),
cells AS (
    SELECT {'run_id': run_id, 'measure': measure, 'subset': 'all'} AS grp,
        freq_rank AS x, value AS y, count(*) AS c
    FROM long GROUP BY ALL
    UNION ALL
    SELECT {'run_id': run_id, 'measure': measure, 'subset': 'no_special'},
        freq_rank, value, count(*)
    FROM long WHERE category NOT IN ('cls', 'sep') GROUP BY ALL
),
rho AS (SELECT grp.run_id, grp.measure, grp.subset, n, rho, bound FROM spearman(cells, false))
SELECT a.run_id, a.measure, a.rho AS rho_all, b.rho AS rho_no_special, a.n, b.n AS n_no_special,
    greatest(a.bound, b.bound) AS bound
FROM (SELECT * FROM rho WHERE subset = 'all') a
LEFT JOIN (SELECT * FROM rho WHERE subset = 'no_special') b USING (run_id, measure)
JOIN measures USING (measure)
ORDER BY a.run_id, ord
