-- name: frequency_bins
-- description: Mean layer-averaged ratio per log-frequency-rank bin, per run and measure (Figure 4 as a table).
-- param: run_id = null | only this run (default: every run)
-- param: reference = null | an imported frequency table (default: the run's own corpus counts)
-- param: bins_per_decade = 4 | bins per factor of 10 in frequency rank
-- columns: run_id, measure, bin, rank_lo, rank_hi, mean, n
-- Bin b holds ranks in [10^(b/k), 10^((b+1)/k)) for k = bins_per_decade. Reads token_stats:
-- the mean of the occurrences' layer averages is Σ values / Σ token-layer rows, n the
-- occurrences (rows of layer 1). An occurrence is ranked by its ORIGINAL token
-- (token_stats.original_id, before masking): a [MASK] occurrence counts at the frequency
-- rank of the token it replaced, as in the authors' analysis and frequency_correlation.
WITH by_original AS (  -- token_stats rows under their original token (its string: own counts)
    SELECT s.run_id, s.original_id AS token_id, f.token, s.layer, s.measure, s.n, s.sum
    FROM token_stats_by_id s LEFT JOIN frequencies f  -- token_stats without its strings
        ON f.reference IS NULL AND f.run_id = s.run_id AND f.token_id = s.original_id
    WHERE $run_id IS NULL OR s.run_id = $run_id
),
with_rank AS (
    SELECT * FROM ranked(by_original, $reference)   -- helper macro of the views
),
binned AS (
    SELECT *, floor(log10(freq_rank) * $bins_per_decade)::INTEGER AS bin FROM with_rank
)
SELECT run_id, measure, bin,
    power(10, bin / $bins_per_decade::DOUBLE) AS rank_lo,
    power(10, (bin + 1) / $bins_per_decade::DOUBLE) AS rank_hi,
    sum(sum) / sum(n) AS mean, (sum(n) FILTER (layer = 1))::BIGINT AS n
FROM binned JOIN measures USING (measure)
GROUP BY run_id, measure, ord, bin
ORDER BY run_id, ord, bin
