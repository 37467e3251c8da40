"""Moments of token-layer values: per token key (``TokenMoments``) and per sequence and
category (``sequence_moments``), one block at a time.

Both are scatters of the block's ``[layer, measure, token]`` values into groups; what
makes them fast is where the scatter lands. ``TokenMoments`` keeps shard-wide
accumulators ``[id, measure, layer]`` that a compiled loop (``kernels.add_moments``)
updates in one pass over the block, each target receiving its values in token order.
``sequence_moments`` sorts the block's tokens by (sequence, category) once and sums runs
(``reduceat``).
"""

from __future__ import annotations

import numpy as np

from mixscope.stats.kernels import add_moments
from mixscope.stats.keys import KeyIndex, grouped, unique_inverse
from mixscope.stats.token_block import TokenBlock
from mixscope.store.schema import CATEGORIES, STORED_MEASURES

N_CAT = len(CATEGORIES)


class TokenMoments:
    """Count, Σ, Σ², min, max of each (token key, layer, measure), dense by the key's id.

    The accumulators are ``[id, measure, layer]`` (float64 sums, float32 extremes: the
    cells a token updates are contiguous, 3/2 the speed of ``[measure, id, layer]``);
    ``n`` is ``[id]``. A block is
    scattered in by ``kernels.add_moments``, one pass over its values. Min and max are
    exact; each sum adds its values in token order.
    """

    def __init__(self, measures: int = len(STORED_MEASURES)) -> None:
        self.index = KeyIndex()
        self.layers = 0
        self.measures = measures  # stored measures of the run
        self.n = np.zeros(0, np.int64)
        self.sum = self.sumsq = np.zeros((0, measures, 0))
        self.min = self.max = np.zeros((0, measures, 0), np.float32)

    @property
    def capacity(self) -> int:
        return len(self.n)

    def _reserve(self, size: int, layers: int) -> None:
        """Room for ``size`` ids: the arrays grown (and copied) when full; the first block
        reserves four times its keys, so a shard grows its arrays a few times at most."""
        if size <= self.capacity:
            return
        old = self.capacity
        cap = max(size, 2 * old, 4 * size if not old else 0, 1024)
        self.layers = layers

        def grown(a: np.ndarray, fill: float) -> np.ndarray:
            out = np.empty((cap, self.measures, layers), a.dtype)
            if old:
                out[:old] = a
            out[old:] = fill
            return out

        n = np.zeros(cap, np.int64)
        n[:old] = self.n
        self.n = n
        self.sum, self.sumsq = grown(self.sum, 0.0), grown(self.sumsq, 0.0)
        self.min, self.max = grown(self.min, np.inf), grown(self.max, -np.inf)

    def add(self, keys: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Add a block: ``keys`` [tokens], ``values`` [layers, measures, tokens] float32;
        the id of each token's key."""
        uniq, inverse, counts = unique_inverse(keys)
        ids = self.index.ids(uniq)
        self._reserve(len(self.index), values.shape[0])
        self.n[ids] += counts  # ids unique: no lost updates
        token_ids = ids[inverse]  # [tokens]
        add_moments(values, token_ids, self.sum, self.sumsq, self.min, self.max)
        return token_ids

    def by_key(self) -> tuple[np.ndarray, np.ndarray, dict[str, list[np.ndarray]]]:
        """Token keys sorted, their n [keys] and, per moment, one contiguous [keys, layer]
        array per measure (one gather each: no transposed copy)."""
        order = np.argsort(self.index.keys)
        moments = {
            k: [getattr(self, k)[order, j] for j in range(self.measures)]
            for k in ("sum", "sumsq", "min", "max")
        }
        return self.index.keys[order], self.n[order], moments


def sequence_moments(block: TokenBlock, v64: np.ndarray) -> dict[str, np.ndarray]:
    """Per category (index N_CAT: every token): sequences with such tokens, Σ and Σ² of
    their per-sequence means ([N_CAT + 1, measures, layers])."""
    L, M, T = v64.shape
    group = block.sequence * N_CAT + block.category  # [tokens]
    order, starts, present = grouped(group)  # the (sequence, category) groups there are
    counts = np.diff(np.r_[starts, T])
    ordered = np.take(v64.reshape(L * M, T), order, axis=1)
    sums = np.add.reduceat(ordered, starts, axis=1)  # [layer · m, group]
    sums = sums.reshape(L, M, -1).transpose(1, 0, 2)  # [m, layer, group]
    seq_of, cats = present // N_CAT, present % N_CAT
    seq_starts = np.flatnonzero(np.r_[True, seq_of[1:] != seq_of[:-1]])
    per_seq = np.add.reduceat(counts, seq_starts)
    seq_means = np.add.reduceat(sums, seq_starts, axis=2) / per_seq  # [m, layer, seq]
    means = sums / counts  # [m, layer, group]
    out: dict[str, np.ndarray] = {"sequences": np.zeros(N_CAT + 1, np.int64)}
    out["sequences"][:N_CAT] = np.bincount(cats, minlength=N_CAT)
    out["sequences"][N_CAT] = len(seq_starts)
    for name, power in (("seq_sum", 1), ("seq_sumsq", 2)):
        acc = np.zeros((N_CAT + 1, M, L))
        for c in np.unique(cats):
            acc[c] = (means[:, :, cats == c] ** power).sum(axis=2)
        acc[N_CAT] = (seq_means**power).sum(axis=2)
        out[name] = acc  # [cat, m, layer]
    return out
