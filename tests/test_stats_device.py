"""Statistics accumulated by torch on the engine's device (issue 39).

- equal to the numpy/numba code they replaced, table by table, on every group
  (``tests/stats_golden.py``: that code's output on fixed inputs, kept as Parquet): every
  integer, count and extreme exactly, every float64 sum to the last bits;
- the device memory they hold is bounded: moved to the host in parts when a budget is
  reached, with the same tables as without a bound; a 32-layer model with every group and a
  128k-token vocabulary stays under 1 GiB;
- the worker's chunk tensor (``run_chunk``) holds the same values as the per-sequence
  results, in the chunk's order, whatever the batching.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import stats_golden as sg
from mixscope.registry import measure_set
from mixscope.stats.accumulate import DEVICE_BUDGET, ShardStatistics
from mixscope.stats.histograms import LayerHistogram
from mixscope.stats.token_block import Vocabulary, chunk_values, token_block
from mixscope.store.schema import STATS


def _golden_tables(
    budget: int = DEVICE_BUDGET, **kw
) -> tuple[dict[str, pa.Table], ShardStatistics]:
    seqs, measures, groups = sg.golden_shard()
    vocab = Vocabulary(sg.GoldenTokenizer())
    columns = measure_set(groups)
    acc = ShardStatistics(vocab, columns, budget=budget)
    for lo, hi in kw.get("chunks", sg.CHUNKS):
        acc.add(token_block(seqs[lo:hi], measures[lo:hi], vocab, columns))
    return acc.tables(), acc


def _assert_same(got: pa.Table, want: pa.Table, name: str) -> None:
    assert got.schema.equals(want.schema, check_metadata=False), name
    assert got.num_rows == want.num_rows, name
    for column in want.column_names:
        a = got[column].to_numpy(zero_copy_only=False)
        b = want[column].to_numpy(zero_copy_only=False)
        is_sum = column.endswith(("_sum", "_sumsq"))
        if is_sum and a.dtype.kind == "f":
            # float64 sums: the same values, the order of the additions aside
            np.testing.assert_allclose(a.astype(float), b.astype(float), rtol=1e-13, atol=0)
        else:
            assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), (name, column)


def test_every_table_equals_the_numpy_code_it_replaced():
    tables, _ = _golden_tables()
    assert set(tables) == set(STATS)
    for name, table in tables.items():
        _assert_same(table, pq.read_table(sg.GOLDEN / f"{name}.parquet"), name)


def test_the_token_moments_and_histograms_are_the_same_bits_on_the_cpu():
    """On the CPU the scatters add in token order, as the numba loops did: every table but
    the sequences' (whose means are summed in another order) is bit for bit the old one."""
    tables, _ = _golden_tables()
    for name in ("token_stats", "layer_stats", "token_hist", "layer_hist", "frequencies"):
        assert tables[name].equals(pq.read_table(sg.GOLDEN / f"{name}.parquet")), name


def test_a_budget_moves_the_accumulators_to_the_host_in_parts_with_the_same_tables():
    whole, acc = _golden_tables()
    assert not acc._parts  # the default budget: one part, on the device
    keys = len(whole["token_stats"]) // sg.LAYERS
    # room for the fixed accumulators, a block's events and a third of the shard's keys
    M, L = len(acc.measures.stored), sg.LAYERS
    fixed = LayerHistogram.nbytes_for(L, M) + 8 * sg.VOCAB + 2 * 8 * 6 * M * L + 8 * 6
    assert acc._tokens is not None
    small = fixed + 16 * 40 * M + keys // 3 * acc._tokens.bytes_per_id(L)
    parted, acc2 = _golden_tables(budget=small, chunks=[(k, k + 1) for k in range(30)])
    assert len(acc2._parts) >= 2
    assert acc2.peak_bytes <= small
    for name, table in whole.items():
        _assert_same(parted[name], table, name)


def test_a_block_that_cannot_fit_the_budget_is_refused():
    with pytest.raises(MemoryError, match="device budget"):
        _golden_tables(budget=1 << 20)  # less than the layer histogram alone


