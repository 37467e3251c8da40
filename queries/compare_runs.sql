-- name: compare_runs
-- description: Two runs side by side per layer and measure: mean of each and the difference b - a.
-- param: a = required | the first run_id
-- param: b = required | the second run_id
-- columns: layer, measure, mean_a, mean_b, diff, n_a, n_b
-- Reads layer_stats: the same answer in every output.detail mode.
WITH per_layer AS (
    SELECT run_id, layer, measure, sum(sum) / sum(n) AS mean, sum(n)::BIGINT AS n
    FROM layer_stats
    WHERE run_id IN ($a, $b)
    GROUP BY run_id, layer, measure
),
run_a AS (SELECT * FROM per_layer WHERE run_id = $a),
run_b AS (SELECT * FROM per_layer WHERE run_id = $b)
SELECT layer, measure, run_a.mean AS mean_a, run_b.mean AS mean_b,
    run_b.mean - run_a.mean AS diff, run_a.n AS n_a, run_b.n AS n_b
FROM run_a FULL OUTER JOIN run_b USING (layer, measure) JOIN measures USING (measure)
ORDER BY layer, ord
