"""Sufficient statistics of token blocks: the ``STATS`` tables, accumulated on the device.

Every table is keyed (see ``store.schema.STATS``) and every value column merges by sum,
min or max, so the statistics of a shard, of a run or of any set of shards are the merge
of the parts' statistics (:func:`merge`): the unit of commit (a shard) and the unit of
reading (a run) never need the per-token rows. Within a shard, ``ShardStatistics`` keeps
dense accumulators on the device the engine's values are on (torch: a GPU's memory, or
the CPU's), which each block updates in place: per token key (``moments.TokenMoments``: a
key gets a compact id the first time it is seen, so accumulators only ever grow at the
end), per sequence and category (``moments.sequence_moments``), on the histogram grid
(``histograms``) and per token id (frequencies). Nothing per token crosses to the host:
``tables`` copies the accumulators (their size follows the keys seen) and builds the
tables there, once per shard.

The device memory is bounded (``budget``, default ``DEVICE_BUDGET``): when the key-indexed
accumulators would outgrow it, they are moved to the host as a part and the device starts
again empty; ``tables`` merges the parts (the same keys added, extremes combined).

Sums are float64 over the float32 values the detail stores, so a statistic equals the same
aggregate over the detail rows to float64 precision; consolidation (``consolidate``) adds
shards exactly (``store.schema.EXACT_LIMBS``), so a run's statistics are the same bits
whatever the order its shards were merged in.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import torch

from mixscope.registry import MeasureSet
from mixscope.stats.arrow_tables import kind_table, measure_columns
from mixscope.stats.histograms import LayerHistogram, TokenHistogram, bins
from mixscope.stats.keys import ID_BITS, grouped, key_order, token_keys
from mixscope.stats.moments import MOMENTS, N_CAT, TokenMoments, add_extremes, sequence_moments
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

__all__ = ["DEVICE_BUDGET", "ShardStatistics", "bins", "merge", "statistics"]

#: how a value merges: its operation's ufunc (``reduceat`` within a table, elementwise across)
UFUNCS = {"sum": np.add, "min": np.minimum, "max": np.maximum}
#: device bytes a shard's accumulators may hold (a 32-layer model, every group, any
#: vocabulary and shard size: ``tests/test_stats_device.py``)
DEVICE_BUDGET = 1 << 30


class ShardStatistics:
    """The statistics of a shard, block by block, in dense accumulators on the device.

    ``add`` runs on the worker's result thread while the model runs the next block (on a
    GPU it only queues kernels); ``tables`` builds the shard's tables once (float64 sums),
    token strings attached by id.
    """

    def __init__(
        self,
        vocab: Vocabulary,
        measures: MeasureSet,
        budget: int = DEVICE_BUDGET,
    ) -> None:
        self.vocab = vocab
        self.measures = measures  # the run's columns (it keeps the stored ones)
        self.kinds = stats_kinds(self.measures.stored)
        self.budget = budget
        self.layers = 0
        self.device: torch.device | None = None
        self._tokens: TokenMoments | None = None
        self._token_hist = TokenHistogram(self.measures.codes)
        self._layer_hist = LayerHistogram(self.measures.codes)
        self._sequences: dict[str, torch.Tensor] | None = None
        self._freq: torch.Tensor | None = None
        self._parts: list[dict[str, torch.Tensor]] = []  # key-indexed state moved to the host
        self.peak_bytes = 0  # the most the accumulators held on the device

    @property
    def nbytes(self) -> int:
        """What the accumulators hold on the device now."""
        fixed = [self._layer_hist.counts, self._freq, *(self._sequences or {}).values()]
        held = sum(t.numel() * t.element_size() for t in fixed if t is not None)
        tokens = self._tokens.nbytes if self._tokens is not None else 0
        return held + tokens + self._token_hist.nbytes

    def add(self, block: TokenBlock) -> None:
        if len(block) == 0:
            return
        values = block.values  # [tokens, measures, layers] float32, on the device
        if self._tokens is None:
            self.device, self.layers = values.device, block.layers
            self._tokens = TokenMoments(len(self.measures.stored), values.device)
        assert block.layers == self.layers, "every block of a shard has the model's layers"
        dev = self.device

        def on_device(a: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(np.ascontiguousarray(a, np.int64)).to(dev)

        keys, category = on_device(token_keys(block)), on_device(block.category)
        v64 = values.double()  # [tokens, measures, layers], once (contiguous: every scatter
        # of it is 2-3x slower from a strided view, benchmarks/host.py)
        self._layer_hist.add(values, category)
        vocab = max(len(self._freq) if self._freq is not None else 0, block.original_id.max() + 1)
        uniq, inverse, counts = torch.unique(keys, return_inverse=True, return_counts=True)
        limit, found = self._room(uniq, len(keys), int(vocab))
        ids = self._tokens.add(uniq, inverse, counts, values, v64, limit, found)
        self._token_hist.add(ids, v64)
        seq = sequence_moments(on_device(block.sequence), category, v64)
        if self._sequences is None:
            self._sequences = seq
        else:
            for k, v in seq.items():
                self._sequences[k] += v
        original = on_device(block.original_id)
        freq = torch.bincount(original, minlength=len(self._freq) if self._freq is not None else 0)
        if self._freq is not None:
            freq[: len(self._freq)] += self._freq
        self._freq = freq
        self.peak_bytes = max(self.peak_bytes, self.nbytes)

    def _room(
        self, uniq: torch.Tensor, tokens_in_block: int, vocab: int
    ) -> tuple[int, tuple[torch.Tensor, torch.Tensor] | None]:
        """The most ids the token accumulators may grow to, and the keys' ids as far as the
        index knows them (``KeyIndex.find``, None after a move: ``add`` looks them up once);
        first, the key-indexed state moved to the host when this block's new keys
        (``uniq``) would not fit the budget.
        What the budget holds: the layer histogram and the frequencies (fixed), the
        sequences' moments (a few cells), the token histogram's events (this block's at most
        one per token and measure) and the token moments (``bytes_per_id`` each)."""
        tokens = self._tokens
        assert tokens is not None
        M = len(self.measures.stored)
        per_id = tokens.bytes_per_id(self.layers)
        fixed = LayerHistogram.nbytes_for(self.layers, M) + 8 * vocab
        fixed += 2 * 8 * (N_CAT + 1) * M * self.layers + 8 * (N_CAT + 1)  # sequences
        events = 16 * tokens_in_block * M
        room = (self.budget - fixed - self._token_hist.nbytes - events) // per_id
        # the ids held (their capacity, reserved earlier) and this block's new ones
        found: tuple[torch.Tensor, torch.Tensor] | None = tokens.index.find(uniq)
        assert found is not None
        need = max(tokens.capacity, len(tokens.index) + int((~found[1]).sum()))
        if need > room and len(tokens.index):
            self._flush()
            found = None
            room = (self.budget - fixed - events) // per_id
        if len(uniq) > room:
            raise MemoryError(
                f"a block of {len(uniq)} token keys does not fit in the statistics' device "
                f"budget of {self.budget} bytes; use smaller chunks or a larger budget"
            )
        return int(room), found

    def _flush(self) -> None:
        """Move the key-indexed accumulators (moments, token histogram) to the host as a
        part, and start them again empty on the device."""
        assert self._tokens is not None
        part = {k: v.cpu() for k, v in self._tokens.held().items()}
        events, counts = self._token_hist.counted()  # distinct events: what crosses
        part["events"], part["counts"] = events.cpu(), counts.cpu()
        self._parts.append(part)
        self._tokens = TokenMoments(len(self.measures.stored), self._tokens.device)
        self._token_hist = TokenHistogram(self.measures.codes)

    def _merged(self) -> dict[str, torch.Tensor]:
        """The key-indexed state of the whole shard: keys sorted, the moments by key
        (``[measure, key, layer]``: a measure's column of the table is contiguous), the
        token histogram's events and ``event_keys``, the key of each id they are numbered
        by (the table counts them in its own order); on the device where one part holds it
        all, else on the host, the parts merged (the same keys added, extremes combined)."""
        assert self._tokens is not None
        last = dict(self._tokens.held())
        dev = last["key"].device
        # the last part's events: on a GPU counted there (the distinct events cross), on
        # the CPU left for the table's one sort
        hist = self._token_hist
        last["events"], last["counts"] = hist.counted() if dev.type != "cpu" else hist.pending()
        parts = [*self._parts, last]
        if len(parts) == 1:
            keys, order = torch.sort(last["key"])
            out = {"key": keys, "n": last["n"][order], "event_keys": last["key"]}
            for m in MOMENTS:  # [id, measure, layer] → [measure, key, layer]: rows gathered
                # whole (contiguous), then one transposing copy
                out[m] = last[m].index_select(0, order).transpose(0, 1).contiguous()
            out["events"], out["counts"] = last["events"], last["counts"]
            return out
        parts = [{k: v.cpu() for k, v in p.items()} for p in parts]
        keys, inverse = torch.unique(torch.cat([p["key"] for p in parts]), return_inverse=True)
        K, cell_bits = len(keys), hist.cell_bits
        out = {"key": keys, "n": torch.zeros(K, dtype=torch.int64)}
        shape = (K, *parts[0]["sum"].shape[1:])
        out["sum"] = torch.zeros(shape, dtype=torch.float64)
        out["sumsq"] = torch.zeros(shape, dtype=torch.float64)
        out["min"] = torch.full(shape, float("inf"))
        out["max"] = torch.full(shape, float("-inf"))
        all_events, all_counts, start = [], [], 0
        for p in parts:
            ids = inverse[start : start + len(p["key"])]  # this part's id → merged id
            start += len(p["key"])
            out["n"].index_add_(0, ids, p["n"])
            out["sum"].index_add_(0, ids, p["sum"])
            out["sumsq"].index_add_(0, ids, p["sumsq"])
            add_extremes(out["min"], out["max"], ids, p["min"], p["max"])
            renumbered = (ids[p["events"] >> cell_bits] << cell_bits) | (
                p["events"] & ((1 << cell_bits) - 1)
            )
            all_events.append(renumbered)
            all_counts.append(p["counts"])
        for m in MOMENTS:
            out[m] = out[m].transpose(0, 1).contiguous()
        out["events"], out["counts"] = torch.cat(all_events), torch.cat(all_counts)
        out["event_keys"] = keys
        return out

    def tables(self) -> dict[str, pa.Table]:
        """Kind name → the shard's table (float64 sums); empty before any block."""
        if self._sequences is None:
            return {}
        state = {k: v.cpu().numpy() for k, v in self._merged().items()}
        keys, n = state["key"], state["n"]
        moments = {k: state[k] for k in MOMENTS}  # [measure, key, layer]
        assert self._freq is not None
        freq = self._freq.cpu().numpy()
        out = {
            "token_stats": self._token_stats(keys, n, moments),
            "layer_stats": self._layer_stats(keys, n, moments),
            "sequence_stats": self._sequence_stats(),
            "token_hist": self._token_hist.table(
                state["event_keys"], state["events"], state["counts"]
            ),
            "layer_hist": self._layer_hist.table(),
        }
        ids = np.flatnonzero(freq)
        out[FREQUENCIES.name] = kind_table(
            FREQUENCIES,
            {"token_id": ids, "token": self.vocab.arrow(ids), "count": freq[ids]},
        )
        named = np.union1d(ids, keys >> 35)  # original ids and ids as seen ([MASK])
        out[TOKEN_STRINGS.name] = kind_table(
            TOKEN_STRINGS, {"token_id": named, "token": self.vocab.arrow(named)}
        )
        return {name: out[name] for name in self.kinds}

    def _token_stats(self, keys: np.ndarray, n: np.ndarray, m: dict[str, np.ndarray]) -> pa.Table:
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

    def _layer_stats(self, keys: np.ndarray, n: np.ndarray, m: dict[str, np.ndarray]) -> pa.Table:
        """The token groups grouped again by (category, pair segment): ``reduceat`` of each
        measure's ``[key, layer]`` rows in the groups' order (its pairwise sums: the bits
        the tables have always had)."""
        L = self.layers
        order, starts, k2 = grouped((keys & 7) * 16 + ((keys >> 3) & 15))
        merged = {
            k: [UFUNCS[op].reduceat(a[order], starts, axis=0) for a in m[k]]
            for k, op in (("sum", "sum"), ("sumsq", "sum"), ("min", "min"), ("max", "max"))
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
        assert self._sequences is not None
        s = {k: v.cpu().numpy() for k, v in self._sequences.items()}
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


def statistics(block: TokenBlock, vocab: Vocabulary, measures: MeasureSet) -> dict[str, pa.Table]:
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
