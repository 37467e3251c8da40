"""Histograms of measure values on the fixed ``HIST_BINS`` grid: per layer and category
(``LayerHistogram``, dense) and per token occurrence (``TokenHistogram``, sparse events),
counted by torch operations on the device the values are on.

``frequency_correlation`` ranks occurrences from these bin totals (the error bound is in
the README's METHOD). The layer histogram is a dense count tensor updated in place; the
token histogram keeps one int64 event per occurrence and measure, numbered by the token
key's compact id (``TokenMoments``), and counts them (one sort) when the new ones reach
``HIST_MERGE`` and those counted before, and when the table is built: its size follows the
distinct events.
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
#: a bin's bits in the histograms' cell numbers
BIN_BITS = HIST_BINS.bit_length() - 1
assert 1 << BIN_BITS == HIST_BINS, "HIST_BINS must be a power of two"


def bins(values: np.ndarray) -> np.ndarray:
    """Histogram bin of each value in [0, 1] (1.0 and above in the last bin, negatives, NaN
    and -inf in bin 0), as int64: numpy's reading of the grid (the tests'), the same as
    ``device_bins`` (the accumulators')."""
    x = np.nan_to_num(values * HIST_BINS, nan=0.0, posinf=HIST_BINS - 1, neginf=0.0)
    return np.clip(x, 0, HIST_BINS - 1).astype(np.int64)  # truncation = floor for x >= 0


def device_bins(values: torch.Tensor, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """``bins`` of a tensor, on its device: floor(v · HIST_BINS) clipped to the grid, NaN
    and -inf in bin 0, +inf in the last. ``values · HIST_BINS`` is exact (a power of two)
    in float32 and float64 alike, so the bin is the same whichever precision the value
    comes in. Four passes over the values in their own (contiguous) order; ``dtype``: the
    bins' integer type (int32: half the bytes of int64 to write and read)."""
    x = values * HIST_BINS
    torch.nan_to_num_(x, nan=0.0, posinf=HIST_BINS - 1, neginf=0.0)
    return x.clamp_(0, HIST_BINS - 1).to(dtype)  # truncation = floor for values >= 0


class LayerHistogram:
    """Counts of every token-layer value in a flat grid, int64 on the device: one
    ``index_add_`` of a block's cells.

    The grid is held ``[measure, layer, category, bin]`` and the block's cells are added
    plane by plane (a (measure, layer)'s tokens one after the other): consecutive adds land
    in one plane's few bins, cache-friendly on the CPU (several times the speed of adding
    token by token across 120 planes); ``table`` reads it in the table's order
    ``[layer, category, measure, bin]``. The bins are computed in the values' own layout
    (contiguous, int32) and moved plane-major by the one add that places them in the grid.
    """

    def __init__(self, codes: tuple[int, ...]) -> None:
        self.counts: torch.Tensor | None = None
        self.layers = 0
        # the stable code of each stored measure (``registry.CODES``), by its index
        self.codes = np.asarray(codes, np.int64)

    @staticmethod
    def nbytes_for(layers: int, measures: int) -> int:
        return 8 * layers * N_CAT * measures * HIST_BINS

    def add(self, values: torch.Tensor, category: torch.Tensor) -> None:
        """``values`` [tokens, measures, layers] float32, ``category`` [tokens] int64."""
        T, M, L = values.shape
        dev = values.device
        if self.counts is None:
            self.counts = torch.zeros(M * L * N_CAT * HIST_BINS, dtype=torch.int64, device=dev)
            self.layers = L
        cells = device_bins(values, torch.int32)  # [tokens, measures, layers]
        cells += (category.to(torch.int32) * HIST_BINS)[:, None, None]
        # the plane (measure, layer) of each column, its first cell in the grid
        planes = torch.arange(M * L, dtype=torch.int32, device=dev) * (N_CAT * HIST_BINS)
        by_plane = torch.empty(M * L, T, dtype=torch.int32, device=dev)  # [planes, tokens]
        torch.add(cells.view(T, M * L).t(), planes[:, None], out=by_plane)  # int32
        ones = torch.ones(1, dtype=torch.int64, device=dev).expand(by_plane.numel())
        self.counts.index_add_(0, by_plane.view(-1), ones)

    def table(self) -> pa.Table:
        assert self.counts is not None
        m, L = len(self.codes), self.layers
        # [measure, layer, category, bin] → the table's [layer, category, measure, bin]
        grid = self.counts.view(m, L, N_CAT, HIST_BINS).permute(1, 2, 0, 3)
        counts = grid.contiguous().cpu().numpy().reshape(-1)
        nz = np.flatnonzero(counts != 0)  # a bool mask: several times faster than of int64
        # each row of HIST_BINS cells is one (layer, category, measure): its labels by a
        # lookup in the few rows' tables (no division of the cells' numbers)
        row = nz >> BIN_BITS
        rows = np.arange(L * N_CAT * m)
        return kind_table(
            LAYER_HIST,
            {
                "layer": (rows // (N_CAT * m) + 1).astype(np.int16)[row],
                "category": ((rows // m) % N_CAT).astype(np.int8)[row],
                "measure": self.codes[rows % m][row],
                "bin": nz & (HIST_BINS - 1),
                "count": counts[nz],
            },
        )


#: token-histogram events: ``key id << cell_bits | measure << BIN_BITS | bin`` (shifts and
#: masks, never divisions, to pack and unpack; ``measure`` the index among the run's
#: stored measures, its code given when the table is built)


def merged_counts(
    parts: list[tuple[torch.Tensor, torch.Tensor | None]],
) -> tuple[torch.Tensor, torch.Tensor]:
    """(events, counts) parts → each event once (sorted) with the sum of its counts; a part's
    counts None: each event one occurrence.

    On the CPU with numpy (its int64 sort is vectorized, several times torch's unique):
    the uncounted events sorted once and counted by their runs, then merged with the parts
    counted before (sorted already: a stable sort of sorted runs is a linear merge), so a
    large shard's repeated merges cost O(events) each, not a full sort with inverse."""
    if not parts:
        empty = torch.empty(0, dtype=torch.int64)
        return empty, empty
    if parts[0][0].device.type == "cpu":
        raw = [e.numpy() for e, c in parts if c is None]
        done = [(e.numpy(), c.numpy()) for e, c in parts if c is not None]
        if raw:
            done.append(counted(np.concatenate(raw)))
        keys, weights = (np.concatenate(x) for x in zip(*done, strict=True))
        if len(done) > 1:  # sorted runs, each event once within a run
            keys, weights = counted(keys, weights, kind="stable")
        return torch.from_numpy(keys), torch.from_numpy(weights.astype(np.int64))
    events = torch.cat([e for e, _ in parts])
    uniq, inverse = torch.unique(events, return_inverse=True)
    counts = torch.zeros(len(uniq), dtype=torch.int64, device=uniq.device)
    counts.index_add_(
        0, inverse, torch.cat([torch.ones_like(e) if c is None else c for e, c in parts])
    )
    return uniq, counts


class TokenHistogram:
    """Per (token id, original id, category, measure): occurrences by bin of the
    occurrence's layer-averaged value. Events are numbered by the key ids of
    ``TokenMoments`` (which never change), so events need no renumbering until the table
    is built.

    A block's events are kept as they come (one int64 per token and measure: no sort per
    block) and counted when the events not counted yet reach ``HIST_MERGE`` and the
    distinct events counted before (memory stays within twice the distinct events, plus
    ``HIST_MERGE``), or when the shard's table is built: then once, in the table's own
    order (``table``), so the shard's events are sorted once, not once per block and again
    for the table. The second bound keeps a large shard linear: a count is a merge with
    what was counted before, and once that passed ``HIST_MERGE`` the first bound alone
    merged on every block (a 1.2M-token shard with every group: 19 ms a chunk at its start,
    200 at its end, 11 µs a token in all; ``benchmarks/host.py --shard-seqs 9600``)."""

    def __init__(self, codes: tuple[int, ...]) -> None:
        self.codes = np.asarray(codes, np.int64)
        self.measure_bits = max(1, (len(codes) - 1).bit_length())
        self.cell_bits = self.measure_bits + BIN_BITS
        # (events, their counts: None where each event is one occurrence)
        self._parts: list[tuple[torch.Tensor, torch.Tensor | None]] = []
        self._held = 0  # events in the parts
        self._fresh = 0  # of which not counted yet

    @property
    def nbytes(self) -> int:
        return 16 * self._held

    def add(self, ids: torch.Tensor, v64: torch.Tensor) -> None:
        """``ids`` [tokens] the key id of each token, ``v64`` [tokens, measures, layers]."""
        _, M, L = v64.shape
        avg = v64.sum(dim=2) / L  # [tokens, measures]
        measure = torch.arange(M, device=v64.device) << BIN_BITS  # [measures]
        events = device_bins(avg) | measure | (ids[:, None] << self.cell_bits)  # [tokens, m]
        self._parts.append((events.view(-1), None))
        self._held += events.numel()
        self._fresh += events.numel()
        # geometric: a merge costs O(counted + fresh) and comes after at least as many new
        # events, so the shard's merges cost O(its events) in all
        if self._fresh >= max(HIST_MERGE, self._held - self._fresh) and len(self._parts) > 1:
            self._parts = [self.counted()]  # memory stays proportional to the distinct events
            self._held = len(self._parts[0][0])
            self._fresh = 0

    def pending(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(events, their counts) of every part, side by side (an event may repeat)."""
        if not self._parts:
            empty = torch.empty(0, dtype=torch.int64)
            return empty, empty
        dev = self._parts[0][0].device
        ones = lambda n: torch.ones(1, dtype=torch.int64, device=dev).expand(n)  # noqa: E731
        events = torch.cat([e for e, _ in self._parts])
        if all(c is None for _, c in self._parts):
            return events, ones(len(events))  # a view: no memory
        counts = torch.cat([c if c is not None else ones(len(e)) for e, c in self._parts])
        return events, counts

    def counted(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(events, their counts) of every part, each event once (sorted)."""
        return merged_counts(self._parts)

    def table(self, token_keys: np.ndarray, events: np.ndarray, counts: np.ndarray) -> pa.Table:
        """Rows sorted by (token id, original id, category, measure, bin); ``token_keys``
        [ids] the token key of each key id, ``events`` and ``counts`` the events (``pending``
        or ``counted``, on the host): renumbered by their row group, then counted by one
        sort."""
        groups = ((token_keys >> 7) << 3) | (token_keys & 7)  # token id, original id, cat
        uniq, rank = np.unique(groups, return_inverse=True)  # rank: key id → group's place
        cell_bits = self.cell_bits
        keys = (rank[events >> cell_bits] << cell_bits) | (events & ((1 << cell_bits) - 1))
        if int(max(len(uniq) - 1, 1)).bit_length() + cell_bits <= 31:
            keys = keys.astype(np.int32)  # half the bytes to sort (twice the speed)
        hk, hc = counted(keys, counts)
        hk = hk.astype(np.int64)
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
