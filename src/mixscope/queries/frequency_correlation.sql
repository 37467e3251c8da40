-- name: frequency_correlation
-- description: Per run and measure: Spearman rho between frequency rank and each token occurrence's layer-averaged ratio, all tokens and without [CLS]/[SEP] (Table 3).
-- param: run_id = null | only this run (default: every run)
-- param: reference = null | an imported frequency table (default: the run's own corpus counts)
-- columns: run_id, measure, rho_all, rho_no_special, n
-- Spearman = Pearson correlation of average ranks (ties share the mean of their ranks).
-- Tokens missing from a reference table are left out.
WITH occurrences AS (
    SELECT run_id, doc_id, segment, position,
        any_value(token_id) AS token_id, any_value(token) AS token, any_value(category) AS category,
        avg(attn_w) AS attn_w, avg(attn_n) AS attn_n, avg(attnres_w) AS attnres_w,
        avg(attnres_n) AS attnres_n, avg(attnresln_n) AS attnresln_n
    FROM tokens
    WHERE $run_id IS NULL OR run_id = $run_id
    GROUP BY run_id, doc_id, segment, position
),
with_rank AS (
    SELECT o.*, f.rank AS freq_rank          -- the run's own counts
    FROM occurrences o JOIN frequencies f ON f.run_id = o.run_id AND f.token_id = o.token_id
    WHERE $reference IS NULL
    UNION ALL
    SELECT o.*, f.rank                       -- a reference keyed by token id
    FROM occurrences o JOIN frequencies f ON f.token_id = o.token_id
    WHERE f.reference = $reference AND f.token_id IS NOT NULL
    UNION ALL
    SELECT o.*, f.rank                       -- a reference keyed by token string
    FROM occurrences o JOIN frequencies f ON f.token = o.token
    WHERE f.reference = $reference AND f.token_id IS NULL
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
