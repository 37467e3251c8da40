"""The compiled scatter loops give the bits numpy's ``ufunc.at`` gives (same order of
additions per target), on edge values too: 0, 1, values above 1, NaN, negatives."""

from __future__ import annotations

import numpy as np

from mixscope.stats.histograms import bins
from mixscope.stats.kernels import add_layer_histogram, add_moments

L, M, T, IDS, N_CAT, BINS = 3, 4, 500, 37, 5, 4096


def _block(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    values = rng.random((L, M, T), dtype=np.float32)
    values[0, 0, :5] = [0.0, 1.0, 1.5, -0.25, 0.999999]
    ids = rng.integers(0, IDS, T)
    category = rng.integers(0, N_CAT, T)
    return values, ids, category


def test_moments_equal_ufunc_at_bit_for_bit() -> None:
    got = [np.zeros((IDS, M, L)), np.zeros((IDS, M, L))]
    got += [np.full((IDS, M, L), np.inf, np.float32), np.full((IDS, M, L), -np.inf, np.float32)]
    want = [a.copy() for a in got]
    for seed in range(3):  # several blocks into the same accumulators
        values, ids, _ = _block(seed)
        add_moments(values, ids, *got)
        v64 = values.astype(np.float64)
        # flat index of value [l, m, t] in the [id, m, l] accumulators, brute force
        index = np.empty((L, M, T), np.int64)
        for layer in range(L):
            for m in range(M):
                index[layer, m] = (ids * M + m) * L + layer
        flat = index.reshape(-1)
        np.add.at(want[0].reshape(-1), flat, v64.reshape(-1))
        np.add.at(want[1].reshape(-1), flat, np.square(v64).reshape(-1))
        np.minimum.at(want[2].reshape(-1), flat, values.reshape(-1))
        np.maximum.at(want[3].reshape(-1), flat, values.reshape(-1))
    for g, w in zip(got, want, strict=True):
        assert g.tobytes() == w.tobytes()
    # and the sums are the values' sums: one cell checked by hand
    cell = [seed for seed in range(3)]
    total = sum(
        float(v)
        for s in cell
        for v, i in zip(_block(s)[0][1, 2], _block(s)[1], strict=True)
        if i == 5
    )
    assert abs(got[0][5, 2, 1] - total) < 1e-12


def test_layer_histogram_equals_bins_and_bincount() -> None:
    values, _, category = _block(7)
    values[1, 1, 0] = np.nan
    counts = np.zeros(L * N_CAT * M * BINS, np.int64)
    add_layer_histogram(values, category, counts, N_CAT, BINS)
    want = np.zeros((L, N_CAT, M, BINS), np.int64)
    with np.errstate(invalid="ignore"):  # NaN: bin 0
        b = bins(values)  # [L, M, T]
    for layer in range(L):
        for m in range(M):
            for t in range(T):
                want[layer, category[t], m, b[layer, m, t]] += 1
    assert np.array_equal(counts, want.reshape(-1))
    assert counts.sum() == L * M * T
    assert want[0, category[2], 0, BINS - 1] >= 1  # 1.5 lands in the last bin
