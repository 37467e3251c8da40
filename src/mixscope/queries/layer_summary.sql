-- name: layer_summary
-- description: Per run and layer: the five measures' token-level means side by side (what `mixscope run` prints).
-- param: run_id = null | only this run (default: every run)
-- columns: run_id, layer, tokens, attn_w, attn_n, attnres_w, attnres_n, attnresln_n
-- Reads layer_stats: the same answer in every output.detail mode.
WITH per_layer AS (
    SELECT run_id, layer, measure, sum(sum) / sum(n) AS mean, sum(n)::BIGINT AS n
    FROM layer_stats
    WHERE $run_id IS NULL OR run_id = $run_id
    GROUP BY run_id, layer, measure
)
SELECT
    run_id,
    layer,
    any_value(n)                                      AS tokens,
    any_value(mean) FILTER (measure = 'attn_w')       AS attn_w,
    any_value(mean) FILTER (measure = 'attn_n')       AS attn_n,
    any_value(mean) FILTER (measure = 'attnres_w')    AS attnres_w,
    any_value(mean) FILTER (measure = 'attnres_n')    AS attnres_n,
    any_value(mean) FILTER (measure = 'attnresln_n')  AS attnresln_n
FROM per_layer
GROUP BY run_id, layer
ORDER BY run_id, layer
