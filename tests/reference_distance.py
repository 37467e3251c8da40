"""The ``distance`` group's textbook formula (docs/method.md §5e), float64, from the
materialised per-source vectors: for every token i and every source j ≠ i, the bucket of
δ = |i − j| found by a loop (the smallest b with δ < 2^(b+1), the last bucket open-ended),
‖a_ij‖ and ᾱ_ij added to it, each row divided by its total. No prefix sums, no Gram form.
"""

from __future__ import annotations

import numpy as np

BUCKETS = 12


def bucket(delta: int, buckets: int = BUCKETS) -> int:
    b = 0
    while b < buckets - 1 and delta >= 2 ** (b + 1):
        b += 1
    return b


def distance_measures(
    alpha: np.ndarray, a: np.ndarray, buckets: int = BUCKETS, *, use_weights: bool = False
) -> dict[str, np.ndarray]:
    """dist_n_b, dist_w_b [n] from α [H, n, n] and a_ij [n, n, d] of the real tokens.

    ``use_weights`` is a deliberately WRONG variant (the negative control): head-mean
    weights in place of the per-pair norms on the norm side."""
    n = a.shape[0]
    norm = np.zeros((n, BUCKETS))
    weight = np.zeros((n, BUCKETS))
    mean = alpha.mean(axis=0)  # ᾱ [n, n]
    for i in range(n):
        for j in range(n):
            if j == i:
                continue
            b = bucket(abs(i - j), buckets)
            norm[i, b] += mean[i, j] if use_weights else np.linalg.norm(a[i, j])
            weight[i, b] += mean[i, j]
    out = {}
    for name, sums in (("dist_n", norm), ("dist_w", weight)):
        total = sums.sum(axis=1, keepdims=True)
        share = np.divide(sums, total, out=np.zeros_like(sums), where=total > 0)
        out.update({f"{name}_{b}": share[:, b] for b in range(BUCKETS)})
    return out
