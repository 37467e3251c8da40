-- name: frequency_correlation
-- description: Per run and measure: Spearman rho between frequency rank and each token occurrence's layer-averaged ratio, all tokens and without [CLS]/[SEP] (Table 3).
-- param: run_id = null | only this run (default: every run)
-- param: reference = null | an imported frequency table (default: the run's own corpus counts)
-- columns: run_id, measure, rho_all, rho_no_special, n
-- Spearman = Pearson correlation of average ranks (ties share the mean of their ranks).
-- Tokens missing from a reference table are left out.
WITH with_rank AS (
    SELECT * FROM ranked_occurrences($reference)   -- helper macro of the views
    WHERE $run_id IS NULL OR run_id = $run_id
),
long AS (
    UNPIVOT with_rank
    ON attn_w, attn_n, attnres_w, attnres_n, attnresln_n
    INTO NAME measure VALUE value
),
ranked_all AS (
    SELECT run_id, measure,
        rank() OVER (PARTITION BY run_id, measure ORDER BY value)
            + (count(*) OVER (PARTITION BY run_id, measure, value) - 1) / 2.0 AS r_value,
        rank() OVER (PARTITION BY run_id, measure ORDER BY freq_rank)
            + (count(*) OVER (PARTITION BY run_id, measure, freq_rank) - 1) / 2.0 AS r_freq
    FROM long
),
ranked_no_special AS (
    SELECT run_id, measure,
        rank() OVER (PARTITION BY run_id, measure ORDER BY value)
            + (count(*) OVER (PARTITION BY run_id, measure, value) - 1) / 2.0 AS r_value,
        rank() OVER (PARTITION BY run_id, measure ORDER BY freq_rank)
            + (count(*) OVER (PARTITION BY run_id, measure, freq_rank) - 1) / 2.0 AS r_freq
    FROM long
    WHERE category NOT IN ('cls', 'sep')
),
rho_all AS (
    SELECT run_id, measure, corr(r_value, r_freq) AS rho_all, count(*) AS n
    FROM ranked_all GROUP BY run_id, measure
),
rho_no_special AS (
    SELECT run_id, measure, corr(r_value, r_freq) AS rho_no_special, count(*) AS n_no_special
    FROM ranked_no_special GROUP BY run_id, measure
)
SELECT run_id, measure, rho_all, rho_no_special, n, n_no_special
FROM rho_all LEFT JOIN rho_no_special USING (run_id, measure) JOIN measures USING (measure)
ORDER BY run_id, ord
