-- name: component_profile
-- description: Per run and layer: the mean ratio at each scope of the block, attention to feed-forward (attn_n, attnres_n, attnresln_n, ff_n, ffres_n, ffresln_n), and the FF's change (ffresln_n - attnresln_n).
-- param: run_id = null | only this run (default: every run)
-- columns: run_id, layer, tokens, attn_n, attnres_n, attnresln_n, ff_n, ffres_n, ffresln_n, ff_change
-- group: paper, ff
-- The scopes in the order a token's vector passes through one block (Kobayashi et al.,
-- ICLR 2024: ATB -> ATBFF -> ATBFFRES -> ATBFFRESLN): the attention (attn_n), its residual
-- (attnres_n), the norm after it (attnresln_n: the attention block's output), the
-- feed-forward (ff_n), its residual (ffres_n) and the norm after it (ffresln_n: the layer's
-- output). ff_change = ffresln_n - attnresln_n: how much the feed-forward block, with its
-- residual and norm, raises (> 0) or lowers the share of context the attention block left.
-- Token-level means (sum / n) from layer_stats, as layer_summary: the same answer in every
-- output.detail mode and flat in corpus size. Only runs with both the paper and the ff
-- groups are listed.
WITH paired AS (  -- the selected runs that have every scope
    SELECT run_id
    FROM run_measures
    WHERE grp IN ('paper', 'ff')
    GROUP BY run_id
    HAVING count(DISTINCT grp) = 2
),
per_layer AS (
    SELECT run_id, layer, measure, sum(sum) / sum(n) AS mean, sum(n)::BIGINT AS n
    FROM layer_stats
    WHERE ($run_id IS NULL OR run_id = $run_id)
        AND run_id IN (SELECT run_id FROM paired)
        AND measure IN ('attn_n', 'attnres_n', 'attnresln_n', 'ff_n', 'ffres_n', 'ffresln_n')
    GROUP BY run_id, layer, measure
),
wide AS (
    SELECT run_id, layer,
        max(n) AS tokens,  -- the same in every measure of the run
        any_value(mean) FILTER (measure = 'attn_n') AS attn_n,
        any_value(mean) FILTER (measure = 'attnres_n') AS attnres_n,
        any_value(mean) FILTER (measure = 'attnresln_n') AS attnresln_n,
        any_value(mean) FILTER (measure = 'ff_n') AS ff_n,
        any_value(mean) FILTER (measure = 'ffres_n') AS ffres_n,
        any_value(mean) FILTER (measure = 'ffresln_n') AS ffresln_n
    FROM per_layer
    GROUP BY run_id, layer
)
SELECT run_id, layer, tokens, attn_n, attnres_n, attnresln_n, ff_n, ffres_n, ffresln_n,
    ffresln_n - attnresln_n AS ff_change
FROM wide
ORDER BY run_id, layer
