-- name: checkpoint_trend
-- description: Per model (runs of one job name and corpus), training step, layer and measure: mean ratio, ordered by step.
-- param: model = null | only this job name (default: every model with a known step)
-- columns: model, step, run_id, layer, measure, mean, n
-- Reads layer_stats: the same answer in every output.detail mode. A job name used over
-- several corpora is one series per corpus, labelled "name [corpus]": steps of different
-- corpora never share a line.
WITH stepped AS (
    SELECT run_id, name, step, corpus, corpus_fingerprint
    FROM runs
    WHERE step IS NOT NULL AND ($model IS NULL OR name = $model)
),
corpora AS (
    SELECT name, count(DISTINCT corpus_fingerprint) AS n_corpora FROM stepped GROUP BY name
),
series AS (
    SELECT s.run_id, s.step,
           CASE WHEN c.n_corpora > 1 THEN s.name || ' [' || s.corpus || ']' ELSE s.name END AS model
    FROM stepped s JOIN corpora c USING (name)
),
per_layer AS (
    SELECT run_id, layer, measure, sum(sum) / sum(n) AS mean, sum(n)::BIGINT AS n
    FROM layer_stats
    WHERE run_id IN (SELECT run_id FROM series)
    GROUP BY run_id, layer, measure
)
SELECT s.model, s.step, l.run_id, l.layer, l.measure, l.mean, l.n
FROM per_layer l JOIN series s USING (run_id) JOIN measures m USING (measure)
ORDER BY s.model, s.step, l.layer, m.ord
