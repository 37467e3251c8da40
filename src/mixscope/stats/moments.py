"""Moments of token-layer values: per token key (``TokenMoments``) and per sequence and
category (``sequence_moments``), one block at a time, as torch operations on the device
the values are on.

Both are scatters of the block's ``[token, measure, layer]`` values into groups:
``index_add_`` for the float64 sums, ``scatter_reduce_`` for the extremes, one pass each
over the block. A token key gets a compact id the first time it is seen
(``keys.KeyIndex``), so the accumulators only ever grow at the end. On the CPU the adds
come in token order (each target receives its values in that order, from the value it
had); on a GPU the order of the atomic adds within a block is the device's, so sums agree
to float64 rounding.
"""

from __future__ import annotations

import torch

from mixscope.stats.keys import KeyIndex
from mixscope.store.schema import CATEGORIES

N_CAT = len(CATEGORIES)
#: the moments of a token key, the sums' then the extremes'
MOMENTS = ("sum", "sumsq", "min", "max")


class TokenMoments:
    """Count, Σ, Σ², min, max of each (token key, measure, layer), dense by the key's id.

    The accumulators are ``[id, measure, layer]`` (float64 sums, float32 extremes: the
    cells a token updates are contiguous); ``n`` is ``[id]``. ``nbytes`` is what they hold
    on the device, capacity included: the shard's statistics keep it under their budget.
    """

    def __init__(self, measures: int, device: torch.device | str = "cpu"):
        self.device = torch.device(device)
        self.index = KeyIndex(self.device)
        self.layers = 0
        self.measures = measures  # stored measures of the run
        self.n = torch.zeros(0, dtype=torch.int64, device=self.device)
        self.sum = self.sumsq = self.min = self.max = torch.zeros(0, device=self.device)

    @property
    def capacity(self) -> int:
        return len(self.n)

    def bytes_per_id(self, layers: int) -> int:
        """Device bytes of one id: four moments of every (measure, layer), n, its key (x3)."""
        return (8 + 8 + 4 + 4) * self.measures * layers + 8 + 3 * 8

    @property
    def nbytes(self) -> int:
        held = (self.n, self.sum, self.sumsq, self.min, self.max)
        return sum(t.numel() * t.element_size() for t in held) + self.index.nbytes

    def reserve(self, size: int, layers: int, limit: int | None = None) -> None:
        """Room for ``size`` ids: the arrays grown (and copied) when full, to twice their size
        (four times the first block's keys at first) but never beyond ``limit`` ids. The
        room is left uninitialised: an id's cells are set when it is given (``add``), so
        memory never used is never touched (the first block's reserve alone was a tenth of
        a shard's accumulation)."""
        if size <= self.capacity:
            return
        old = self.capacity
        cap = max(size, 2 * old, 4 * size if not old else 0, 1024)
        if limit is not None:
            cap = max(size, min(cap, limit))
        self.layers = layers
        shape = (cap, self.measures, layers)

        def grown(a: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
            out = torch.empty(shape, dtype=dtype, device=self.device)
            if old:
                out[:old] = a
            return out

        n = torch.zeros(cap, dtype=torch.int64, device=self.device)
        n[:old] = self.n
        self.n = n
        self.sum = grown(self.sum, torch.float64)
        self.sumsq = grown(self.sumsq, torch.float64)
        self.min = grown(self.min, torch.float32)
        self.max = grown(self.max, torch.float32)

    def add(
        self,
        uniq: torch.Tensor,  # [keys] int64: the block's token keys, sorted, each once
        inverse: torch.Tensor,  # [tokens] int64: each token's place in ``uniq``
        counts: torch.Tensor,  # [keys] int64: tokens of each key
        values: torch.Tensor,  # [tokens, measures, layers] float32
        v64: torch.Tensor,  # [tokens, measures, layers] float64: values, cast once
        limit: int | None = None,
        found: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Add a block; the id of each token's key ([tokens]). ``found``: the index's
        ``find(uniq)``, when the caller looked the keys up already."""
        before = len(self.index)
        ids = self.index.ids(uniq, found)  # [keys]
        self.reserve(len(self.index), values.shape[2], limit)
        if len(self.index) > before:  # the new ids' cells, set once
            fresh = slice(before, len(self.index))
            self.sum[fresh] = 0.0
            self.sumsq[fresh] = 0.0
            self.min[fresh] = float("inf")
            self.max[fresh] = float("-inf")
        self.n.index_add_(0, ids, counts)  # ids unique: no lost updates
        token_ids = ids[inverse]  # [tokens]
        self.sum.index_add_(0, token_ids, v64)
        self.sumsq.index_add_(0, token_ids, v64 * v64)  # exact: a float32's square fits
        add_extremes(self.min, self.max, token_ids, values, values)
        return token_ids

    def held(self) -> dict[str, torch.Tensor]:
        """The ids in use, on the device: key, n and the four moments ([ids, measure, layer])."""
        k = len(self.index)
        out = {"key": self.index.keys, "n": self.n[:k]}
        out.update({m: getattr(self, m)[:k] for m in MOMENTS})
        return out


def add_extremes(
    low: torch.Tensor,  # [ids, measures, layers]: min so far
    high: torch.Tensor,  # [ids, measures, layers]: max so far
    ids: torch.Tensor,  # [rows] the id each row goes to
    lows: torch.Tensor,  # [rows, measures, layers]: folded into ``low``
    highs: torch.Tensor,  # [rows, measures, layers]: folded into ``high``
) -> None:
    """Fold rows into the extremes of their ids, in place: a block's tokens (their values
    both ways), or a part's keys (its minima and maxima) when the parts are merged."""
    flat = ids[:, None].expand(len(ids), lows[0].numel())  # [rows, measures · layers]
    low.view(len(low), -1).scatter_reduce_(0, flat, lows.reshape(len(ids), -1), "amin")
    high.view(len(high), -1).scatter_reduce_(0, flat, highs.reshape(len(ids), -1), "amax")


def sequence_moments(
    sequence: torch.Tensor,  # [tokens] int64: the token's sequence in the block
    category: torch.Tensor,  # [tokens] int64
    v64: torch.Tensor,  # [tokens, measures, layers] float64
) -> dict[str, torch.Tensor]:
    """Per category (index N_CAT: every token): sequences with such tokens, Σ and Σ² of
    their per-sequence means ([N_CAT + 1, measures, layers])."""
    _, M, L = v64.shape
    dev = v64.device
    group = sequence * N_CAT + category  # [tokens]
    # dense by (sequence, category): the block's sequences are few (no sort of the tokens);
    # the groups present, in order, are those ``torch.unique`` gave
    size = (int(sequence.max()) + 1) * N_CAT if len(sequence) else 0
    counts = torch.bincount(group, minlength=size)  # [group]
    present = torch.nonzero(counts).view(-1)  # [present groups] sorted
    dense = torch.zeros(size, M, L, dtype=torch.float64, device=dev)
    dense.index_add_(0, group, v64)  # [group, measure, layer], in token order
    sums, counts = dense[present], counts[present]
    means = sums / counts[:, None, None]
    seq_of, cats = present // N_CAT, present % N_CAT  # [group]
    per_seq, seq_index = torch.unique_consecutive(seq_of, return_inverse=True)  # groups sorted
    seq_sums = torch.zeros(len(per_seq), M, L, dtype=torch.float64, device=dev)
    seq_sums.index_add_(0, seq_index, sums)
    seq_counts = torch.zeros(len(per_seq), dtype=torch.int64, device=dev)
    seq_counts.index_add_(0, seq_index, counts)
    seq_means = seq_sums / seq_counts[:, None, None]  # [seq, measure, layer]
    out = {"sequences": torch.zeros(N_CAT + 1, dtype=torch.int64, device=dev)}
    out["sequences"][:N_CAT] = torch.bincount(cats, minlength=N_CAT)
    out["sequences"][N_CAT] = len(per_seq)
    for name, power in (("seq_sum", 1), ("seq_sumsq", 2)):
        acc = torch.zeros(N_CAT + 1, M, L, dtype=torch.float64, device=dev)
        acc[:N_CAT].index_add_(0, cats, means**power)
        acc[N_CAT] = (seq_means**power).sum(dim=0)
        out[name] = acc  # [cat, measure, layer]
    return out