def test_32_layers_every_group_and_a_128k_vocabulary_stay_under_one_gib():
    """A shard of 140k distinct token keys (every id of a 128k vocabulary, some masked),
    32 layers, every group that applies to a decoder (11 stored measures): the device holds
    at most ``DEVICE_BUDGET`` = 1 GiB, the rest moved to the host in parts, and nothing is
    lost (n sums to the tokens, every id counted)."""
    from mixscope.corpus.encode import EncodedSequence

    vocab_size, layers, per_seq = 128_000, 32, 4_000
    groups = ("paper", "globenc", "sink", "ff", "learned_sink")
    columns = measure_set(groups)
    rng = np.random.default_rng(0)
    ids = np.concatenate([rng.permutation(vocab_size), rng.integers(0, vocab_size, 12_000)])
    acc = ShardStatistics(Vocabulary(_Numbered(vocab_size)), columns)
    tokens = 0
    for k, lo in enumerate(range(0, len(ids), per_seq)):
        original = ids[lo : lo + per_seq].astype(np.int64)
        masked = rng.random(len(original)) < 0.1
        seq = EncodedSequence(
            doc_id=k,
            segment=0,
            input_ids=np.where(masked, 4, original),
            token_type_ids=np.zeros(len(original), np.int64),
            special=np.zeros(len(original), bool),
            masked=masked,
            original_ids=original,
        )
        values = torch.rand(len(original), len(columns.columns), layers)
        acc.add(token_block([seq], values, acc.vocab, columns))
        tokens += len(original)
        assert acc.nbytes <= DEVICE_BUDGET
    assert acc.peak_bytes <= DEVICE_BUDGET
    assert len(acc._parts) >= 1  # the bound was reached: parts moved to the host
    state = acc._merged()
    assert int(state["n"].sum()) == tokens
    assert len(state["key"]) == len(torch.unique(state["key"]))
    assert int(state["counts"].sum()) == tokens * len(columns.stored)  # token histogram events


class _Numbered:
    """A tokenizer of ``size`` ids named t<id> (the statistics read strings only at the end)."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        return [f"t{i}" for i in ids]


def test_run_chunk_is_the_per_sequence_results_end_to_end_in_chunk_order(tmp_path):
    """The worker's chunk tensor equals ``run_batches``' per-sequence arrays laid end to end
    in the chunk's (not the batches' longest-first) order, with batches of 1, 3 and all."""
    from mixscope.corpus.encode import EncodedSequence
    from mixscope.mixing.batches import run_batches, run_chunk
    from mixscope.mixing.engine import MixingEngine
    from mixscope.models.loading import load
    from tiny_models import build

    engine = MixingEngine(load(build("llama", torch.float32)), measures="all")
    rng = np.random.default_rng(5)
    seqs = []
    for k, n in enumerate((5, 9, 3, 9, 7, 2)):
        ids = rng.integers(5, 90, n)
        seqs.append(
            EncodedSequence(
                k, 0, ids, np.zeros(n, np.int64), np.zeros(n, bool), np.zeros(n, bool), ids
            )
        )
    per_seq = [m for m, _ in run_batches(engine, seqs, 2)]
    want = chunk_values(per_seq)
    for batch in (1, 3, 16):
        got = run_chunk(engine, seqs, batch)
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


def test_a_float64_model_s_values_are_taken_as_the_float32_the_detail_stores():
    """A float64 model's engine gives float64 measures: the statistics are those of their
    float32 values (the detail's), the same tables as a float32 chunk's."""
    seqs, measures, groups = sg.golden_shard()
    vocab = Vocabulary(sg.GoldenTokenizer())
    columns = measure_set(groups)
    tables = []
    for dtype in (torch.float64, torch.float32):
        acc = ShardStatistics(vocab, columns)
        for lo, hi in sg.CHUNKS:
            values = chunk_values(measures[lo:hi]).to(dtype)
            acc.add(token_block(seqs[lo:hi], values, vocab, columns))
        tables.append(acc.tables())
    for name, table in tables[1].items():
        assert tables[0][name].equals(table), name
