-- name: summary
-- description: Per run and measure: mean, max and min over all tokens and layers (the paper's Table 2).
-- param: run_id = null | only this run (default: every run)
-- columns: run_id, measure, mean, max, min, n
-- Reads layer_stats (sufficient statistics): the same answer in every output.detail mode.
WITH per_measure AS (
    SELECT run_id, measure, sum(sum) / sum(n) AS mean, max(max) AS max, min(min) AS min,
        sum(n)::BIGINT AS n
    FROM layer_stats
    WHERE $run_id IS NULL OR run_id = $run_id
    GROUP BY run_id, measure
)
SELECT run_id, measure, mean, max, min, n
FROM per_measure JOIN measures USING (measure)
ORDER BY run_id, ord
