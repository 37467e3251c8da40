"""Sufficient statistics of a token block: the five ``STATS`` tables, vectorized numpy.

Every table is keyed (see ``store.schema.STATS``) and every value column merges by sum,
min or max, so the statistics of a shard, of a run or of any set of shards are the merge
of the parts' statistics (:func:`merge`): the unit of commit (a shard) and the unit of
reading (a run) never need the per-token rows.

Sums are float64 over the float32 values the detail stores, rounded to exact decimals
(``SUM_TYPE``) per block, so every merge after that is exact: a statistic equals the same
aggregate over the detail rows to float64 precision, and the same bits whatever the merge
order.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mixscope.stats.block import TokenBlock, Vocabulary
from mixscope.store.schema import (
    ALL_TOKENS,
    CATEGORIES,
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
    """Histogram bin of each value in [0, 1] (1.0 in the last bin), as int64."""
    b = np.floor(values.astype(np.float64) * HIST_BINS).astype(np.int64)
    return np.clip(b, 0, HIST_BINS - 1)


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
    schema = kind.schema
    arrays = [
        pa.array(columns[f.name]).cast(f.type)
        if pa.types.is_decimal(f.type)
        else pa.array(columns[f.name], f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def _measure_columns(stats: dict[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
    """``{stat: [..., measure]}`` → ``{"attn_w_sum": [rows], …}``."""
    out = {}
    for k, m in enumerate(STORED_MEASURES):
        for stat, arr in stats.items():
            out[f"{m}_{stat}"] = arr.reshape(rows, N_MEAS)[:, k]
    return out


def layer_stats(block: TokenBlock) -> pa.Table:
    L = block.layers
    group = block.category.astype(np.int64) * 256 + block.token_type.astype(np.int64)
    order, starts, keys = _grouped(group)
    counts = np.diff(np.r_[starts, len(block)])
    m = _moments(block.values[order], starts)  # [groups, layers, measures]
    g = len(keys)
    cols = {
        "layer": np.tile(np.arange(1, L + 1), g),
        "category": np.repeat(keys // 256, L),
        "token_type": np.repeat(keys % 256, L),
        "n": np.repeat(counts, L),
        **_measure_columns(m, g * L),
    }
    return _table(LAYER_STATS, cols)


def sequence_stats(block: TokenBlock) -> pa.Table:
    """Per (layer, category): sequences that have such tokens, Σ and Σ² of their means."""
    L = block.layers
    parts = []
    for key, scope in ((block.sequence * N_CAT + block.category, True), (block.sequence, False)):
        order, starts, keys = _grouped(key)
        counts = np.diff(np.r_[starts, len(block)])
        means = np.add.reduceat(block.values[order].astype(np.float64), starts, axis=0)
        means /= counts[:, None, None]  # [groups, layers, measures]
        cats = (keys % N_CAT) if scope else np.full(len(keys), ALL_TOKENS)
        parts.append((cats, means))
    cats = np.concatenate([c for c, _ in parts])
    means = np.concatenate([m for _, m in parts])
    order, starts, ukeys = _grouped(cats)
    seq_sum = np.add.reduceat(means[order], starts, axis=0)  # [categories, layers, measures]
    seq_sumsq = np.add.reduceat(means[order] ** 2, starts, axis=0)
    n_seq = np.diff(np.r_[starts, len(cats)])
    g = len(ukeys)
    cols = {
        "layer": np.tile(np.arange(1, L + 1), g),
        "category": np.repeat(ukeys, L),
        "sequences": np.repeat(n_seq, L),
        **_measure_columns({"seq_sum": seq_sum, "seq_sumsq": seq_sumsq}, g * L),
    }
    return _table(SEQUENCE_STATS, cols)


def _token_keys(block: TokenBlock) -> np.ndarray:
    """One int64 per (token_id, original_id, category); ids are < 2^28."""
    return (
        (block.token_id.astype(np.int64) << 31)
        | (block.original_id.astype(np.int64) << 3)
        | block.category.astype(np.int64)
    )


def token_stats(block: TokenBlock, vocab: Vocabulary) -> pa.Table:
    L = block.layers
    order, starts, keys = _grouped(_token_keys(block))
    counts = np.diff(np.r_[starts, len(block)])
    m = _moments(block.values[order], starts)  # [groups, layers, measures]
    g = len(keys)
    token_id = (keys >> 31).astype(np.int32)
    cols = {
        "layer": np.tile(np.arange(1, L + 1), g),
        "token_id": np.repeat(token_id, L),
        "original_id": np.repeat((keys >> 3) & ((1 << 28) - 1), L),
        "category": np.repeat(keys & 7, L),
        "token": np.repeat(vocab.strings(token_id), L),
        "n": np.repeat(counts, L),
        **_measure_columns(m, g * L),
    }
    return _table(TOKEN_STATS, cols)


def _histogram(
    kind: StatsKind,
    group: np.ndarray,
    b: np.ndarray,
    names: dict[str, tuple[int, int]],
    vocab: Vocabulary | None = None,
) -> pa.Table:
    """Counts of (group, measure, bin); ``b`` [rows, measures] bins, ``group`` [rows]."""
    key = (group[:, None] * N_MEAS + np.arange(N_MEAS)) * HIST_BINS + b  # [rows, measures]
    uniq, counts = np.unique(key.ravel(), return_counts=True)
    cols = {"bin": uniq % HIST_BINS, "measure": (uniq // HIST_BINS) % N_MEAS, "count": counts}
    rest = uniq // (HIST_BINS * N_MEAS)
    for name, (divisor, modulo) in names.items():
        cols[name] = (rest // divisor) % modulo
    if vocab is not None:
        cols["token"] = vocab.strings(cols["token_id"])
    return _table(kind, cols)


def token_hist(block: TokenBlock, vocab: Vocabulary) -> pa.Table:
    """Histogram of each occurrence's layer-averaged value, per token id and category."""
    avg = block.values.astype(np.float64).mean(axis=1)  # [tokens, measures]
    group = block.token_id.astype(np.int64) * N_CAT + block.category
    names = {"category": (1, N_CAT), "token_id": (N_CAT, 1 << 31)}
    return _histogram(TOKEN_HIST, group, bins(avg), names, vocab)


