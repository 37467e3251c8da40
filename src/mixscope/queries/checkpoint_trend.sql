-- name: checkpoint_trend
-- description: Per model (runs with the same job name), training step, layer and measure: mean ratio, ordered by step.
-- param: model = null | only this job name (default: every model with a known step)
-- columns: model, step, run_id, layer, measure, mean, n
WITH per_layer AS (
    SELECT run_id, layer, count(*) AS n,
        avg(attn_w) AS attn_w, avg(attn_n) AS attn_n, avg(attnres_w) AS attnres_w,
        avg(attnres_n) AS attnres_n, avg(attnresln_n) AS attnresln_n
    FROM tokens
    WHERE run_id IN (SELECT run_id FROM runs WHERE step IS NOT NULL AND ($model IS NULL OR name = $model))
    GROUP BY run_id, layer
),
long AS (
    UNPIVOT per_layer
    ON attn_w, attn_n, attnres_w, attnres_n, attnresln_n
    INTO NAME measure VALUE mean
)
SELECT r.name AS model, r.step, l.run_id, l.layer, l.measure, l.mean, l.n
FROM long l JOIN runs r USING (run_id) JOIN measures m USING (measure)
ORDER BY model, r.step, l.layer, m.ord
