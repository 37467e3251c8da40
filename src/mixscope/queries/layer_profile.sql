-- name: layer_profile
-- description: Per run, layer and measure: token-level mean and per-sequence macro mean (Figure 3, "overall").
-- param: run_id = null | only this run (default: every run)
-- columns: run_id, layer, measure, mean, seq_mean, n
-- One scan: per-sequence sums give both the token-level mean (Σ sums / Σ n) and the
-- macro mean (mean over sequences of each sequence's mean).
WITH selected AS (
    SELECT * FROM tokens WHERE $run_id IS NULL OR run_id = $run_id
),
per_sequence AS (
    SELECT run_id, layer, doc_id, segment, count(*) AS n,
        sum(attn_w) AS attn_w, sum(attn_n) AS attn_n, sum(attnres_w) AS attnres_w,
        sum(attnres_n) AS attnres_n, sum(attnresln_n) AS attnresln_n
    FROM selected
    GROUP BY run_id, layer, doc_id, segment
),
long AS (
    UNPIVOT per_sequence
    ON attn_w, attn_n, attnres_w, attnres_n, attnresln_n
    INTO NAME measure VALUE total
)
SELECT run_id, layer, measure,
    sum(total) / sum(n) AS mean,
    avg(total / n) AS seq_mean,
    sum(n)::BIGINT AS n
FROM long JOIN measures USING (measure)
GROUP BY run_id, layer, measure, ord
ORDER BY run_id, layer, ord
