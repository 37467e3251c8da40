-- name: frequency_bins
-- description: Mean layer-averaged ratio per log-frequency-rank bin, per run and measure (Figure 4 as a table).
-- param: run_id = null | only this run (default: every run)
-- param: reference = null | an imported frequency table (default: the run's own corpus counts)
-- param: bins_per_decade = 4 | bins per factor of 10 in frequency rank
-- columns: run_id, measure, bin, rank_lo, rank_hi, mean, n
-- Bin b holds ranks in [10^(b/k), 10^((b+1)/k)) for k = bins_per_decade. Reads token_stats:
-- the mean of the occurrences' layer averages is Σ values / Σ token-layer rows, n the
-- occurrences (rows of layer 1).
WITH with_rank AS (
    SELECT * FROM ranked(token_stats, $reference)   -- helper macro of the views
    WHERE $run_id IS NULL OR run_id = $run_id
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
