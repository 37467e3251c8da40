-- layer_summary: mean of the five measures per run and layer, over every token row.
-- Params: $run_id (the run to summarise).
WITH rows_of_run AS (
    SELECT * FROM tokens WHERE run_id = $run_id
)
SELECT
    layer,
    count(*)          AS tokens,
    avg(attn_w)       AS attn_w,
    avg(attn_n)       AS attn_n,
    avg(attnres_w)    AS attnres_w,
    avg(attnres_n)    AS attnres_n,
    avg(attnresln_n)  AS attnresln_n
FROM rows_of_run
GROUP BY layer
ORDER BY layer
