"""Sufficient statistics of token blocks: the ``STATS`` tables, vectorized numpy.

Every table is keyed (see ``store.schema.STATS``) and every value column merges by sum,
min or max, so the statistics of a shard, of a run or of any set of shards are the merge
of the parts' statistics (:func:`merge`): the unit of commit (a shard) and the unit of
reading (a run) never need the per-token rows. Within a shard, ``ShardStatistics`` keeps
dense numpy accumulators that each block updates in place: per token key
(``moments.TokenMoments``: a key gets a compact id the first time it is seen, so
accumulators only ever grow at the end), per sequence and category
(``moments.sequence_moments``) and on the histogram grid (``histograms``); no table is
built until the shard's files are written.

Sums are float64 over the float32 values the detail stores, so a statistic equals the same
aggregate over the detail rows to float64 precision; consolidation (``consolidate``) adds
shards exactly (``store.schema.EXACT_LIMBS``), so a run's statistics are the same bits
whatever the order its shards were merged in.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mixscope.mixing.measures import DEFAULT_GROUPS, MeasureSet, measure_set
from mixscope.stats.arrow_tables import kind_table, measure_columns
from mixscope.stats.histograms import LayerHistogram, TokenHistogram, bins
from mixscope.stats.keys import ID_BITS, grouped, key_order, token_keys
from mixscope.stats.moments import N_CAT, TokenMoments, sequence_moments
from mixscope.stats.singletons import restore
from mixscope.stats.token_block import TokenBlock, Vocabulary
from mixscope.store.schema import (
    ALL_TOKENS,
    EXACT_LIMBS,
    FREQUENCIES,
    TOKEN_STRINGS,
    StatsKind,
    stats_kinds,
)

__all__ = ["ShardStatistics", "bins", "merge", "statistics"]

#: how a value merges: its operation's ufunc (``reduceat`` within a table, elementwise across)
UFUNCS = {"sum": np.add, "min": np.minimum, "max": np.maximum}
_MOMENTS = {"n": "sum", "sum": "sum", "sumsq": "sum", "min": "min", "max": "max"}


class ShardStatistics:
    """The statistics of a shard, block by block, in dense numpy accumulators.

    ``add`` runs on the worker's host thread while the model runs the next block;
    ``tables`` builds the shard's tables once (float64 sums), token strings attached by id.
    """

    def __init__(self, vocab: Vocabulary, measures: MeasureSet | None = None) -> None:
        self.vocab = vocab
        self.measures = measures or measure_set(DEFAULT_GROUPS)  # the run's stored measures
        self.kinds = stats_kinds(self.measures.stored)
        self.layers = 0
        self._tokens = TokenMoments(len(self.measures.stored))
        self._token_hist = TokenHistogram(self.measures.codes)
        self._layer_hist = LayerHistogram(self.measures.codes)
        self._sequences: dict[str, np.ndarray] | None = None
        self._freq = np.zeros(0, np.int64)

    def add(self, block: TokenBlock) -> None:
        if len(block) == 0:
            return
        L = self.layers = block.layers
        v64 = block.values.astype(np.float64)  # [layers, measures, tokens], once
        ids = self._tokens.add(token_keys(block), block.values)
        self._token_hist.add(ids, v64)
        self._layer_hist.add(block.values, block.category)
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

    def tables(self) -> dict[str, pa.Table]:
        """Kind name → the shard's table (float64 sums); empty before any block."""
        if self._sequences is None:
            return {}
        keys, n, moments = self._tokens.by_key()
        out = {
            "token_stats": self._token_stats(keys, n, moments),
            "layer_stats": self._layer_stats(keys, n, moments),
            "sequence_stats": self._sequence_stats(),
            "token_hist": self._token_hist.table(self._tokens.index.keys),
            "layer_hist": self._layer_hist.table(),
        }
        ids = np.flatnonzero(self._freq)
        out[FREQUENCIES.name] = kind_table(
            FREQUENCIES,
            {"token_id": ids, "token": self.vocab.arrow(ids), "count": self._freq[ids]},
        )
        named = np.union1d(ids, keys >> 35)  # original ids and ids as seen ([MASK])
        out[TOKEN_STRINGS.name] = kind_table(
            TOKEN_STRINGS, {"token_id": named, "token": self.vocab.arrow(named)}
        )
        return {name: out[name] for name in self.kinds}

    def _token_stats(
        self, keys: np.ndarray, n: np.ndarray, m: dict[str, list[np.ndarray]]
    ) -> pa.Table:
        L = self.layers
        token_id = keys >> 35
        per_row = lambda a: np.repeat(a, L)  # noqa: E731  key-major, layer-minor
        return kind_table(
            self.kinds["token_stats"],
            {
                "layer": np.tile(np.arange(1, L + 1, dtype=np.int16), len(keys)),
                "token_id": per_row(token_id),
                "original_id": per_row((keys >> 7) & ((1 << ID_BITS) - 1)),
                "token_type": per_row((keys >> 3) & 15),
                "category": per_row(keys & 7),
                "n": per_row(n),
                **measure_columns(m, self.measures.stored),
            },
            singleton=per_row(n == 1),
        )

    def _layer_stats(
        self, keys: np.ndarray, n: np.ndarray, m: dict[str, list[np.ndarray]]
    ) -> pa.Table:
        """The token groups grouped again by (category, pair segment)."""
        L = self.layers
        order, starts, k2 = grouped((keys & 7) * 16 + ((keys >> 3) & 15))
        merged = {
            k: [UFUNCS[_MOMENTS[k]].reduceat(a[order], starts, axis=0) for a in m[k]]
            for k in ("sum", "sumsq", "min", "max")
        }
        return kind_table(
            self.kinds["layer_stats"],
            {
                "layer": np.tile(np.arange(1, L + 1), len(k2)),
                "category": np.repeat(k2 // 16, L),
                "token_type": np.repeat(k2 % 16, L),
                "n": np.repeat(np.add.reduceat(n[order], starts), L),
                **measure_columns(merged, self.measures.stored),
            },
        )

    def _sequence_stats(self) -> pa.Table:
        L = self.layers
        s = self._sequences
        assert s is not None
        present = np.flatnonzero(s["sequences"])
        cats = np.where(present == N_CAT, ALL_TOKENS, present)
        moments = {k: s[k][present].transpose(1, 0, 2) for k in ("seq_sum", "seq_sumsq")}
        return kind_table(
            self.kinds["sequence_stats"],
            {
                "layer": np.tile(np.arange(1, L + 1), len(present)),
                "category": np.repeat(cats, L),
                "sequences": np.repeat(s["sequences"][present], L),
                **measure_columns(moments, self.measures.stored),
            },
        )


def statistics(
    block: TokenBlock, vocab: Vocabulary, measures: MeasureSet | None = None
) -> dict[str, pa.Table]:
    """Every statistics table of one block (kind name → table)."""
    acc = ShardStatistics(vocab, measures)
    acc.add(block)
    return acc.tables()


def merge(kind: StatsKind, tables: list[pa.Table]) -> pa.Table:
    """The statistics of the union of the parts: rows grouped by the keys, each value merged
    by its operation (sums add, minima and maxima combine; integer sums, such as the exact
    limbs of consolidated files, add exactly). Within a key, rows are taken in the order of
    ``tables``. Sorting and ``reduceat``: no hash aggregation over dozens of columns. A
    shard's singleton NULLs (``stats/singletons.py``) are restored first."""
    tables = [restore(kind, t) for t in tables]
    if len(tables) == 1:
        return tables[0]
    whole = pa.concat_tables(tables)
    keys = np.column_stack([whole[k].to_numpy().astype(np.int64) for k in kind.key_names])
    order = key_order(keys)  # stable: the tables' order within a key
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
