-- name: checkpoint_trend
-- description: Per model (runs with the same job name), training step, layer and measure: mean ratio, ordered by step.
-- param: model = null | only this job name (default: every model with a known step)
-- columns: model, step, run_id, layer, measure, mean, n
-- Reads layer_stats: the same answer in every output.detail mode.
WITH per_layer AS (
    SELECT run_id, layer, measure, sum(sum) / sum(n) AS mean, sum(n)::BIGINT AS n
    FROM layer_stats
    WHERE run_id IN (SELECT run_id FROM runs WHERE step IS NOT NULL AND ($model IS NULL OR name = $model))
    GROUP BY run_id, layer, measure
)
SELECT r.name AS model, r.step, l.run_id, l.layer, l.measure, l.mean, l.n
FROM per_layer l JOIN runs r USING (run_id) JOIN measures m USING (measure)
ORDER BY model, r.step, l.layer, m.ord
