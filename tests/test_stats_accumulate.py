"""The statistics of a shard (stats/accumulate.py, moments.py, histograms.py: torch on the
values' device) against a brute-force float64 computation, value by value, in plain Python.

The shard is added in chunks that share many keys, with the token histogram's merge
threshold made small enough to merge its counted parts several times in between, so the
block-local scatters, the growth of the accumulators and the merge of counted events all
take part.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
import torch

import sql_fixtures as sf
from mixscope.stats import histograms
from mixscope.stats.accumulate import ShardStatistics
from mixscope.stats.histograms import bins, device_bins
from mixscope.stats.singletons import restore
from mixscope.stats.token_block import TokenBlock, Vocabulary, token_block
from mixscope.store.schema import ALL_TOKENS, HIST_BINS, STATS, STORED_MEASURES

LAYERS = 3
CHUNKS = ((0, 5), (5, 6), (6, 19), (19, 33), (33, None))


def _close(got: float, want: float) -> bool:
    return math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-300)


@pytest.fixture(scope="module")
def written():
    """(the blocks as added, the shard's tables as written: singleton NULLs in place)."""
    rng = np.random.default_rng(11)
    seqs = sf.make_sequences(rng, 45, pairs=True, unk_every=4)
    encoded, measures = sf.shard_arrays(seqs, LAYERS, rng)
    for m in measures:  # off the 1/8 grid; a few values >= 1 fall in the last bin
        m += rng.random(m.shape, dtype=np.float32) / 7
        m[:, 2] = m[:, 0] / 2
    vocab = Vocabulary(sf.SyntheticTokenizer())
    blocks = [
        token_block(encoded[lo:hi], measures[lo:hi], vocab, sf.MEASURE_SET) for lo, hi in CHUNKS
    ]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(histograms, "HIST_MERGE", 500)  # merged many times in between
        acc = ShardStatistics(vocab, sf.MEASURE_SET)
        for b in blocks:
            acc.add(b)
        tables = acc.tables()
    return blocks, tables


@pytest.fixture(scope="module")
def shard(written):
    """(the blocks as added, the tables of the shard as every reader sees them: rows)."""
    blocks, tables = written
    kinds = {k: STATS[k].with_measures(sf.MEASURE_SET.stored) for k in tables}
    return blocks, {k: restore(kinds[k], t).to_pylist() for k, t in tables.items()}


def _occurrences(blocks: list[TokenBlock]):
    """Every token of the shard: (keys, sequence, [layer][measure] float64 values)."""
    seq_base = 0
    for b in blocks:
        for t in range(len(b)):
            values = [[float(b.values[t, k, layer]) for k in range(4)] for layer in range(LAYERS)]
            yield (
                {
                    "token_id": int(b.token_id[t]),
                    "original_id": int(b.original_id[t]),
                    "token_type": int(b.token_type[t]),
                    "category": int(b.category[t]),
                },
                seq_base + int(b.sequence[t]),
                values,
            )
        seq_base += int(b.sequence.max()) + 1


def test_token_and_layer_moments_equal_brute_force(shard):
    blocks, tables = shard
    token: dict[tuple, list[float]] = defaultdict(list)
    layer: dict[tuple, list[float]] = defaultdict(list)
    for keys, _, values in _occurrences(blocks):
        k = (keys["token_id"], keys["original_id"], keys["token_type"], keys["category"])
        for li, row in enumerate(values):
            for mi, v in enumerate(row):
                token[(li + 1, *k, mi)].append(v)
                layer[(li + 1, keys["category"], keys["token_type"], mi)].append(v)
    for name, want, key_cols in (
        ("token_stats", token, ("layer", "token_id", "original_id", "token_type", "category")),
        ("layer_stats", layer, ("layer", "category", "token_type")),
    ):
        rows = tables[name]
        assert len(rows) * 4 == len(want), name
        for r in rows:
            for mi, m in enumerate(STORED_MEASURES):
                v = want[(*(r[c] for c in key_cols), mi)]
                assert r["n"] == len(v)
                assert _close(r[f"{m}_sum"], math.fsum(v)), (name, r, m)
                assert _close(r[f"{m}_sumsq"], math.fsum(x * x for x in v)), (name, r, m)
                assert r[f"{m}_min"] == min(v) and r[f"{m}_max"] == max(v), (name, r, m)


def test_singleton_rows_are_null_where_n_is_1_and_restore_exactly(written, shard):
    """A shard's token_stats leaves Σ², min and max NULL exactly on its n = 1 rows (schema
    4), and the restored values are the dense ones bit for bit (checked above against the
    brute force; here against Σ itself)."""
    _, tables = shard
    table = written[1]["token_stats"]
    n = table["n"].to_numpy()
    assert 0 < (n == 1).sum() < len(n)  # both kinds of row are present
    for m in STORED_MEASURES:
        assert table[f"{m}_sum"].null_count == 0
        for stat in ("sumsq", "min", "max"):
            col = table[f"{m}_{stat}"]
            assert col.is_null().to_numpy(zero_copy_only=False).tolist() == (n == 1).tolist()
    for r in tables["token_stats"]:
        if r["n"] == 1:
            for m in STORED_MEASURES:
                s = r[f"{m}_sum"]
                assert r[f"{m}_sumsq"] == s * s
                assert r[f"{m}_min"] == r[f"{m}_max"] == float(np.float32(s))


def test_sequence_moments_equal_brute_force(shard):
    blocks, tables = shard
    per: dict[tuple, list[list[float]]] = defaultdict(list)  # (seq, cat) → token values
    for keys, seq, values in _occurrences(blocks):
        per[(seq, keys["category"])].append(values)
        per[(seq, ALL_TOKENS)].append(values)
    rows = tables["sequence_stats"]
    assert {r["category"] for r in rows} == {c for _, c in per}
    for r in rows:
        groups = [v for (_, c), v in per.items() if c == r["category"]]
        assert r["sequences"] == len(groups)
        for mi, m in enumerate(STORED_MEASURES):
            means = [math.fsum(t[r["layer"] - 1][mi] for t in g) / len(g) for g in groups]
            assert _close(r[f"{m}_seq_sum"], math.fsum(means)), (r, m)
            assert _close(r[f"{m}_seq_sumsq"], math.fsum(x * x for x in means)), (r, m)


def _bin(v: float) -> int:
    return min(max(math.floor(v * HIST_BINS), 0), HIST_BINS - 1)


def test_histograms_and_frequencies_equal_brute_force(shard):
    blocks, tables = shard
    token_hist: dict[tuple, int] = defaultdict(int)
    layer_hist: dict[tuple, int] = defaultdict(int)
    freq: dict[int, int] = defaultdict(int)
    for keys, _, values in _occurrences(blocks):
        cat = keys["category"]
        freq[keys["original_id"]] += 1
        for mi in range(4):
            # the layer average as the accumulator takes it: a float64 sum over layers
            avg = sum(row[mi] for row in values) / LAYERS
            token_hist[(keys["token_id"], keys["original_id"], cat, mi, _bin(avg))] += 1
            for li, row in enumerate(values):
                layer_hist[(li + 1, cat, mi, _bin(row[mi]))] += 1
    got = tables["token_hist"]
    keys = [(r["token_id"], r["original_id"], r["category"], r["measure"], r["bin"]) for r in got]
    assert keys == sorted(keys)  # rows in key order
    assert dict(zip(keys, (r["count"] for r in got), strict=True)) == token_hist
    got_layer = {
        (r["layer"], r["category"], r["measure"], r["bin"]): r["count"]
        for r in tables["layer_hist"]
    }
    assert got_layer == layer_hist
    assert {r["token_id"]: r["count"] for r in tables["frequencies"]} == freq
    assert set(tables) == set(STATS)


def test_device_bins_equal_bins_on_every_kind_of_value():
    """The accumulators' bins (torch) are the tables' grid (numpy) for every kind of value:
    in [0, 1), 1 and above (last bin), negatives, NaN and -inf (bin 0), +inf (last bin)."""
    edge = [0.0, -0.0, 1e-30, 0.5, 1 - 2**-24, 1.0, 1.5, 4095.9, 2.0**19 - 1, 2.0**19, 1e30]
    edge += [-1e-30, -0.5, -7.0, float("nan"), float("inf"), float("-inf")]
    rng = np.random.default_rng(3)
    for values in (
        rng.random((2, 4, 500), dtype=np.float32),
        (rng.random((2, 4, 500)) * 3).astype(np.float32),  # >= 1 too
        np.array(edge, dtype=np.float32),
        np.array(edge, dtype=np.float64),
        np.zeros(0, np.float32),
    ):
        got = device_bins(torch.from_numpy(values)).numpy()
        np.testing.assert_array_equal(got, bins(values))
        if values.ndim == 1 and len(values):  # the edge values, by hand
            want = [0, 0, 0, 2048, 4095, 4095, 4095, 4095, 4095, 4095, 4095]
            assert got.tolist() == [*want, 0, 0, 0, 0, 4095, 0]


def test_detail_parts_are_gathered_into_row_groups(shard, monkeypatch):
    """The detail file's parts (one per chunk) are encoded as row groups of at least
    ``ROW_GROUP_MIN`` rows (the last may be smaller), and the file holds every row of every
    part in order, each part's own token dictionary decoded alike."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from mixscope.stats.detail import detail_table
    from mixscope.store import writer

    blocks, _ = shard
    vocab = Vocabulary(sf.SyntheticTokenizer())
    parts = [detail_table(b, vocab, stored=sf.MEASURE_SET.stored) for b in blocks]
    sizes = [p.num_rows for p in parts]
    monkeypatch.setattr(writer, "ROW_GROUP_MIN", sizes[0] + sizes[1])  # two parts per group
    buf = writer.ParquetBuffer(parts[0].schema)
    for p in parts:
        buf.add(p)
    file = pq.ParquetFile(io.BytesIO(buf.getvalue().to_pybytes()))
    groups = [file.metadata.row_group(i).num_rows for i in range(file.num_row_groups)]
    assert sum(groups) == sum(sizes) == buf.rows and len(groups) < len(parts)
    assert all(g >= sizes[0] + sizes[1] for g in groups[:-1])
    assert file.read().to_pylist() == pa.concat_tables(parts).to_pylist()


def test_token_histogram_merges_cost_linear_in_the_events(monkeypatch):
    """A count merges everything counted before, so it waits for at least as many new
    events: over a long shard whose distinct events pass the threshold, the events the
    merges read add up to a few times the events added (merging on every block once the
    counted part passed the threshold read 200x here, 391 merges), and the counts are those of one
    count of every event."""
    from mixscope.stats.histograms import TokenHistogram

    monkeypatch.setattr(histograms, "HIST_MERGE", 1_000)
    read = []
    real = histograms.merged_counts

    def spy(parts):
        read.append(sum(len(e) for e, _ in parts))
        return real(parts)

    monkeypatch.setattr(histograms, "merged_counts", spy)
    rng = np.random.default_rng(5)
    hist, blocks = TokenHistogram((0, 1)), []
    for _ in range(400):  # 400 blocks × 50 tokens × 2 measures: most events distinct
        ids = torch.from_numpy(rng.integers(0, 5_000, 50))
        v64 = torch.from_numpy(rng.random((50, 2, 3)))
        hist.add(ids, v64)
        blocks.append((ids, v64))
    events, counts = hist.counted()
    total = 400 * 50 * 2
    assert len(read) > 3 and sum(read[:-1]) <= 3 * total  # the merges during the shard
    monkeypatch.setattr(histograms, "HIST_MERGE", 1 << 62)  # no merge until the end
    everything = TokenHistogram((0, 1))
    for ids, v64 in blocks:
        everything.add(ids, v64)
    want_events, want_counts = everything.counted()
    assert torch.equal(events, want_events) and torch.equal(counts, want_counts)
    assert int(counts.sum()) == total
