"""Sufficient statistics of token blocks: the ``STATS`` tables, vectorized numpy.

Every table is keyed (see ``store.schema.STATS``) and every value column merges by sum,
min or max, so the statistics of a shard, of a run or of any set of shards are the merge
of the parts' statistics (:func:`merge`): the unit of commit (a shard) and the unit of
reading (a run) never need the per-token rows. Within a shard, ``ShardStatistics`` keeps
dense numpy accumulators that each block updates in place by flat scatter (``ufunc.at``,
``bincount``): a token key gets a compact id the first time it is seen, so accumulators
only ever grow at the end and no block sorts values or inserts rows; no table is built
until the shard's files are written.

Sums are float64 over the float32 values the detail stores, so a statistic equals the same
aggregate over the detail rows to float64 precision; consolidation (``consolidate``) adds
shards exactly (``store.schema.EXACT_LIMBS``), so a run's statistics are the same bits
whatever the order its shards were merged in.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mixscope.stats.block import TokenBlock, Vocabulary
from mixscope.store.schema import (
    ALL_TOKENS,
    CATEGORIES,
    EXACT_LIMBS,
    FREQUENCIES,
    HIST_BINS,
    LAYER_HIST,
    LAYER_STATS,
    SEQUENCE_STATS,
    STATS,
    STORED_MEASURES,
    TOKEN_HIST,
    TOKEN_STATS,
    StatsKind,
)

N_CAT = len(CATEGORIES)
N_MEAS = len(STORED_MEASURES)
#: buffered token-histogram events (int64) before they are counted into the table
HIST_BUFFER = 1 << 22


def bins(values: np.ndarray) -> np.ndarray:
    """Histogram bin of each value in [0, 1] (1.0 in the last bin), as int64.

    ``values · HIST_BINS`` is exact (a power of two) in float32 and float64 alike, so the
    bin is the same whichever precision the value comes in.
    """
    b = (values * HIST_BINS).astype(np.int64)  # truncation = floor for values >= 0
    return np.clip(b, 0, HIST_BINS - 1, out=b)


def _grouped(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(order, starts, unique keys): ``keys[order]`` sorted, groups starting at ``starts``."""
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    return order, starts, sorted_keys[starts]


def radix_order(keys: np.ndarray, bits: int) -> np.ndarray:
    """A stable order of non-negative int64 ``keys`` < 2^bits: least significant digit
    first, 16 bits a pass. numpy's stable argsort of uint16 is a counting sort, linear and
    about ten times a comparison sort of int64 at these sizes."""
    order: np.ndarray | None = None
    for shift in range(0, max(bits, 1), 16):
        digit = ((keys if order is None else keys[order]) >> shift) & 0xFFFF
        step = np.argsort(digit.astype(np.uint16), kind="stable")
        order = step if order is None else order[step]
    assert order is not None
    return order


