-- name: frequency_correlation_exact
-- description: frequency_correlation from the per-token rows (output.detail full; sample: the sampled documents), exact.
-- param: run_id = null | only this run (default: every run)
-- param: reference = null | an imported frequency table (default: the run's own corpus counts)
-- columns: run_id, measure, rho_all, rho_no_special, n, n_no_special, bound
-- Average ranks from counts of distinct values (spearman macro): one hash aggregation and
-- one sort of the distinct values for both populations, no window rank per occurrence. A
-- derived measure has its source's ranks, so its source's rho.
WITH with_rank AS (
    SELECT * FROM ranked_occurrences($reference)   -- helper macros of the views
    WHERE $run_id IS NULL OR run_id = $run_id
),
long AS (
    UNPIVOT (
        SELECT run_id, category, freq_rank, attn_w, attn_n, attnres_n, attnresln_n
        FROM with_rank
    )
    ON attn_w, attn_n, attnres_n, attnresln_n
    INTO NAME measure VALUE value
),
cells AS (  -- every occurrence (c), and those that are not [CLS]/[SEP] (c2)
    SELECT run_id || '|' || measure AS grp, freq_rank AS x, value AS y, 1 AS c,
        CASE WHEN category IN ('cls', 'sep') THEN 0 ELSE 1 END AS c2
    FROM long
),
rho AS (
    SELECT split_part(grp, '|', 1) AS run_id, split_part(grp, '|', 2) AS source, *
    FROM spearman(cells, false)
)
SELECT run_id, m.measure, rho AS rho_all, rho2 AS rho_no_special, n, n2 AS n_no_special,
    greatest(bound, bound2) AS bound
FROM rho JOIN measures m USING (source)
ORDER BY run_id, m.ord
