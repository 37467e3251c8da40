-- name: frequency_correlation
-- description: Per run and measure: Spearman rho between frequency rank and each token occurrence's layer-averaged ratio, all tokens and without [CLS]/[SEP] (Table 3).
-- param: run_id = null | only this run (default: every run)
-- param: reference = null | an imported frequency table (default: the run's own corpus counts)
-- columns: run_id, measure, rho_all, rho_no_special, n, n_no_special, bound
-- From token_hist: occurrences per (token, bin of the layer-averaged value), so ranks of
-- values come from bin totals (ties share the mean of their ranks). `bound` is the
-- worst-case |rho - exact rho| of the two (spearman macro); frequency_correlation_exact
-- computes it from the per-token rows. A derived measure (attnres_w = attn_w / 2) has its
-- source's ranks, so its source's rho. Tokens missing from a reference table are left out.
WITH cells AS (  -- every occurrence (c), and those that are not [CLS]/[SEP] (c2)
    SELECT run_id || '|' || measure AS grp, freq_rank AS x, bin AS y, count AS c,
        CASE WHEN category IN ('cls', 'sep') THEN 0 ELSE count END AS c2
    FROM ranked(token_hist, $reference)   -- helper macros of the views
    WHERE ($run_id IS NULL OR run_id = $run_id) AND measure IN (SELECT source FROM measures)
),
rho AS (
    SELECT split_part(grp, '|', 1) AS run_id, split_part(grp, '|', 2) AS source, *
    FROM spearman(cells, true)
)
SELECT run_id, m.measure, rho AS rho_all, rho2 AS rho_no_special, n, n2 AS n_no_special,
    greatest(bound, bound2) AS bound
FROM rho JOIN measures m USING (source)
ORDER BY run_id, m.ord
