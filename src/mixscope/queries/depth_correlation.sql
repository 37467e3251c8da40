-- name: depth_correlation
-- description: Per run and measure: Spearman rho between layer and ratio over every token row (does mixing grow or shrink with depth?).
-- param: run_id = null | only this run (default: every run)
-- columns: run_id, measure, rho, n, bound
-- From layer_hist: token-layer rows per (layer, value bin); ranks from counts, ties share
-- the mean of their ranks; `bound` is the worst-case |rho - exact rho| (spearman macro).
WITH cells AS (
    SELECT {'run_id': run_id, 'measure': measure} AS grp, layer AS x, bin AS y, sum(count) AS c
    FROM layer_hist
    WHERE $run_id IS NULL OR run_id = $run_id
    GROUP BY ALL
)
SELECT grp.run_id AS run_id, grp.measure AS measure, rho, n, bound
FROM spearman(cells, true) JOIN measures ON measures.measure = grp.measure
ORDER BY run_id, ord
