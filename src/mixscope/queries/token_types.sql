-- name: token_types
-- description: Per run, layer, measure and token category (normal, mask, cls, sep, other_special): per-sequence macro mean (Figure 3).
-- param: run_id = null | only this run (default: every run)
-- columns: run_id, layer, measure, category, seq_mean, n
-- A sequence counts towards a category only if it has tokens of that category.
WITH selected AS (
    SELECT * FROM tokens WHERE $run_id IS NULL OR run_id = $run_id
),
per_sequence AS (
    SELECT run_id, layer, category, doc_id, segment, count(*) AS n,
        avg(attn_w) AS attn_w, avg(attn_n) AS attn_n, avg(attnres_w) AS attnres_w,
        avg(attnres_n) AS attnres_n, avg(attnresln_n) AS attnresln_n
    FROM selected
    GROUP BY run_id, layer, category, doc_id, segment
),
long AS (
    UNPIVOT per_sequence
    ON attn_w, attn_n, attnres_w, attnres_n, attnresln_n
    INTO NAME measure VALUE value
)
SELECT run_id, layer, measure, category, avg(value) AS seq_mean, sum(n)::BIGINT AS n
FROM long JOIN measures USING (measure)
GROUP BY run_id, layer, measure, ord, category
ORDER BY run_id, layer, ord, category
