-- name: summary
-- description: Per run and measure: mean, max and min over all tokens and layers (the paper's Table 2).
-- param: run_id = null | only this run (default: every run)
-- columns: run_id, measure, mean, max, min, n
WITH selected AS (
    SELECT * FROM tokens WHERE $run_id IS NULL OR run_id = $run_id
),
wide AS (
    SELECT
        run_id,
        count(*) AS n,
        avg(attn_w) AS attn_w_mean, max(attn_w) AS attn_w_max, min(attn_w) AS attn_w_min,
        avg(attn_n) AS attn_n_mean, max(attn_n) AS attn_n_max, min(attn_n) AS attn_n_min,
        avg(attnres_w) AS attnres_w_mean, max(attnres_w) AS attnres_w_max, min(attnres_w) AS attnres_w_min,
        avg(attnres_n) AS attnres_n_mean, max(attnres_n) AS attnres_n_max, min(attnres_n) AS attnres_n_min,
        avg(attnresln_n) AS attnresln_n_mean, max(attnresln_n) AS attnresln_n_max, min(attnresln_n) AS attnresln_n_min
    FROM selected
    GROUP BY run_id
),
long AS (
    UNPIVOT wide
    ON (attn_w_mean, attn_w_max, attn_w_min) AS attn_w,
       (attn_n_mean, attn_n_max, attn_n_min) AS attn_n,
       (attnres_w_mean, attnres_w_max, attnres_w_min) AS attnres_w,
       (attnres_n_mean, attnres_n_max, attnres_n_min) AS attnres_n,
       (attnresln_n_mean, attnresln_n_max, attnresln_n_min) AS attnresln_n
    INTO NAME measure VALUE mean, max, min
)
SELECT run_id, measure, mean, max, min, n
FROM long JOIN measures USING (measure)
ORDER BY run_id, ord
