-- name: compare_token_types
-- description: Two runs side by side per layer, measure and token category (normal, mask, cls, sep, other_special): mean of each and the difference b - a.
-- param: a = required | the first run_id
-- param: b = required | the second run_id
-- columns: layer, measure, category, mean_a, mean_b, diff, n_a, n_b
-- Token-level means (Σ values / Σ tokens) from layer_stats, as compare_runs: the same
-- answer in every output.detail mode. A category one run lacks has that side empty.
WITH per_category AS (
    SELECT run_id, layer, measure, category, sum(sum) / sum(n) AS mean, sum(n)::BIGINT AS n
    FROM layer_stats
    WHERE run_id IN ($a, $b)
    GROUP BY run_id, layer, measure, category
),
run_a AS (SELECT * FROM per_category WHERE run_id = $a),
run_b AS (SELECT * FROM per_category WHERE run_id = $b)
SELECT layer, measure, category, run_a.mean AS mean_a, run_b.mean AS mean_b,
    run_b.mean - run_a.mean AS diff, run_a.n AS n_a, run_b.n AS n_b
FROM run_a FULL OUTER JOIN run_b USING (layer, measure, category) JOIN measures USING (measure)
ORDER BY layer, ord, category
