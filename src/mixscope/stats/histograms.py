"""Histograms of measure values on the fixed ``HIST_BINS`` grid: per layer and category
(``LayerHistogram``, dense) and per token occurrence (``TokenHistogram``, sparse events).

``frequency_correlation`` ranks occurrences from these bin totals (the error bound is in
the README's METHOD). The layer histogram is a dense count array updated in place; the
token histogram buffers one int64 event per occurrence and measure, numbered by the
token key's compact id (``TokenMoments``), and counts them by sorting when the buffer
fills and when the table is built.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mixscope.mixing.measures import DEFAULT_GROUPS, measure_set
from mixscope.stats.arrow_tables import kind_table
from mixscope.stats.kernels import add_layer_histogram
from mixscope.stats.keys import ID_BITS, counted
from mixscope.store.schema import CATEGORIES, HIST_BINS, LAYER_HIST, TOKEN_HIST

N_CAT = len(CATEGORIES)
#: the stored measures' codes of the default selection (the paper's group)
DEFAULT_CODES = measure_set(DEFAULT_GROUPS).codes
#: buffered token-histogram events (int64) before they are counted
HIST_BUFFER = 1 << 22
#: a shard with fewer tokens cannot fill an int32 count of the layer histogram
INT32_TOKENS = 2**31 - 1
#: below this, ``values · HIST_BINS`` converts to an integer exactly in int32 and int64 alike
_FAST_BELOW = float(1 << 19)


def bins(values: np.ndarray) -> np.ndarray:
    """Histogram bin of each value in [0, 1] (1.0 in the last bin), as int64.

    ``values · HIST_BINS`` is exact (a power of two) in float32 and float64 alike, so the
    bin is the same whichever precision the value comes in.
    """
    b = (values * HIST_BINS).astype(np.int64)  # truncation = floor for values >= 0
    return np.clip(b, 0, HIST_BINS - 1, out=b)


def fast_bins(values: np.ndarray) -> np.ndarray:
    """``bins(values)`` with one clip instead of two when every value is in
    [0, 2^19) (the measures are): NaN, infinities and negatives take ``bins`` itself."""
    lo, hi = values.min(initial=0.0), values.max(initial=0.0)
    if not (lo >= 0 and hi < _FAST_BELOW):  # also false for NaN
        return bins(values)
    b = (values * HIST_BINS).astype(np.intp)
    return np.minimum(b, HIST_BINS - 1, out=b)


class LayerHistogram:
    """Counts of every token-layer value in a flat [layer, category, measure, bin] grid
    (``kernels.add_layer_histogram``: one pass over a block's values). int32 counts (half
    the cache footprint: 1.5x the speed of int64) while no cell can reach 2^31, i.e. while
    the shard has fewer tokens; int64 from there on."""

    def __init__(self, codes: tuple[int, ...] = DEFAULT_CODES) -> None:
        self.counts: np.ndarray | None = None
        self.tokens = 0
        # the stable code of each stored measure (``mixing.measures.CODES``), by its index
        self.codes = np.asarray(codes, np.int64)

    def add(self, values: np.ndarray, category: np.ndarray) -> None:
        """``values`` [layers, measures, tokens] float32, ``category`` [tokens]."""
        if self.counts is None:
            size = values.shape[0] * N_CAT * len(self.codes) * HIST_BINS
            self.counts = np.zeros(size, np.int32)
        self.tokens += values.shape[2]
        if self.tokens >= INT32_TOKENS and self.counts.dtype != np.int64:
            self.counts = self.counts.astype(np.int64)
        cells = category.astype(np.int64)
        add_layer_histogram(values, cells, self.counts, N_CAT, HIST_BINS)

    def table(self) -> pa.Table:
        assert self.counts is not None
        nz = np.flatnonzero(self.counts)
        m = len(self.codes)
        per_layer = N_CAT * m * HIST_BINS
        return kind_table(
            LAYER_HIST,
            {
                "layer": nz // per_layer + 1,
                "category": (nz // (m * HIST_BINS)) % N_CAT,
                "measure": self.codes[(nz // HIST_BINS) % m],
                "bin": nz % HIST_BINS,
                "count": self.counts[nz],
            },
        )


#: token-histogram events: ``key id << cell_bits | measure << BIN_BITS | bin`` (shifts and
#: masks, never divisions, to pack and unpack; ``measure`` the index among the run's
#: stored measures, its code given when the table is built)
BIN_BITS = HIST_BINS.bit_length() - 1
assert 1 << BIN_BITS == HIST_BINS, "HIST_BINS must be a power of two"


class TokenHistogram:
    """Per (token id, original id, category, measure): occurrences by bin of the
    occurrence's layer-averaged value. Events are numbered by the key ids of
    ``TokenMoments`` (which never change), so buffered and counted events need no
    renumbering until the table is built."""

    def __init__(self, codes: tuple[int, ...] = DEFAULT_CODES) -> None:
        self.codes = np.asarray(codes, np.int64)
        self.measure_bits = max(1, (len(codes) - 1).bit_length())
        self.cell_bits = self.measure_bits + BIN_BITS
        self._buffer: list[np.ndarray] = []
        self._buffered = 0
        self._counted: list[tuple[np.ndarray, np.ndarray]] = []  # [(events, counts)]: 0 or 1

    def add(self, ids: np.ndarray, v64: np.ndarray) -> None:
        """``ids`` [tokens] the key id of each token, ``v64`` [layers, measures, tokens]."""
        avg = v64.sum(axis=0) / v64.shape[0]  # [measures, tokens]
        events = fast_bins(avg)  # [measures, tokens]
        events |= (ids << self.cell_bits) | (np.arange(len(self.codes))[:, None] << BIN_BITS)
        self._buffer.append(events.reshape(-1))
        self._buffered += events.size
        if self._buffered >= HIST_BUFFER:  # count, merged with the counted: memory stays
            events = self._take_buffer()  # proportional to the distinct cells
            keys = np.concatenate([k for k, _ in self._counted] + [events])
            ones = np.ones(len(events), np.int64)
            weights = np.concatenate([c for _, c in self._counted] + [ones])
            self._counted = [counted(keys, weights, int(keys.max()).bit_length())]

    def _take_buffer(self) -> np.ndarray:
        events = np.concatenate(self._buffer) if self._buffer else np.empty(0, np.int64)
        self._buffer, self._buffered = [], 0
        return events

    def table(self, token_keys: np.ndarray) -> pa.Table:
        """Rows sorted by (token id, original id, category, measure, bin); ``token_keys``
        [ids] the token key of each key id."""
        groups = ((token_keys >> 7) << 3) | (token_keys & 7)  # token id, original id, cat
        uniq, rank = np.unique(groups, return_inverse=True)  # rank: key id → group's place
        cell_bits = self.cell_bits
        mask = (1 << cell_bits) - 1

        def renumbered(events: np.ndarray) -> np.ndarray:
            return (rank[events >> cell_bits] << cell_bits) | (events & mask)

        buffered = np.concatenate(self._buffer) if self._buffer else np.empty(0, np.int64)
        raw = renumbered(buffered)  # the buffer stays: more blocks may follow
        parts = [(renumbered(k), c) for k, c in self._counted]
        keys = np.concatenate([k for k, _ in parts] + [raw])
        weights = np.concatenate([c for _, c in parts] + [np.ones(len(raw), np.int64)])
        bits = int(max(len(uniq) - 1, 1)).bit_length() + cell_bits
        hk, hc = counted(keys, weights, bits)  # a radix sort: several times np.sort's speed
        group = uniq[hk >> cell_bits]
        ids = group >> (ID_BITS + 3)
        return kind_table(
            TOKEN_HIST,
            {
                "token_id": ids,
                "original_id": (group >> 3) & ((1 << ID_BITS) - 1),
                "category": group & 7,
                "measure": self.codes[(hk >> BIN_BITS) & ((1 << self.measure_bits) - 1)],
                "bin": hk & (HIST_BINS - 1),
                "count": hc,
            },
        )
