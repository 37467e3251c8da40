-- name: compare_runs
-- description: Two runs side by side per layer and measure: mean of each and the difference b - a.
-- param: a = required | the first run_id
-- param: b = required | the second run_id
-- columns: layer, measure, mean_a, mean_b, diff, n_a, n_b
WITH per_layer AS (
    SELECT run_id, layer, count(*) AS n,
        avg(attn_w) AS attn_w, avg(attn_n) AS attn_n, avg(attnres_w) AS attnres_w,
        avg(attnres_n) AS attnres_n, avg(attnresln_n) AS attnresln_n
    FROM tokens
    WHERE run_id IN ($a, $b)
    GROUP BY run_id, layer
),
long AS (
    UNPIVOT per_layer
    ON attn_w, attn_n, attnres_w, attnres_n, attnresln_n
    INTO NAME measure VALUE mean
),
run_a AS (SELECT * FROM long WHERE run_id = $a),
run_b AS (SELECT * FROM long WHERE run_id = $b)
SELECT layer, measure, run_a.mean AS mean_a, run_b.mean AS mean_b,
    run_b.mean - run_a.mean AS diff, run_a.n AS n_a, run_b.n AS n_b
FROM run_a FULL OUTER JOIN run_b USING (layer, measure) JOIN measures USING (measure)
ORDER BY layer, ord
