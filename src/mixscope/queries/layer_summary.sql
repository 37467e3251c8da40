-- name: layer_summary
-- description: Per run and layer: the five measures' token-level means side by side (what `mixscope run` prints).
-- param: run_id = null | only this run (default: every run)
-- columns: run_id, layer, tokens, attn_w, attn_n, attnres_w, attnres_n, attnresln_n
WITH selected AS (
    SELECT * FROM tokens WHERE $run_id IS NULL OR run_id = $run_id
)
SELECT
    run_id,
    layer,
    count(*)          AS tokens,
    avg(attn_w)       AS attn_w,
    avg(attn_n)       AS attn_n,
    avg(attnres_w)    AS attnres_w,
    avg(attnres_n)    AS attnres_n,
    avg(attnresln_n)  AS attnresln_n
FROM selected
GROUP BY run_id, layer
ORDER BY run_id, layer
