-- name: distance_profile
-- description: Per run, layer and distance bucket: the mean share of each token's context from that distance by norm (dist_n) and by weight (dist_w), the layer's mean reach in tokens by each, and the share from at least a given distance.
-- param: run_id = null | only this run (default: every run)
-- param: category = null | only tokens of this category (default: every token)
-- param: beyond = 64 | share_beyond counts the buckets whose every distance is at least this many tokens (the bucket holding it counts when it starts there: 64 counts 64 and up)
-- columns: run_id, layer, bucket, lo, hi, tokens, share_n, share_w, diff, reach_n, reach_w, beyond_n, beyond_w
-- group: distance
-- Token-level means from layer_stats (the same answer in every output.detail mode), over the
-- tokens that have context: a token's shares sum to 1 over the buckets, or are all 0 (a causal
-- sequence's first token), so Σ_b Σ dist_n_b counts the tokens with context (``tokens``) and
-- share = Σ dist_n_b / that count. Bucket b holds the distances lo = 2^b .. hi = 2^(b+1) - 1;
-- the last of a run's buckets (12, or analysis.distance_buckets) is open-ended (hi NULL).
-- reach_n / reach_w: the layer's mean distance in tokens, Σ_b share_b · d_b with the bucket's
-- representative distance d_b = its midpoint (lo + hi) / 2, and for the open-ended last
-- bucket its lower edge lo (so reach is a lower bound where that bucket has a share).
-- beyond_n / beyond_w: Σ of the shares of the buckets with lo >= $beyond, the same on every
-- bucket row of a layer. diff = share_n - share_w: where the weight overstates a distance
-- (negative) or understates it. Runs without the distance group are not listed.
WITH buckets AS (
    SELECT run_id,
        coalesce(json_extract(options, '$.analysis.distance_buckets')::INTEGER, 12) AS k
    FROM runs
),
cells AS (
    SELECT run_id, layer,
        regexp_extract(measure, '^dist_([nw])_([0-9]+)$', 1) AS side,
        regexp_extract(measure, '^dist_([nw])_([0-9]+)$', 2)::INTEGER AS bucket,
        sum(sum) AS s
    FROM layer_stats
    WHERE ($run_id IS NULL OR run_id = $run_id)
        AND ($category IS NULL OR category = $category)
        AND regexp_matches(measure, '^dist_[nw]_[0-9]+$')
    GROUP BY run_id, layer, measure
),
wide AS (
    SELECT c.run_id, c.layer, c.bucket, b.k,
        (2 ** c.bucket)::BIGINT AS lo,
        CASE WHEN c.bucket < b.k - 1 THEN (2 ** (c.bucket + 1))::BIGINT - 1 END AS hi,
        any_value(c.s) FILTER (side = 'n') AS s_n,
        any_value(c.s) FILTER (side = 'w') AS s_w
    FROM cells c JOIN buckets b USING (run_id)
    WHERE c.bucket < b.k
    GROUP BY c.run_id, c.layer, c.bucket, b.k
),
shares AS (
    SELECT run_id, layer, bucket, lo, hi,
        sum(s_n) OVER layer_rows AS tokens_n,
        s_n / nullif(sum(s_n) OVER layer_rows, 0) AS share_n,
        s_w / nullif(sum(s_w) OVER layer_rows, 0) AS share_w,
        CASE WHEN hi IS NULL THEN lo ELSE (lo + hi) / 2.0 END AS d
    FROM wide
    WINDOW layer_rows AS (PARTITION BY run_id, layer)
)
SELECT run_id, layer, bucket, lo, hi,
    round(tokens_n)::BIGINT AS tokens,
    share_n, share_w, share_n - share_w AS diff,
    sum(share_n * d) OVER layer_rows AS reach_n,
    sum(share_w * d) OVER layer_rows AS reach_w,
    coalesce(sum(share_n) FILTER (lo >= $beyond) OVER layer_rows, 0) AS beyond_n,
    coalesce(sum(share_w) FILTER (lo >= $beyond) OVER layer_rows, 0) AS beyond_w
FROM shares
WINDOW layer_rows AS (PARTITION BY run_id, layer)
ORDER BY run_id, layer, bucket
