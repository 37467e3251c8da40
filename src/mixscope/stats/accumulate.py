"""Sufficient statistics of a token block: the five ``STATS`` tables, vectorized numpy.

Every table is keyed (see ``store.schema.STATS``) and every value column merges by sum,
min or max, so the statistics of a shard, of a run or of any set of shards are the merge
of the parts' statistics (:func:`merge`): the unit of commit (a shard) and the unit of
reading (a run) never need the per-token rows.

Sums are float64 over the float32 values the detail stores, so a statistic equals the same
aggregate over the detail rows to float64 precision; consolidation (``consolidate``) adds
shards exactly (``store.schema.EXACT_TYPE``), so a run's statistics are the same bits
whatever the order its shards were merged in.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mixscope.stats.block import TokenBlock, Vocabulary
from mixscope.store.schema import (
    ALL_TOKENS,
    CATEGORIES,
    EXACT_SUFFIX,
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


def _moments(vals: np.ndarray, starts: np.ndarray) -> dict[str, np.ndarray]:
    """Σ, Σ², min, max over groups of axis 0 of ``vals`` [rows, ..., measures] (sorted)."""
    v64 = vals.astype(np.float64)
    return {
        "sum": np.add.reduceat(v64, starts, axis=0),
        "sumsq": np.add.reduceat(v64 * v64, starts, axis=0),
        "min": np.minimum.reduceat(vals, starts, axis=0),
        "max": np.maximum.reduceat(vals, starts, axis=0),
    }


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


_REDUCE = {"sum": np.add, "sumsq": np.add, "min": np.minimum, "max": np.maximum}


def _token_keys(block: TokenBlock) -> np.ndarray:
    """One int64 per (token_id, original_id, token_type, category); ids are < 2^28."""
    return (
        (block.token_id.astype(np.int64) << 35)
        | (block.original_id.astype(np.int64) << 7)
        | (block.token_type.astype(np.int64) << 3)
        | block.category.astype(np.int64)
    )


def token_and_layer_stats(block: TokenBlock, v64: np.ndarray) -> tuple[pa.Table, pa.Table]:
    """token_stats, then layer_stats from its groups (one pass over the token values)."""
    L = block.layers
    order, starts, keys = _grouped(_token_keys(block))
    counts = np.diff(np.r_[starts, len(block)])
    sorted64 = v64[order]
    sorted32 = block.values[order]
    m = {  # [groups, layers, measures]
        "sum": np.add.reduceat(sorted64, starts, axis=0),
        "sumsq": np.add.reduceat(sorted64 * sorted64, starts, axis=0),
        "min": np.minimum.reduceat(sorted32, starts, axis=0),
        "max": np.maximum.reduceat(sorted32, starts, axis=0),
    }
    g = len(keys)
    category, token_type = keys & 7, (keys >> 3) & 15
    tokens = _table(
        TOKEN_STATS,
        {
            "layer": np.tile(np.arange(1, L + 1), g),
            "token_id": np.repeat(keys >> 35, L),
            "original_id": np.repeat((keys >> 7) & ((1 << 28) - 1), L),
            "token_type": np.repeat(token_type, L),
            "category": np.repeat(category, L),
            "n": np.repeat(counts, L),
            **_measure_columns(m, g * L),
        },
    )
    order2, starts2, keys2 = _grouped(category * 16 + token_type)
    m2 = {k: _REDUCE[k].reduceat(v[order2], starts2, axis=0) for k, v in m.items()}
    g2 = len(keys2)
    layers = _table(
        LAYER_STATS,
        {
            "layer": np.tile(np.arange(1, L + 1), g2),
            "category": np.repeat(keys2 // 16, L),
            "token_type": np.repeat(keys2 % 16, L),
            "n": np.repeat(np.add.reduceat(counts[order2], starts2), L),
            **_measure_columns(m2, g2 * L),
        },
    )
    return tokens, layers


def sequence_stats(block: TokenBlock, v64: np.ndarray) -> pa.Table:
    """Per (layer, category): sequences that have such tokens, Σ and Σ² of their means."""
    L = block.layers
    order, starts, keys = _grouped(block.sequence * N_CAT + block.category)
    counts = np.diff(np.r_[starts, len(block)])
    sums = np.add.reduceat(v64[order], starts, axis=0)  # [sequence × category, layers, m]
    # every token of a sequence: its groups are contiguous (sorted by sequence first)
    seq = keys // N_CAT
    seq_starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
    seq_sums = np.add.reduceat(sums, seq_starts, axis=0)
    seq_counts = np.add.reduceat(counts, seq_starts)
    cats = np.r_[keys % N_CAT, np.full(len(seq_starts), ALL_TOKENS)]
    means = np.concatenate(
        [sums / counts[:, None, None], seq_sums / seq_counts[:, None, None]]
    )  # [groups, layers, measures]
    order, starts, ukeys = _grouped(cats)
    ordered = means[order]
    seq_sum = np.add.reduceat(ordered, starts, axis=0)  # [categories, layers, measures]
    seq_sumsq = np.add.reduceat(ordered * ordered, starts, axis=0)
    n_seq = np.diff(np.r_[starts, len(cats)])
    g = len(ukeys)
    cols = {
        "layer": np.tile(np.arange(1, L + 1), g),
        "category": np.repeat(ukeys, L),
        "sequences": np.repeat(n_seq, L),
        **_measure_columns({"seq_sum": seq_sum, "seq_sumsq": seq_sumsq}, g * L),
    }
    return _table(SEQUENCE_STATS, cols)


def _histogram(
    kind: StatsKind,
    group: np.ndarray,
    b: np.ndarray,
    names: dict[str, tuple[int, int]],
    groups: int | None = None,
) -> pa.Table:
    """Counts of (group, measure, bin); ``b`` [rows, measures] bins, ``group`` [rows].

    ``groups``: the number of groups when small, to count with a dense bincount (no sort).
    """
    key = (group[:, None] * N_MEAS + np.arange(N_MEAS)) * HIST_BINS + b  # [rows, measures]
    if groups is not None:
        dense = np.bincount(key.ravel(), minlength=groups * N_MEAS * HIST_BINS)
        uniq = np.flatnonzero(dense)
        counts = dense[uniq]
    else:
        uniq, counts = np.unique(key.ravel(), return_counts=True)
    cols = {"bin": uniq % HIST_BINS, "measure": (uniq // HIST_BINS) % N_MEAS, "count": counts}
    rest = uniq // (HIST_BINS * N_MEAS)
    for name, (divisor, modulo) in names.items():
        cols[name] = (rest // divisor) % modulo
    return _table(kind, cols)


def token_hist(block: TokenBlock, v64: np.ndarray) -> pa.Table:
    """Histogram of each occurrence's layer-averaged value, per token id and category."""
    avg = v64.sum(axis=1) / block.layers  # [tokens, measures]
    group = block.token_id.astype(np.int64) * N_CAT + block.category
    names = {"category": (1, N_CAT), "token_id": (N_CAT, 1 << 31)}
    return _histogram(TOKEN_HIST, group, bins(avg), names)


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


