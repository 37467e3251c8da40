-- name: depth_correlation
-- description: Per run and measure: Spearman rho between layer and ratio over every token row (does mixing grow or shrink with depth?).
-- param: run_id = null | only this run (default: every run)
-- columns: run_id, measure, rho, n, bound
-- From layer_hist: token-layer rows per (layer, value bin); ranks from counts, ties share
-- the mean of their ranks; `bound` is the worst-case |rho - exact rho| (spearman macro).
-- A derived measure has its source's ranks, so its source's rho.
WITH cells AS (
    SELECT run_id || '|' || measure AS grp, layer AS x, bin AS y, count AS c, count AS c2
    FROM layer_hist
    WHERE ($run_id IS NULL OR run_id = $run_id) AND measure IN (SELECT source FROM measures)
),
rho AS (
    SELECT split_part(grp, '|', 1) AS run_id, split_part(grp, '|', 2) AS source, *
    FROM spearman(cells, true)
)
SELECT run_id, m.measure, rho, n, bound
FROM rho JOIN measures m USING (source)
ORDER BY run_id, m.ord
