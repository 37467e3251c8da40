-- name: frequency_correlation
-- description: Per run and measure: Spearman rho between frequency rank and each token occurrence's layer-averaged ratio, all tokens and without [CLS]/[SEP] (Table 3).
-- param: run_id = null | only this run (default: every run)
-- param: reference = null | an imported frequency table (default: the run's own corpus counts)
-- columns: run_id, measure, rho_all, rho_no_special, n
-- Spearman = Pearson correlation of average ranks (ties share the mean of their ranks:
-- (lowest rank + highest rank) / 2, from an ascending and a descending rank).
-- Tokens missing from a reference table are left out.
WITH with_rank AS (
    SELECT * FROM ranked_occurrences($reference)   -- helper macro of the views
    WHERE $run_id IS NULL OR run_id = $run_id
),
subsets AS (  -- every occurrence, and again without [CLS]/[SEP]
    SELECT 'all' AS subset, * FROM with_rank
    UNION ALL
    SELECT 'no_special' AS subset, * FROM with_rank WHERE category NOT IN ('cls', 'sep')
),
ranked AS (  -- average ranks (ties share the mean of their ranks); the frequency rank once
    SELECT subset, run_id, n,
        (rank() OVER (w ORDER BY freq_rank) + n + 1 - rank() OVER (w ORDER BY freq_rank DESC)) / 2.0 AS r_freq,
        (rank() OVER (w ORDER BY attn_w) + n + 1 - rank() OVER (w ORDER BY attn_w DESC)) / 2.0 AS attn_w,
        (rank() OVER (w ORDER BY attn_n) + n + 1 - rank() OVER (w ORDER BY attn_n DESC)) / 2.0 AS attn_n,
        (rank() OVER (w ORDER BY attnres_w) + n + 1 - rank() OVER (w ORDER BY attnres_w DESC)) / 2.0 AS attnres_w,
        (rank() OVER (w ORDER BY attnres_n) + n + 1 - rank() OVER (w ORDER BY attnres_n DESC)) / 2.0 AS attnres_n,
        (rank() OVER (w ORDER BY attnresln_n) + n + 1 - rank() OVER (w ORDER BY attnresln_n DESC)) / 2.0 AS attnresln_n
    FROM (SELECT *, count(*) OVER (PARTITION BY subset, run_id) AS n FROM subsets)
    WINDOW w AS (PARTITION BY subset, run_id)
),
rho AS (
    SELECT subset, run_id, any_value(n) AS n,
        corr(attn_w, r_freq) AS attn_w, corr(attn_n, r_freq) AS attn_n,
        corr(attnres_w, r_freq) AS attnres_w, corr(attnres_n, r_freq) AS attnres_n,
        corr(attnresln_n, r_freq) AS attnresln_n
    FROM ranked GROUP BY subset, run_id
),
long AS (
    UNPIVOT rho ON attn_w, attn_n, attnres_w, attnres_n, attnresln_n INTO NAME measure VALUE rho
)
SELECT a.run_id, a.measure, a.rho AS rho_all, b.rho AS rho_no_special, a.n, b.n AS n_no_special
FROM (SELECT * FROM long WHERE subset = 'all') a
LEFT JOIN (SELECT * FROM long WHERE subset = 'no_special') b USING (run_id, measure)
JOIN measures USING (measure)
ORDER BY a.run_id, ord
