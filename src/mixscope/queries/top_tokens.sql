-- name: top_tokens
-- description: Per run and measure, the tokens with the highest and lowest mean ratio (over their occurrences and all layers).
-- param: run_id = null | only this run (default: every run)
-- param: min_count = 20 | tokens seen fewer times than this are left out
-- param: k = 10 | how many tokens at each end
-- columns: run_id, measure, direction, rank, token, token_id, mean, count
-- Reads token_stats; count = occurrences (the rows of layer 1, every occurrence has all layers).
WITH per_token AS (
    SELECT run_id, token_id, measure, min(token) AS token,
        (sum(n) FILTER (layer = 1))::BIGINT AS count, sum(sum) / sum(n) AS mean
    FROM token_stats
    WHERE $run_id IS NULL OR run_id = $run_id
    GROUP BY run_id, token_id, measure
    HAVING sum(n) FILTER (layer = 1) >= $min_count
),
ranked AS (
    SELECT *,
        row_number() OVER (PARTITION BY run_id, measure ORDER BY mean DESC, token_id) AS high,
        row_number() OVER (PARTITION BY run_id, measure ORDER BY mean ASC, token_id) AS low
    FROM per_token
)
SELECT run_id, measure, 'highest' AS direction, high AS rank, token, token_id, mean, count
FROM ranked JOIN measures USING (measure) WHERE high <= $k
UNION ALL
SELECT run_id, measure, 'lowest', low, token, token_id, mean, count
FROM ranked JOIN measures USING (measure) WHERE low <= $k
ORDER BY run_id, measure, direction, rank