def layer_hist(block: TokenBlock) -> pa.Table:
    L = block.layers
    rows = len(block) * L
    layer = np.arange(1, L + 1, dtype=np.int64)
    group = (layer[None, :] * N_CAT + block.category[:, None]).reshape(rows)
    b = bins(block.values.reshape(rows, N_MEAS))
    return _histogram(LAYER_HIST, group, b, {"category": (1, N_CAT), "layer": (N_CAT, 1 << 15)})


def frequencies(block: TokenBlock, vocab: Vocabulary) -> pa.Table:
    """Occurrences of each token id before masking (the corpus's own counts)."""
    uniq, counts = np.unique(block.original_id, return_counts=True)
    return _table(FREQUENCIES, {"token_id": uniq, "token": vocab.strings(uniq), "count": counts})


def statistics(block: TokenBlock, vocab: Vocabulary) -> dict[str, pa.Table]:
    """Every statistics table of ``block`` (kind name → table)."""
    return {
        FREQUENCIES.name: frequencies(block, vocab),
        LAYER_STATS.name: layer_stats(block),
        SEQUENCE_STATS.name: sequence_stats(block),
        TOKEN_STATS.name: token_stats(block, vocab),
        TOKEN_HIST.name: token_hist(block, vocab),
        LAYER_HIST.name: layer_hist(block),
    }


def merge(kind: StatsKind, tables: list[pa.Table]) -> pa.Table:
    """The statistics of the union of the parts: group by the keys, merge each value."""
    if len(tables) == 1:
        return tables[0]
    whole = pa.concat_tables(tables)
    merged = whole.group_by(list(kind.key_names), use_threads=False).aggregate(
        [(v, op) for v, _, op in kind.values]
    )
    renamed = merged.rename_columns(
        [c.rsplit("_", 1)[0] if c not in kind.key_names else c for c in merged.column_names]
    )
    return renamed.select([f.name for f in kind.schema]).cast(kind.schema)


def merge_all(parts: list[dict[str, pa.Table]]) -> dict[str, pa.Table]:
    return {name: merge(kind, [p[name] for p in parts]) for name, kind in STATS.items()}
