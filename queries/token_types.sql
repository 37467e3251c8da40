-- name: token_types
-- description: Per run, layer, measure and token category (normal, mask, cls, sep, other_special): per-sequence macro mean (Figure 3).
-- param: run_id = null | only this run (default: every run)
-- param: measure = null | only this measure (default: every measure)
-- param: layer = null | only this layer, 1-based (default: every layer)
-- param: category = null | only this category: normal, mask, cls, sep, other_special (default: all)
-- columns: run_id, layer, measure, category, seq_mean, n
-- A sequence counts towards a category only if it has tokens of that category
-- (sequence_stats); n is the category's token count (layer_stats).
WITH macro AS (
    SELECT run_id, layer, measure, category, seq_sum / sequences AS seq_mean
    FROM sequence_stats
    WHERE category <> 'all' AND ($run_id IS NULL OR run_id = $run_id)
        AND ($measure IS NULL OR measure = $measure) AND ($layer IS NULL OR layer = $layer)
        AND ($category IS NULL OR category = $category)
),
counts AS (
    SELECT run_id, layer, measure, category, sum(n)::BIGINT AS n
    FROM layer_stats
    WHERE ($run_id IS NULL OR run_id = $run_id) AND ($measure IS NULL OR measure = $measure)
        AND ($layer IS NULL OR layer = $layer) AND ($category IS NULL OR category = $category)
    GROUP BY run_id, layer, measure, category
)
SELECT run_id, layer, measure, category, seq_mean, n
FROM macro JOIN counts USING (run_id, layer, measure, category) JOIN measures USING (measure)
ORDER BY run_id, layer, ord, category
