-- name: layer_profile
-- description: Per run, layer and measure: token-level mean and per-sequence macro mean (Figure 3, "overall").
-- param: run_id = null | only this run (default: every run)
-- param: measure = null | only this measure (default: every measure)
-- columns: run_id, layer, measure, mean, seq_mean, n
-- mean = Σ values / Σ tokens (layer_stats); seq_mean = mean over sequences of each
-- sequence's mean (sequence_stats, category 'all'). Same answer in every detail mode.
WITH tokens_level AS (
    SELECT run_id, layer, measure, sum(sum) / sum(n) AS mean, sum(n)::BIGINT AS n
    FROM layer_stats
    WHERE ($run_id IS NULL OR run_id = $run_id) AND ($measure IS NULL OR measure = $measure)
    GROUP BY run_id, layer, measure
),
sequence_level AS (
    SELECT run_id, layer, measure, seq_sum / sequences AS seq_mean
    FROM sequence_stats
    WHERE category = 'all' AND ($run_id IS NULL OR run_id = $run_id)
        AND ($measure IS NULL OR measure = $measure)
)
SELECT run_id, layer, measure, mean, seq_mean, n
FROM tokens_level JOIN sequence_level USING (run_id, layer, measure) JOIN measures USING (measure)
ORDER BY run_id, layer, ord