def counted(keys: np.ndarray, weights: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """(unique sorted keys, the sum of the weights of each) of int64 ``keys`` < 2^bits."""
    if len(keys) == 0:
        return keys, weights
    order = radix_order(keys, bits)
    ordered = keys[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    return ordered[starts], np.add.reduceat(weights[order], starts)


def _table(kind: StatsKind, columns: dict[str, np.ndarray | pa.Array]) -> pa.Table:
    """The working table (float64 sums) of the given columns, in the kind's column order;
    numpy columns are cast to the field's type first (numpy casts are several times
    faster than Arrow's checked ones)."""
    fields = [f for f in kind.schema if f.name in columns]
    arrays = []
    for f in fields:
        c = columns[f.name]
        if isinstance(c, np.ndarray):
            c = np.ascontiguousarray(c, dtype=f.type.to_pandas_dtype())
        arrays.append(pa.array(c, f.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=kind.schema.metadata))


def _measure_columns(stats: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``{stat: [measure, keys, layers]}`` → ``{"attn_w_sum": [keys · layers], …}``
    (key-major, layer-minor rows)."""
    return {
        f"{m}_{stat}": arr[k].reshape(-1)
        for k, m in enumerate(STORED_MEASURES)
        for stat, arr in stats.items()
    }


#: how a value merges: its operation's ufunc (``reduceat`` within a table, elementwise across)
UFUNCS = {"sum": np.add, "min": np.minimum, "max": np.maximum}


class KeyIndex:
    """Compact ids of int64 keys, numbered in the order first seen: what lets dense
    accumulators be indexed by key and grow only at the end."""

    def __init__(self) -> None:
        self._sorted = np.empty(0, np.int64)  # the known keys, sorted
        self._ids = np.empty(0, np.int64)  # the id of each of _sorted
        self.keys = np.empty(0, np.int64)  # [ids] the key of each id

    def __len__(self) -> int:
        return len(self.keys)

    def ids(self, keys: np.ndarray) -> np.ndarray:
        """The id of each of ``keys`` (unique, sorted); unknown keys get the next ids."""
        pos = np.searchsorted(self._sorted, keys)
        found = pos < len(self._sorted)
        found[found] = self._sorted[pos[found]] == keys[found]
        out = np.empty(len(keys), np.int64)
        out[found] = self._ids[pos[found]]
        new = np.flatnonzero(~found)
        if len(new):
            fresh = np.arange(len(self.keys), len(self.keys) + len(new))
            out[new] = fresh
            self._sorted = np.insert(self._sorted, pos[new], keys[new])  # keys sorted: stays so
            self._ids = np.insert(self._ids, pos[new], fresh)
            self.keys = np.concatenate([self.keys, keys[new]])
        return out


def token_keys(block: TokenBlock) -> np.ndarray:
    """One int64 per (token_id, original_id, token_type, category); ids are < 2^28."""
    return (
        (block.token_id.astype(np.int64) << 35)
        | (block.original_id.astype(np.int64) << 7)
        | (block.token_type.astype(np.int64) << 3)
        | block.category.astype(np.int64)
    )


class TokenMoments:
    """Count, Σ, Σ², min, max of each (token key, layer, measure), dense by the key's id.

    The value accumulators are ``[measure, id, layer]`` (the order of the table's columns
    and rows); a block scatters into them with one flat index per token-layer value, so
    every sum adds its values in token order, and min and max are exact.
    """

    def __init__(self) -> None:
        self.index = KeyIndex()
        self.layers = 0
        self.n = np.zeros(0, np.int64)
        self.sum = self.sumsq = np.zeros((N_MEAS, 0, 0))
        self.min = self.max = np.zeros((N_MEAS, 0, 0), np.float32)

    @property
    def capacity(self) -> int:
        return len(self.n)

    def _reserve(self, size: int, layers: int) -> None:
        """Room for ``size`` ids: the arrays doubled (and copied) when full."""
        if size <= self.capacity:
            return
        cap, old = max(size, 2 * self.capacity, 1024), self.capacity
        self.layers = layers

        def grown(a: np.ndarray, fill: float) -> np.ndarray:
            out = np.full((N_MEAS, cap, layers), fill, a.dtype)
            if old:
                out[:, :old] = a
            return out

        n = np.zeros(cap, np.int64)
        n[:old] = self.n
        self.n = n
        self.sum, self.sumsq = grown(self.sum, 0.0), grown(self.sumsq, 0.0)
        self.min, self.max = grown(self.min, np.inf), grown(self.max, -np.inf)

    def add(self, keys: np.ndarray, values: np.ndarray, v64: np.ndarray) -> np.ndarray:
        """Add a block: ``keys`` [tokens], ``values`` [layers, measures, tokens] float32 and
        its float64 copy; the id of each token's key."""
        uniq, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
        ids = self.index.ids(uniq)
        L = values.shape[0]
        self._reserve(len(self.index), L)
        self.n[ids] += counts  # ids unique: no lost updates
        token_ids = ids[inverse]
        # flat index of [measure, id, layer] for each [layer, measure, token] value
        base = np.arange(N_MEAS)[None, :] * (self.capacity * L) + np.arange(L)[:, None]
        flat = (base[:, :, None] + token_ids * L).reshape(-1)
        np.add.at(self.sum.reshape(-1), flat, v64.reshape(-1))
        np.add.at(self.sumsq.reshape(-1), flat, np.square(v64).reshape(-1))
        np.minimum.at(self.min.reshape(-1), flat, values.reshape(-1))
        np.maximum.at(self.max.reshape(-1), flat, values.reshape(-1))
        return token_ids


_MOMENTS = {"n": "sum", "sum": "sum", "sumsq": "sum", "min": "min", "max": "max"}


def sequence_moments(block: TokenBlock, v64: np.ndarray) -> dict[str, np.ndarray]:
    """Per category (index N_CAT: every token): sequences with such tokens, Σ and Σ² of
    their per-sequence means ([N_CAT + 1, measures, layers])."""
    L = v64.shape[0]
    S = int(block.sequence.max()) + 1
    group = block.sequence * N_CAT + block.category  # [tokens], dense: S · N_CAT groups
    G = S * N_CAT
    counts = np.bincount(group, minlength=G)
    flat = (np.arange(L * N_MEAS)[:, None] * G + group).reshape(-1)
    sums = np.bincount(flat, weights=v64.reshape(-1), minlength=L * N_MEAS * G)
    sums = sums.reshape(L, N_MEAS, S, N_CAT).transpose(1, 0, 2, 3)  # [m, layer, seq, cat]
    per_seq = counts.reshape(S, N_CAT).sum(axis=1)
    seqs = np.flatnonzero(per_seq)
    seq_means = sums[:, :, seqs].sum(axis=3) / per_seq[seqs]  # [m, layer, seq]: every token
    present = np.flatnonzero(counts)
    means = sums.reshape(N_MEAS, L, G)[:, :, present] / counts[present]  # [m, layer, group]
    cats = present % N_CAT
    out: dict[str, np.ndarray] = {"sequences": np.zeros(N_CAT + 1, np.int64)}
    out["sequences"][:N_CAT] = np.bincount(cats, minlength=N_CAT)
    out["sequences"][N_CAT] = len(seqs)
    for name, power in (("seq_sum", 1), ("seq_sumsq", 2)):
        acc = np.zeros((N_CAT + 1, N_MEAS, L))
        for c in np.unique(cats):
            acc[c] = (means[:, :, cats == c] ** power).sum(axis=2)
        acc[N_CAT] = (seq_means**power).sum(axis=2)
        out[name] = acc  # [cat, m, layer]
    return out


class ShardStatistics:
    """The statistics of a shard, block by block, in dense numpy accumulators.

    ``add`` runs on the worker's host thread while the model runs the next block;
    ``tables`` builds the shard's tables once (float64 sums), token strings attached by id.
    Token-histogram events (one per token and measure) are buffered and counted, by a
    linear radix sort, when the buffer fills and at the end.
    """

    def __init__(self, vocab: Vocabulary) -> None:
        self.vocab = vocab
        self.layers = 0
        self._tokens = TokenMoments()
        self._hist_groups = KeyIndex()  # (token id, original id, category) → compact id
        self._hist_group_of = np.zeros(0, np.int64)  # [token key id] its histogram group
        self._hist_buffer: list[np.ndarray] = []
        self._hist_buffered = 0
        self._hist = (np.empty(0, np.int64), np.empty(0, np.int64))  # counted: keys, counts
        self._sequences: dict[str, np.ndarray] | None = None
        self._layer_hist: np.ndarray | None = None  # flat [layer, category, measure, bin]
        self._freq = np.zeros(0, np.int64)

    def add(self, block: TokenBlock) -> None:
        if len(block) == 0:
            return
        L = self.layers = block.layers
        v64 = block.values.astype(np.float64)  # [layers, measures, tokens], once
        ids = self._tokens.add(token_keys(block), block.values, v64)
        self._add_token_hist(ids, v64)
        self._add_layer_hist(block)
        seq = sequence_moments(block, v64)
        if self._sequences is None:
            self._sequences = seq
        else:
            for k, v in seq.items():
                self._sequences[k] += v
        freq = np.bincount(block.original_id, minlength=len(self._freq))
        freq[: len(self._freq)] += self._freq
        self._freq = freq
        assert self._tokens.layers == L

    def _add_token_hist(self, ids: np.ndarray, v64: np.ndarray) -> None:
        """Buffer one event per token and measure: (histogram group, measure, bin of the
        occurrence's layer average) packed in an int64."""
        known = len(self._hist_group_of)
        if len(self._tokens.index) > known:  # new token keys: their histogram groups
            keys = self._tokens.index.keys[known:]
            groups = (keys >> 7) * N_CAT + (keys & 7)  # (token id, original id), category
            uniq, inverse = np.unique(groups, return_inverse=True)
            new = self._hist_groups.ids(uniq)[inverse]
            self._hist_group_of = np.concatenate([self._hist_group_of, new])
        avg = v64.sum(axis=0) / v64.shape[0]  # [measures, tokens]
        group = self._hist_group_of[ids]
        events = (group * N_MEAS + np.arange(N_MEAS)[:, None]) * HIST_BINS + bins(avg)
        self._hist_buffer.append(events.reshape(-1))
        self._hist_buffered += events.size
        if self._hist_buffered >= HIST_BUFFER:
            self._hist = self._count_hist(np.arange(len(self._hist_groups)))

    def _count_hist(self, rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The counted and the buffered events, counted together, each group renumbered by
        ``rank`` (group id → its new number); empties the buffer."""
        keys = np.concatenate([self._hist[0], *self._hist_buffer])
        weights = np.concatenate([self._hist[1], np.ones(self._hist_buffered, np.int64)])
        self._hist_buffer, self._hist_buffered = [], 0
        cell = N_MEAS * HIST_BINS
        keys = rank[keys // cell] * cell + keys % cell
        bits = int(len(rank) - 1).bit_length() + int(cell - 1).bit_length()
        return counted(keys, weights, bits)

    def _add_layer_hist(self, block: TokenBlock) -> None:
        """Count every token-layer value in the flat [layer, category, measure, bin] grid."""
        L = block.layers
        if self._layer_hist is None:
            self._layer_hist = np.zeros(L * N_CAT * N_MEAS * HIST_BINS, np.int64)
        base = (np.arange(L)[:, None] * (N_CAT * N_MEAS) + np.arange(N_MEAS)) * HIST_BINS
        key = bins(block.values)  # [layers, measures, tokens]
        key += base[:, :, None]
        key += block.category.astype(np.int64) * (N_MEAS * HIST_BINS)
        np.add.at(self._layer_hist, key.reshape(-1), 1)

    def tables(self) -> dict[str, pa.Table]:
        """Kind name → the shard's table (float64 sums); empty before any block."""
        if self._sequences is None:
            return {}
        out = {
            TOKEN_STATS.name: self._token_stats(),
            LAYER_STATS.name: self._layer_stats(),
            SEQUENCE_STATS.name: self._sequence_stats(),
            TOKEN_HIST.name: self._token_hist(),
            LAYER_HIST.name: self._layer_hist_table(),
        }
        ids = np.flatnonzero(self._freq)
        out[FREQUENCIES.name] = _table(
            FREQUENCIES,
            {"token_id": ids, "token": self.vocab.arrow(ids), "count": self._freq[ids]},
        )
        return {name: out[name] for name in STATS}

    def _sorted_moments(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Token keys sorted, and their n [keys] and moments [measure, keys, layer]."""
        t = self._tokens
        order = np.argsort(t.index.keys)
        moments = {k: getattr(t, k)[:, order] for k in ("sum", "sumsq", "min", "max")}
        return t.index.keys[order], {"n": t.n[order], **moments}

    def _token_stats(self) -> pa.Table:
        L = self.layers
        keys, m = self._sorted_moments()
        self._sorted = keys, m  # layer_stats groups them again
        token_id = keys >> 35
        per_row = lambda a: np.repeat(a, L)  # noqa: E731  key-major, layer-minor
        return _table(
            TOKEN_STATS,
            {
                "layer": np.tile(np.arange(1, L + 1, dtype=np.int16), len(keys)),
                "token_id": per_row(token_id),
                "original_id": per_row((keys >> 7) & ((1 << 28) - 1)),
                "token_type": per_row((keys >> 3) & 15),
                "category": per_row(keys & 7),
                "token": self.vocab.arrow(per_row(token_id)),
                "n": per_row(m["n"]),
                **_measure_columns({k: m[k] for k in ("sum", "sumsq", "min", "max")}),
            },
        )

    def _layer_stats(self) -> pa.Table:
        """The token groups grouped again by (category, pair segment)."""
        L = self.layers
        keys, m = self._sorted
        order, starts, k2 = _grouped((keys & 7) * 16 + ((keys >> 3) & 15))
        merged = {
            k: UFUNCS[_MOMENTS[k]].reduceat(m[k][:, order], starts, axis=1)
            for k in ("sum", "sumsq", "min", "max")
        }
        return _table(
            LAYER_STATS,
            {
                "layer": np.tile(np.arange(1, L + 1), len(k2)),
                "category": np.repeat(k2 // 16, L),
                "token_type": np.repeat(k2 % 16, L),
                "n": np.repeat(np.add.reduceat(m["n"][order], starts), L),
                **_measure_columns(merged),
            },
        )

    def _sequence_stats(self) -> pa.Table:
        L = self.layers
        s = self._sequences
        assert s is not None
        present = np.flatnonzero(s["sequences"])
        cats = np.where(present == N_CAT, ALL_TOKENS, present)
        moments = {k: s[k][present].transpose(1, 0, 2) for k in ("seq_sum", "seq_sumsq")}
        return _table(
            SEQUENCE_STATS,
            {
                "layer": np.tile(np.arange(1, L + 1), len(present)),
                "category": np.repeat(cats, L),
                "sequences": np.repeat(s["sequences"][present], L),
                **_measure_columns(moments),
            },
        )

    def _token_hist(self) -> pa.Table:
        """Rows sorted by (token id, original id, category, measure, bin): groups renumbered
        by key."""
        groups = self._hist_groups.keys
        rank = np.empty(len(groups), np.int64)
        by_key = np.argsort(groups)
        rank[by_key] = np.arange(len(groups))
        hk, hc = self._hist = self._count_hist(rank)
        self._hist_groups = KeyIndex()  # the counted keys are renumbered: start over
        self._hist_groups.ids(groups[by_key])
        self._hist_group_of = rank[self._hist_group_of]
        group = groups[by_key][hk // (N_MEAS * HIST_BINS)]
        ids = group // N_CAT >> 28  # the group: ((token id << 28) | original id) · N_CAT + cat
        return _table(
            TOKEN_HIST,
            {
                "token_id": ids,
                "original_id": (group // N_CAT) & ((1 << 28) - 1),
                "category": group % N_CAT,
                "measure": (hk // HIST_BINS) % N_MEAS,
                "bin": hk % HIST_BINS,
                "token": self.vocab.arrow(ids),
                "count": hc,
            },
        )

    def _layer_hist_table(self) -> pa.Table:
        assert self._layer_hist is not None
        nz = np.flatnonzero(self._layer_hist)
        per_layer = N_CAT * N_MEAS * HIST_BINS
        return _table(
            LAYER_HIST,
            {
                "layer": nz // per_layer + 1,
                "category": (nz // (N_MEAS * HIST_BINS)) % N_CAT,
                "measure": (nz // HIST_BINS) % N_MEAS,
                "bin": nz % HIST_BINS,
                "count": self._layer_hist[nz],
            },
        )


def statistics(block: TokenBlock, vocab: Vocabulary) -> dict[str, pa.Table]:
    """Every statistics table of one block (kind name → table)."""
    acc = ShardStatistics(vocab)
    acc.add(block)
    return acc.tables()


def merge(kind: StatsKind, tables: list[pa.Table]) -> pa.Table:
    """The statistics of the union of the parts: rows grouped by the keys, each value merged
    by its operation (sums add, minima and maxima combine; integer sums, such as the exact
    limbs of consolidated files, add exactly). Within a key, rows are taken in the order of
    ``tables``. Sorting and ``reduceat``: no hash aggregation over dozens of columns."""
    if len(tables) == 1:
        return tables[0]
    whole = pa.concat_tables(tables)
    keys = np.column_stack([whole[k].to_numpy().astype(np.int64) for k in kind.key_names])
    order = _key_order(keys)  # stable: the tables' order within a key
    ordered = keys[order]
    starts = np.flatnonzero(np.r_[True, np.any(ordered[1:] != ordered[:-1], axis=1)])
    ops = {v: op for v, _, op in kind.values}
    ops.update({v + limb: "sum" for v in kind.exact_columns for limb in EXACT_LIMBS})
    arrays = []
    first = pa.array(order[starts])
    for field in whole.schema:
        name = field.name
        if name in kind.key_names:
            arrays.append(pa.array(ordered[starts, kind.key_names.index(name)], field.type))
        elif pa.types.is_string(field.type):  # a function of the key (the token string)
            arrays.append(whole[name].take(first))
        else:
            values = whole[name].to_numpy()[order]
            arrays.append(pa.array(UFUNCS[ops[name]].reduceat(values, starts), field.type))
    return pa.Table.from_arrays(arrays, schema=whole.schema)


def _key_order(keys: np.ndarray) -> np.ndarray:
    """A stable order of the rows of ``keys`` [rows, columns] (non-negative ints) by key:
    one int64 argsort when the columns' bit widths fit in 63 bits, else a lexsort."""
    widths = [max(1, int(c.max()).bit_length()) if len(c) else 1 for c in keys.T]
    if sum(widths) > 63 or (len(keys) and keys.min() < 0):
        return np.lexsort(keys.T[::-1])
    packed = np.zeros(len(keys), np.int64)
    for column, width in zip(keys.T, widths, strict=True):
        packed = (packed << width) | column
    return np.argsort(packed, kind="stable")
