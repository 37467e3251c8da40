-- name: layer_summary
-- description: Per run and layer: every measure's token-level mean side by side (what `mixscope run` prints).
-- param: run_id = null | only this run (default: every run)
-- columns: run_id, layer, tokens, {{measures:@}}
-- Reads layer_stats: the same answer in every output.detail mode. One column per measure
-- of the selected runs' groups (NULL for a run without it), listed from the registry.
WITH per_layer AS (
    SELECT run_id, layer, measure, sum(sum) / sum(n) AS mean, sum(n)::BIGINT AS n
    FROM layer_stats
    WHERE $run_id IS NULL OR run_id = $run_id
    GROUP BY run_id, layer, measure
)
SELECT
    run_id,
    layer,
    max(n)  AS tokens,  -- the same in every measure the run has
    {{measures:any_value(mean) FILTER (measure = '@') AS @}}
FROM per_layer
GROUP BY run_id, layer
ORDER BY run_id, layer
