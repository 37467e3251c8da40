-- name: top_tokens
-- description: Per run and measure, the tokens with the highest and lowest mean ratio (over their occurrences and all layers).
-- param: run_id = null | only this run (default: every run)
-- param: min_count = 20 | tokens seen fewer times than this are left out
-- param: k = 10 | how many tokens at each end
-- columns: run_id, measure, direction, rank, token, token_id, mean, count
-- Reads token_stats (without its strings: token_stats_by_id; the 2·k tokens shown get their
-- string from token_strings); count = occurrences (the rows of layer 1, every occurrence
-- has all layers).
WITH per_token AS (
    SELECT run_id, token_id, measure,
        (sum(n) FILTER (layer = 1))::BIGINT AS count, sum(sum) / sum(n) AS mean
    FROM token_stats_by_id
    WHERE $run_id IS NULL OR run_id = $run_id
    GROUP BY run_id, token_id, measure
    HAVING sum(n) FILTER (layer = 1) >= $min_count
),
numbered AS (
    SELECT *,
        row_number() OVER (PARTITION BY run_id, measure ORDER BY mean DESC, token_id) AS high,
        row_number() OVER (PARTITION BY run_id, measure ORDER BY mean ASC, token_id) AS low
    FROM per_token
),
ranked AS (  -- the tokens shown, with their strings
    SELECT n.*, s.token
    FROM numbered n LEFT JOIN token_strings s USING (run_id, token_id)
    WHERE high <= $k OR low <= $k
)
SELECT run_id, measure, 'highest' AS direction, high AS rank, token, token_id, mean, count
FROM ranked JOIN measures USING (measure) WHERE high <= $k
UNION ALL
SELECT run_id, measure, 'lowest', low, token, token_id, mean, count
FROM ranked JOIN measures USING (measure) WHERE low <= $k
ORDER BY run_id, measure, direction, rank
