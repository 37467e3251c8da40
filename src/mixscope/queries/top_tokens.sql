-- name: top_tokens
-- description: Per run and measure, the tokens with the highest and lowest mean ratio (over their occurrences and all layers).
-- param: run_id = null | only this run (default: every run)
-- param: min_count = 20 | tokens seen fewer times than this are left out
-- param: k = 10 | how many tokens at each end
-- columns: run_id, measure, direction, rank, token, token_id, mean, count
WITH per_token AS (
    SELECT run_id, token_id, any_value(token) AS token,
        count(DISTINCT (doc_id, segment, position)) AS count,
        avg(attn_w) AS attn_w, avg(attn_n) AS attn_n, avg(attnres_w) AS attnres_w,
        avg(attnres_n) AS attnres_n, avg(attnresln_n) AS attnresln_n
    FROM tokens
    WHERE $run_id IS NULL OR run_id = $run_id
    GROUP BY run_id, token_id
    HAVING count(DISTINCT (doc_id, segment, position)) >= $min_count
),
long AS (
    UNPIVOT per_token
    ON attn_w, attn_n, attnres_w, attnres_n, attnresln_n
    INTO NAME measure VALUE mean
),
ranked AS (
    SELECT *,
        row_number() OVER (PARTITION BY run_id, measure ORDER BY mean DESC, token_id) AS high,
        row_number() OVER (PARTITION BY run_id, measure ORDER BY mean ASC, token_id) AS low
    FROM long
)
SELECT run_id, measure, 'highest' AS direction, high AS rank, token, token_id, mean, count
FROM ranked JOIN measures USING (measure) WHERE high <= $k
UNION ALL
SELECT run_id, measure, 'lowest', low, token, token_id, mean, count
FROM ranked JOIN measures USING (measure) WHERE low <= $k
ORDER BY run_id, measure, direction, rank
