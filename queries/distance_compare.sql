-- name: distance_compare
-- description: Two runs or checkpoints side by side per layer and distance bucket: the share of the context from that distance by norm and by weight in each, and the differences b - a.
-- param: a = required | the first run_id
-- param: b = required | the second run_id
-- columns: layer, bucket, lo, share_n_a, share_n_b, diff_n, share_w_a, share_w_b, diff_w
-- group: distance
-- The shares of distance_profile (token-level, over the tokens with context, from
-- layer_stats): bucket b holds the distances 2^b .. 2^(b+1) - 1 (lo = 2^b; a run's last
-- bucket is open-ended). A bucket or layer one run lacks has that side empty.
WITH cells AS (
    SELECT run_id, layer,
        regexp_extract(measure, '^dist_([nw])_([0-9]+)$', 1) AS side,
        regexp_extract(measure, '^dist_([nw])_([0-9]+)$', 2)::INTEGER AS bucket,
        sum(sum) AS s
    FROM layer_stats
    WHERE run_id IN ($a, $b) AND regexp_matches(measure, '^dist_[nw]_[0-9]+$')
    GROUP BY run_id, layer, measure
),
shares AS (
    SELECT run_id, layer, bucket, side,
        s / nullif(sum(s) OVER (PARTITION BY run_id, layer, side), 0) AS share
    FROM cells
),
wide AS (
    SELECT run_id, layer, bucket,
        any_value(share) FILTER (side = 'n') AS share_n,
        any_value(share) FILTER (side = 'w') AS share_w
    FROM shares GROUP BY run_id, layer, bucket
),
run_a AS (SELECT * FROM wide WHERE run_id = $a),
run_b AS (SELECT * FROM wide WHERE run_id = $b)
SELECT layer, bucket, (2 ** bucket)::BIGINT AS lo,
    run_a.share_n AS share_n_a, run_b.share_n AS share_n_b, run_b.share_n - run_a.share_n AS diff_n,
    run_a.share_w AS share_w_a, run_b.share_w AS share_w_b, run_b.share_w - run_a.share_w AS diff_w
FROM run_a FULL OUTER JOIN run_b USING (layer, bucket)
ORDER BY layer, bucket