def layer_hist_table(counts: np.ndarray) -> pa.Table:
    layer, category, measure, b = np.nonzero(counts)
    cols = {"layer": layer, "category": category, "measure": measure, "bin": b}
    return _table(LAYER_HIST, {**cols, "count": counts[layer, category, measure, b]})


def frequencies(block: TokenBlock, v64: np.ndarray | None = None) -> pa.Table:
    """Occurrences of each token id before masking (the corpus's own counts)."""
    uniq, counts = np.unique(block.original_id, return_counts=True)
    return _table(FREQUENCIES, {"token_id": uniq, "count": counts})


def block_tables(block: TokenBlock) -> dict[str, pa.Table]:
    """The tables computed per block (layer_hist is counted densely, see ShardStatistics)."""
    v64 = block.values.astype(np.float64)  # [tokens, layers, measures], once
    tokens, layers = token_and_layer_stats(block, v64)
    return {
        FREQUENCIES.name: frequencies(block),
        LAYER_STATS.name: layers,
        SEQUENCE_STATS.name: sequence_stats(block, v64),
        TOKEN_STATS.name: tokens,
        TOKEN_HIST.name: token_hist(block, v64),
    }


class ShardStatistics:
    """The statistics of a shard, block by block.

    Each block's tables are computed as it comes (on the worker's host thread, while the
    model runs the next one); the layer histogram is counted in place; ``tables`` merges
    the parts once and attaches token strings (a function of the id) after the merge.
    """

    def __init__(self, vocab: Vocabulary) -> None:
        self.vocab = vocab
        self._parts: list[dict[str, pa.Table]] = []
        self._layer_hist: np.ndarray | None = None

    #: parts merged as they come, so the merge left for ``tables`` stays small
    MERGE_EVERY = 4

    def add(self, block: TokenBlock) -> None:
        self._parts.append(block_tables(block))
        if len(self._parts) >= self.MERGE_EVERY:
            kinds = self._parts[0]
            self._parts = [{k: merge(STATS[k], [p[k] for p in self._parts]) for k in kinds}]
        counts = layer_hist_counts(block)
        if self._layer_hist is None:
            self._layer_hist = counts
        else:
            self._layer_hist += counts

    def tables(self) -> dict[str, pa.Table]:
        """Kind name → working table (float64 sums); empty dict before any block."""
        if self._layer_hist is None:
            return {}
        out = {}
        for name in self._parts[0]:
            merged = merge(STATS[name], [p[name] for p in self._parts])
            out[name] = self._complete(STATS[name], merged)
        out[LAYER_HIST.name] = layer_hist_table(self._layer_hist)
        return {name: out[name] for name in STATS}

    def _complete(self, kind: StatsKind, table: pa.Table) -> pa.Table:
        if "token" in kind.schema.names and "token" not in table.column_names:
            table = table.append_column("token", self.vocab.arrow(table["token_id"].to_numpy()))
        return table.select(kind.schema.names).cast(kind.schema)


def statistics(block: TokenBlock, vocab: Vocabulary) -> dict[str, pa.Table]:
    """Every statistics table of one block (kind name → working table)."""
    acc = ShardStatistics(vocab)
    acc.add(block)
    return acc.tables()


def merge(kind: StatsKind, tables: list[pa.Table]) -> pa.Table:
    """The statistics of the union of the parts: group by the keys, merge each value.

    Float sums merge in float64, the exact decimal twins of consolidated tables exactly.
    """
    if len(tables) == 1:
        return tables[0]
    whole = pa.concat_tables(tables)
    present = set(whole.column_names)
    merged = whole.group_by(list(kind.key_names), use_threads=False).aggregate(
        [(v, op) for v, _, op in kind.values if v in present]
        + [(v + EXACT_SUFFIX, "sum") for v in kind.exact_columns if v + EXACT_SUFFIX in present]
    )
    renamed = merged.rename_columns(
        [c.rsplit("_", 1)[0] if c not in kind.key_names else c for c in merged.column_names]
    )  # "attn_w_sum_sum" → "attn_w_sum", "attn_w_sum_exact_sum" → "attn_w_sum_exact"
    return renamed.select(tables[0].column_names).cast(tables[0].schema)
