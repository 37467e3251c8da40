"""Sufficient statistics of token blocks: the ``STATS`` tables, vectorized numpy.

Every table is keyed (see ``store.schema.STATS``) and every value column merges by sum,
min or max, so the statistics of a shard, of a run or of any set of shards are the merge
of the parts' statistics (:func:`merge`): the unit of commit (a shard) and the unit of
reading (a run) never need the per-token rows. Within a shard, ``ShardStatistics`` keeps
numpy accumulators (sorted keys with their values, or dense counts) that each block
updates in place: no table is built or merged until the shard's files are written.

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


def _table(kind: StatsKind, columns: dict[str, np.ndarray]) -> pa.Table:
    """The working table (float64 sums) of the given columns, in the kind's column order."""
    fields = [f for f in kind.schema if f.name in columns]
    arrays = [pa.array(columns[f.name], f.type) for f in fields]
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=kind.schema.metadata))


def _measure_columns(stats: dict[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
    """``{stat: [..., measure]}`` → ``{"attn_w_sum": [rows], …}``."""
    out = {}
    for k, m in enumerate(STORED_MEASURES):
        for stat, arr in stats.items():
            out[f"{m}_{stat}"] = arr.reshape(rows, N_MEAS)[:, k]
    return out


#: how a value merges: its operation's ufunc (``reduceat`` within a table, elementwise across)
UFUNCS = {"sum": np.add, "min": np.minimum, "max": np.maximum}


class Keyed:
    """Values accumulated per int64 key: sorted unique keys, value arrays along axis 0.

    ``add`` takes a block's own unique sorted keys and values and merges them in: sums add,
    minima and maxima combine, new keys are inserted in order.
    """

    def __init__(self, ops: dict[str, str]) -> None:
        self.ops = ops  # value name → sum | min | max
        self.keys = np.empty(0, np.int64)
        self.values: dict[str, np.ndarray] = {}

    def add(self, keys: np.ndarray, values: dict[str, np.ndarray]) -> None:
        if not self.values:
            self.keys, self.values = keys, dict(values)
            return
        pos = np.searchsorted(self.keys, keys)
        found = pos < len(self.keys)
        found[found] = self.keys[pos[found]] == keys[found]
        old, new = pos[found], ~found
        for name, op in self.ops.items():
            acc = self.values[name]
            acc[old] = UFUNCS[op](acc[old], values[name][found])
        if new.any():
            at = pos[new]
            self.keys = np.insert(self.keys, at, keys[new])
            for name in self.ops:
                self.values[name] = np.insert(self.values[name], at, values[name][new], axis=0)


_MOMENTS = {"n": "sum", "sum": "sum", "sumsq": "sum", "min": "min", "max": "max"}


def _token_keys(block: TokenBlock) -> np.ndarray:
    """One int64 per (token_id, original_id, token_type, category); ids are < 2^28."""
    return (
        (block.token_id.astype(np.int64) << 35)
        | (block.original_id.astype(np.int64) << 7)
        | (block.token_type.astype(np.int64) << 3)
        | block.category.astype(np.int64)
    )


def token_moments(block: TokenBlock, v64: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Unique token keys and their count, Σ, Σ², min, max ([keys, layers, measures])."""
    order, starts, keys = _grouped(_token_keys(block))
    sorted64 = v64[order]
    sorted32 = block.values[order]
    return keys, {
        "n": np.diff(np.r_[starts, len(block)]),
        "sum": np.add.reduceat(sorted64, starts, axis=0),
        "sumsq": np.add.reduceat(sorted64 * sorted64, starts, axis=0),
        "min": np.minimum.reduceat(sorted32, starts, axis=0),
        "max": np.maximum.reduceat(sorted32, starts, axis=0),
    }


def sequence_moments(block: TokenBlock, v64: np.ndarray) -> dict[str, np.ndarray]:
    """Per category (index N_CAT: every token): sequences with such tokens, Σ and Σ² of
    their per-sequence means ([N_CAT + 1, layers, measures])."""
    order, starts, keys = _grouped(block.sequence * N_CAT + block.category)
    counts = np.diff(np.r_[starts, len(block)])
    sums = np.add.reduceat(v64[order], starts, axis=0)  # [sequence × category, layers, m]
    # every token of a sequence: its groups are contiguous (sorted by sequence first)
    seq = keys // N_CAT
    seq_starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
    seq_means = np.add.reduceat(sums, seq_starts, axis=0)
    seq_means /= np.add.reduceat(counts, seq_starts)[:, None, None]
    means = sums / counts[:, None, None]
    cats = keys % N_CAT
    shape = (N_CAT + 1, *v64.shape[1:])
    out = {"sequences": np.zeros(N_CAT + 1, np.int64)}
    out["sequences"][:N_CAT] = np.bincount(cats, minlength=N_CAT)
    out["sequences"][N_CAT] = len(seq_starts)
    for name, power in (("seq_sum", 1), ("seq_sumsq", 2)):
        acc = np.zeros(shape)
        np.add.at(acc, cats, means**power)
        acc[N_CAT] = (seq_means**power).sum(axis=0)
        out[name] = acc
    return out


def token_hist_keys(block: TokenBlock, v64: np.ndarray) -> np.ndarray:
    """(token id, category, measure, bin of the occurrence's layer average) packed, per
    token and measure."""
    avg = v64.sum(axis=1) / block.layers  # [tokens, measures]
    group = block.token_id.astype(np.int64) * N_CAT + block.category
    return ((group[:, None] * N_MEAS + np.arange(N_MEAS)) * HIST_BINS + bins(avg)).ravel()


def layer_hist_counts(block: TokenBlock) -> np.ndarray:
    """Dense counts of token-layer values: [layer 0..L, category, measure, bin] (layer 0 empty)."""
    L = block.layers
    rows = len(block) * L
    layer = np.arange(1, L + 1, dtype=np.int64)
    group = (layer[None, :] * N_CAT + block.category[:, None]).reshape(rows)
    key = (group[:, None] * N_MEAS + np.arange(N_MEAS)) * HIST_BINS + bins(
        block.values.reshape(rows, N_MEAS)
    )
    dense = np.bincount(key.ravel(), minlength=(L + 1) * N_CAT * N_MEAS * HIST_BINS)
    return dense.reshape(L + 1, N_CAT, N_MEAS, HIST_BINS)


class ShardStatistics:
    """The statistics of a shard, block by block, in numpy accumulators.

    ``add`` runs on the worker's host thread while the model runs the next block;
    ``tables`` builds the shard's tables once (float64 sums), token strings attached by id.
    """

    def __init__(self, vocab: Vocabulary) -> None:
        self.vocab = vocab
        self.layers = 0
        self._tokens = Keyed(_MOMENTS)
        self._hist = Keyed({"count": "sum"})
        self._sequences: dict[str, np.ndarray] | None = None
        self._layer_hist: np.ndarray | None = None
        self._freq = np.zeros(0, np.int64)

    def add(self, block: TokenBlock) -> None:
        if len(block) == 0:
            return
        self.layers = block.layers
        v64 = block.values.astype(np.float64)  # [tokens, layers, measures], once
        self._tokens.add(*token_moments(block, v64))
        keys, counts = np.unique(token_hist_keys(block, v64), return_counts=True)
        self._hist.add(keys, {"count": counts})
        seq = sequence_moments(block, v64)
        hist = layer_hist_counts(block)
        if self._sequences is None:
            self._sequences, self._layer_hist = seq, hist
        else:
            for k, v in seq.items():
                self._sequences[k] += v
            self._layer_hist += hist
        freq = np.bincount(block.original_id, minlength=len(self._freq))
        freq[: len(self._freq)] += self._freq
        self._freq = freq

    def tables(self) -> dict[str, pa.Table]:
        """Kind name → the shard's table (float64 sums); empty before any block."""
        if self._sequences is None:
            return {}
        L = self.layers
        layer_of = lambda g: np.tile(np.arange(1, L + 1), g)  # noqa: E731  key-major, layer-minor
        keys, m = self._tokens.keys, self._tokens.values
        g = len(keys)
        category, token_type, token_id = keys & 7, (keys >> 3) & 15, keys >> 35
        moments = {k: m[k] for k in ("sum", "sumsq", "min", "max")}
        out = {
            TOKEN_STATS.name: _table(
                TOKEN_STATS,
                {
                    "layer": layer_of(g),
                    "token_id": np.repeat(token_id, L),
                    "original_id": np.repeat((keys >> 7) & ((1 << 28) - 1), L),
                    "token_type": np.repeat(token_type, L),
                    "category": np.repeat(category, L),
                    "token": self.vocab.arrow(np.repeat(token_id, L)),
                    "n": np.repeat(m["n"], L),
                    **_measure_columns(moments, g * L),
                },
            )
        }
        # layer_stats: the token groups grouped again by (category, pair segment)
        order, starts, k2 = _grouped(category * 16 + token_type)
        m2 = {k: UFUNCS[_MOMENTS[k]].reduceat(v[order], starts, axis=0) for k, v in moments.items()}
        g2 = len(k2)
        out[LAYER_STATS.name] = _table(
            LAYER_STATS,
            {
                "layer": layer_of(g2),
                "category": np.repeat(k2 // 16, L),
                "token_type": np.repeat(k2 % 16, L),
                "n": np.repeat(np.add.reduceat(m["n"][order], starts), L),
                **_measure_columns(m2, g2 * L),
            },
        )
        s = self._sequences
        present = np.flatnonzero(s["sequences"])
        cats = np.where(present == N_CAT, ALL_TOKENS, present)
        out[SEQUENCE_STATS.name] = _table(
            SEQUENCE_STATS,
            {
                "layer": layer_of(len(present)),
                "category": np.repeat(cats, L),
                "sequences": np.repeat(s["sequences"][present], L),
                **_measure_columns(
                    {k: s[k][present] for k in ("seq_sum", "seq_sumsq")}, len(present) * L
                ),
            },
        )
        hk, hc = self._hist.keys, self._hist.values["count"]
        rest = hk // (HIST_BINS * N_MEAS)
        hist_ids = rest // N_CAT
        out[TOKEN_HIST.name] = _table(
            TOKEN_HIST,
            {
                "token_id": hist_ids,
                "category": rest % N_CAT,
                "measure": (hk // HIST_BINS) % N_MEAS,
                "bin": hk % HIST_BINS,
                "token": self.vocab.arrow(hist_ids),
                "count": hc,
            },
        )
        layer, cat, meas, b = np.nonzero(self._layer_hist)
        out[LAYER_HIST.name] = _table(
            LAYER_HIST,
            {
                "layer": layer,
                "category": cat,
                "measure": meas,
                "bin": b,
                "count": self._layer_hist[layer, cat, meas, b],
            },
        )
        ids = np.flatnonzero(self._freq)
        out[FREQUENCIES.name] = _table(
            FREQUENCIES,
            {"token_id": ids, "token": self.vocab.arrow(ids), "count": self._freq[ids]},
        )
        return {name: out[name] for name in STATS}


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
