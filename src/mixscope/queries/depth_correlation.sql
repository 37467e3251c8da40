-- name: depth_correlation
-- description: Per run and measure: Spearman rho between layer and ratio over every token row (does mixing grow or shrink with depth?).
-- param: run_id = null | only this run (default: every run)
-- columns: run_id, measure, rho, n
WITH selected AS (
    SELECT * FROM tokens WHERE $run_id IS NULL OR run_id = $run_id
),
long AS (
    UNPIVOT (SELECT run_id, layer, attn_w, attn_n, attnres_w, attnres_n, attnresln_n FROM selected)
    ON attn_w, attn_n, attnres_w, attnres_n, attnresln_n
    INTO NAME measure VALUE value
),
ranked AS (
    SELECT run_id, measure,
        rank() OVER (PARTITION BY run_id, measure ORDER BY value)
            + (count(*) OVER (PARTITION BY run_id, measure, value) - 1) / 2.0 AS r_value,
        rank() OVER (PARTITION BY run_id, measure ORDER BY layer)
            + (count(*) OVER (PARTITION BY run_id, measure, layer) - 1) / 2.0 AS r_layer
    FROM long
)
SELECT run_id, measure, corr(r_value, r_layer) AS rho, count(*) AS n
FROM ranked JOIN measures USING (measure)
GROUP BY run_id, measure, ord
ORDER BY run_id, ord
