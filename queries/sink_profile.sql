-- name: sink_profile
-- description: Per run, layer and token category: how much tokens draw from the first position by attention weight (sink_w) and by norm (sink_n), the gap, and a learned sink's mass (lsink_w).
-- param: run_id = null | only this run (default: every run)
-- columns: run_id, layer, category, tokens, sink_w, sink_n, gap, lsink_w
-- group: sink
-- also: learned_sink
-- Token-level means (Σ / n) from layer_stats, so the same answer in every output.detail
-- mode; category 'all' pools every token of the layer. gap = sink_w - sink_n: how much more
-- of the attention weight than of the vector norm goes to the first position ([CLS], BOS or
-- the first token; Kobayashi et al. 2020 found the weight overstates it). lsink_w: the
-- learned sinks' mass (gpt-oss: weight on no token at all), NULL for runs without the
-- learned_sink group. Runs without the sink group are not listed.
WITH per_category AS (
    SELECT run_id, layer, category, measure, sum(sum) AS s, sum(n) AS n
    FROM layer_stats
    WHERE ($run_id IS NULL OR run_id = $run_id) AND measure IN ('sink_w', 'sink_n', 'lsink_w')
    GROUP BY run_id, layer, category, measure
),
with_all AS (  -- every category, then all tokens of the layer
    SELECT run_id, layer, category, measure, s, n FROM per_category
    UNION ALL
    SELECT run_id, layer, 'all' AS category, measure, sum(s) AS s, sum(n) AS n
    FROM per_category GROUP BY run_id, layer, measure
),
wide AS (
    SELECT run_id, layer, category,
        max(n)::BIGINT AS tokens,
        any_value(s / n) FILTER (measure = 'sink_w') AS sink_w,
        any_value(s / n) FILTER (measure = 'sink_n') AS sink_n,
        any_value(s / n) FILTER (measure = 'lsink_w') AS lsink_w
    FROM with_all
    GROUP BY run_id, layer, category
)
SELECT run_id, layer, category, tokens, sink_w, sink_n, sink_w - sink_n AS gap, lsink_w
FROM wide
WHERE sink_w IS NOT NULL
ORDER BY run_id, layer, CASE category WHEN 'all' THEN 0 WHEN 'cls' THEN 1 WHEN 'sep' THEN 2
    WHEN 'mask' THEN 3 WHEN 'normal' THEN 4 ELSE 5 END
