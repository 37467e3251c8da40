"""Frozen statistics of fixed inputs: what the statistics path gave before it moved to torch.

Issue 39 replaced the numpy/numba accumulation by torch operations on the engine's device.
The new code must give the same tables with the same values, so the old code's output on
fixed inputs is kept here as Parquet (``tests/data/stats_golden/``), written by running
this module with the code of the commit before the rewrite (``python tests/stats_golden.py``
on 0844ca9). The inputs are made from fixed seeds by :func:`golden_shard`: every measure
group, several chunks, special, masked and pair tokens, keys seen once and many times,
values on histogram bin edges, 0 and 1.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "data" / "stats_golden"
#: every group of the registry (their stored columns: what the statistics see)
GROUPS = ("paper", "globenc", "sink", "ff", "learned_sink")
LAYERS = 3
#: chunk boundaries (sequence indices) of the golden shard
CHUNKS = ((0, 7), (7, 8), (8, 30))
VOCAB = 400
CLS, SEP, MASK, UNK = 101, 102, 103, 100


#: the special tokens' strings, at BERT's ids
STRINGS = {CLS: "[CLS]", SEP: "[SEP]", MASK: "[MASK]", UNK: "[UNK]"}


class GoldenTokenizer:
    """Token strings by id: [CLS], [SEP], [MASK], [UNK] at BERT's ids, w<id> elsewhere."""

    def __len__(self) -> int:
        return VOCAB

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        return [STRINGS.get(int(i), f"w{int(i)}") for i in ids]


def golden_shard() -> tuple[list, list[np.ndarray], tuple[str, ...]]:
    """(EncodedSequences, their [layer, column, seq] float32 measures, the groups)."""
    from mixscope.corpus.encode import EncodedSequence
    from mixscope.registry import measure_set

    rng = np.random.default_rng(39)
    columns = measure_set(GROUPS).columns
    seqs, measures = [], []
    for k in range(30):
        n = int(rng.integers(3, 40))
        words = rng.integers(104, VOCAB, n)
        words[rng.random(n) < 0.5] = rng.integers(104, 120)  # frequent keys: n > 1
        original = words.copy()
        special = np.zeros(n, bool)
        original[0], special[0] = CLS, True
        original[-1], special[-1] = SEP, True
        if k % 5 == 0 and n > 4:
            original[2], special[2] = UNK, True  # another special: other_special
        ids = original.copy()
        masked = (rng.random(n) < 0.15) & ~special
        ids[masked] = MASK
        types = np.zeros(n, np.int64)
        if k % 4 == 1:
            types[n // 2 :] = 1  # a pair's second text
        seqs.append(
            EncodedSequence(
                doc_id=1000 + k // 2,
                segment=k % 2,
                input_ids=ids.astype(np.int64),
                token_type_ids=types,
                special=special,
                masked=masked,
                original_ids=original.astype(np.int64),
            )
        )
        m = rng.random((LAYERS, len(columns), n), dtype=np.float32)
        edges = rng.random(m.shape) < 0.1  # exactly on a bin edge (and 0 and 1)
        m[edges] = rng.integers(0, 4097, int(edges.sum())).astype(np.float32) / 4096
        m[:, columns.index("attnres_w")] = m[:, columns.index("attn_w")] / 2
        measures.append(m)
    return seqs, measures, GROUPS


def main() -> None:
    """Write the golden tables with the code on ``sys.path``."""
    import pyarrow.parquet as pq

    from mixscope.registry import measure_set
    from mixscope.stats.accumulate import ShardStatistics
    from mixscope.stats.token_block import Vocabulary, token_block

    seqs, measures, groups = golden_shard()
    vocab = Vocabulary(GoldenTokenizer())
    columns = measure_set(groups)
    acc = ShardStatistics(vocab, columns)
    for lo, hi in CHUNKS:
        acc.add(token_block(seqs[lo:hi], measures[lo:hi], vocab, columns))
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name, table in acc.tables().items():
        pq.write_table(table, GOLDEN / f"{name}.parquet")
        print(name, table.num_rows, file=sys.stderr)


if __name__ == "__main__":
    main()
