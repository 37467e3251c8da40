"""Histograms of measure values on the fixed ``HIST_BINS`` grid: per layer and category
(``LayerHistogram``, dense) and per token occurrence (``TokenHistogram``, sparse events),
counted by torch operations on the device the values are on.

``frequency_correlation`` ranks occurrences from these bin totals (the error bound is in
the README's METHOD). The layer histogram is a dense count tensor updated in place; the
token histogram counts one int64 event per occurrence and measure, numbered by the token
key's compact id (``TokenMoments``), block by block (``torch.unique``), and merges the
counted parts when they grow: its size follows the distinct events, not the tokens.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import torch

from mixscope.stats.arrow_tables import kind_table
from mixscope.stats.keys import ID_BITS, counted
from mixscope.store.schema import CATEGORIES, HIST_BINS, LAYER_HIST, TOKEN_HIST

N_CAT = len(CATEGORIES)
#: counted token-histogram events (parts) held before they are merged into one
HIST_MERGE = 1 << 22


def bins(values: np.ndarray) -> np.ndarray:
    """Histogram bin of each value in [0, 1] (1.0 and above in the last bin, negatives, NaN
    and -inf in bin 0), as int64: numpy's reading of the grid (the tests'), the same as
    ``device_bins`` (the accumulators')."""
    x = np.nan_to_num(values * HIST_BINS, nan=0.0, posinf=HIST_BINS - 1, neginf=0.0)
    return np.clip(x, 0, HIST_BINS - 1).astype(np.int64)  # truncation = floor for x >= 0


def device_bins(values: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``bins`` of a tensor, on its device: floor(v · HIST_BINS) clipped to the grid, NaN
    and -inf in bin 0, +inf in the last. ``values · HIST_BINS`` is exact (a power of two)
    in float32 and float64 alike, so the bin is the same whichever precision the value
    comes in. ``out``: a float buffer of ``values``' shape to scale into (its layout, e.g.
    contiguous where ``values`` is a permuted view, is the result's)."""
    x = torch.mul(values, HIST_BINS, out=out) if out is not None else values * HIST_BINS
    torch.nan_to_num_(x, nan=0.0, posinf=HIST_BINS - 1, neginf=0.0)
    return x.clamp_(0, HIST_BINS - 1).to(torch.int64)  # truncation = floor for values >= 0


class LayerHistogram:
    """Counts of every token-layer value in a flat [layer, category, measure, bin] grid,
    int64 on the device: one ``index_add_`` of a block's cells."""

    def __init__(self, codes: tuple[int, ...]) -> None:
        self.counts: torch.Tensor | None = None
        # the stable code of each stored measure (``registry.CODES``), by its index
        self.codes = np.asarray(codes, np.int64)

    @staticmethod
    def nbytes_for(layers: int, measures: int) -> int:
        return 8 * layers * N_CAT * measures * HIST_BINS

    def add(self, values: torch.Tensor, category: torch.Tensor) -> None:
        """``values`` [tokens, measures, layers] float32, ``category`` [tokens] int64."""
        _, M, L = values.shape
        if self.counts is None:
            size = L * N_CAT * M * HIST_BINS
            self.counts = torch.zeros(size, dtype=torch.int64, device=values.device)
        # the cell of (layer, measure, token): ((layer · N_CAT + cat) · M + m) · BINS + bin,
        # laid out layer-major, token-minor: consecutive adds land in one (layer, measure)'s
        # few bins (cache-friendly on the CPU, 1.5x the speed of token-major)
        dev = values.device
        layer = torch.arange(L, device=dev) * (N_CAT * M * HIST_BINS)  # [layers]
        measure = torch.arange(M, device=dev) * HIST_BINS  # [measures]
        scaled = torch.empty(L, M, len(category), device=dev, dtype=values.dtype)
        cells = device_bins(values.permute(2, 1, 0), out=scaled)  # [layers, measures, tokens]
        cells += (layer[:, None] + measure)[:, :, None]  # in place: no [L, M, T] temporary
        cells += category * (M * HIST_BINS)
        ones = torch.ones(1, dtype=torch.int64, device=dev).expand(cells.numel())
        self.counts.index_add_(0, cells.view(-1), ones)

    def table(self) -> pa.Table:
        assert self.counts is not None
        counts = self.counts.cpu().numpy()
        nz = np.flatnonzero(counts)
        m = len(self.codes)
        per_layer = N_CAT * m * HIST_BINS
        return kind_table(
            LAYER_HIST,
            {
                "layer": nz // per_layer + 1,
                "category": (nz // (m * HIST_BINS)) % N_CAT,
                "measure": self.codes[(nz // HIST_BINS) % m],
                "bin": nz % HIST_BINS,
                "count": counts[nz],
            },
        )


#: token-histogram events: ``key id << cell_bits | measure << BIN_BITS | bin`` (shifts and
#: masks, never divisions, to pack and unpack; ``measure`` the index among the run's
#: stored measures, its code given when the table is built)
BIN_BITS = HIST_BINS.bit_length() - 1
assert 1 << BIN_BITS == HIST_BINS, "HIST_BINS must be a power of two"


def merged_counts(
    parts: list[tuple[torch.Tensor, torch.Tensor]],
) -> tuple[torch.Tensor, torch.Tensor]:
    """(events, counts) parts → each event once (sorted) with the sum of its counts."""
    if not parts:
        empty = torch.empty(0, dtype=torch.int64)
        return empty, empty
    if len(parts) == 1:
        return parts[0]
    uniq, inverse = torch.unique(torch.cat([e for e, _ in parts]), return_inverse=True)
    counts = torch.zeros(len(uniq), dtype=torch.int64, device=uniq.device)
    counts.index_add_(0, inverse, torch.cat([c for _, c in parts]))
    return uniq, counts


class TokenHistogram:
    """Per (token id, original id, category, measure): occurrences by bin of the
    occurrence's layer-averaged value. Events are numbered by the key ids of
    ``TokenMoments`` (which never change), so counted events need no renumbering until the
    table is built."""

    def __init__(self, codes: tuple[int, ...]) -> None:
        self.codes = np.asarray(codes, np.int64)
        self.measure_bits = max(1, (len(codes) - 1).bit_length())
        self.cell_bits = self.measure_bits + BIN_BITS
        self._parts: list[tuple[torch.Tensor, torch.Tensor]] = []  # (events, counts), counted
        self._held = 0  # events in the parts

    @property
    def nbytes(self) -> int:
        return 16 * self._held

    def add(self, ids: torch.Tensor, v64: torch.Tensor) -> None:
        """``ids`` [tokens] the key id of each token, ``v64`` [tokens, measures, layers]."""
        _, M, L = v64.shape
        avg = v64.sum(dim=2) / L  # [tokens, measures]
        measure = torch.arange(M, device=v64.device) << BIN_BITS  # [measures]
        events = device_bins(avg) | measure | (ids[:, None] << self.cell_bits)  # [tokens, m]
        self._parts.append(torch.unique(events.view(-1), return_counts=True))
        self._held += len(self._parts[-1][0])
        if self._held >= HIST_MERGE and len(self._parts) > 1:
            self._parts = [self.counted()]  # memory stays proportional to the distinct events
            self._held = len(self._parts[0][0])

    def counted(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(events, their counts) of every part, each event once (sorted)."""
        return merged_counts(self._parts)

    def table(self, token_keys: np.ndarray, events: np.ndarray, counts: np.ndarray) -> pa.Table:
        """Rows sorted by (token id, original id, category, measure, bin); ``token_keys``
        [ids] the token key of each key id, ``events`` and ``counts`` the counted events
        (``counted``, on the host)."""
        groups = ((token_keys >> 7) << 3) | (token_keys & 7)  # token id, original id, cat
        uniq, rank = np.unique(groups, return_inverse=True)  # rank: key id → group's place
        cell_bits = self.cell_bits
        keys = (rank[events >> cell_bits] << cell_bits) | (events & ((1 << cell_bits) - 1))
        bits = int(max(len(uniq) - 1, 1)).bit_length() + cell_bits
        hk, hc = counted(keys, counts, bits)  # a radix sort: several times np.sort's speed
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
