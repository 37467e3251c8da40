"""Per-token detail: which documents keep their rows, and the compact table they go into.

``output.detail``: ``full`` keeps every document, ``none`` none, ``sample`` the documents
with ``in_sample(doc_id, sample_rate)`` — a fixed hash of the document id (splitmix64)
below ``sample_rate · 2^64`` — and, in every shard, the document with the smallest hash
among those with tokens. The rate is thus a floor with a minimum of one document per shard:
a small corpus at the default 1% still has rows to query (187 documents at 1% would
otherwise keep none). Where a shard has any document under the threshold, its smallest-hash
document is one of them, so the extra document only exists in shards the rate left empty.

The rule needs nothing but the ids and the plan's shards: the same documents are kept in
every run, shard, machine and resumed or repeated attempt, a smaller rate keeps a subset of
a larger one's documents (on the same shards), and anyone can recompute it.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mixscope.stats.token_block import TokenBlock, Vocabulary
from mixscope.store.schema import detail_schema

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer of each value (uint64 arithmetic, wrapping)."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return (z ^ (z >> np.uint64(31))) & _M64


def in_sample(doc_ids: np.ndarray, rate: float) -> np.ndarray:
    """Whether each document is in the detail sample of ``rate`` (bool array)."""
    ids = np.asarray(doc_ids, dtype=np.int64)
    if rate >= 1:
        return np.ones(ids.shape, dtype=bool)
    if rate <= 0:
        return np.zeros(ids.shape, dtype=bool)
    threshold = np.uint64(min(int(rate * 2.0**64), 2**64 - 1))
    return splitmix64(ids) < threshold


def doc_hash(doc_ids: np.ndarray) -> np.ndarray:
    """The sample's hash of each document id (what ``in_sample`` compares to the rate)."""
    return splitmix64(np.asarray(doc_ids, dtype=np.int64))


class ShardFloor:
    """The shard's minimum of one sampled document, chosen as its chunks go by.

    The shard's documents arrive a chunk at a time, so the smallest-hash document is not
    known until the end: while no document of the shard has been sampled, the rows of the
    smallest-hash document seen so far are held back (one document's rows at most) and
    ``finish`` gives them to the detail; a sampled document makes them unnecessary (the
    smallest hash is then below the threshold too) and they are dropped.
    """

    def __init__(self) -> None:
        self.sampled = False  # a document of the shard is under the rate's threshold
        self.doc_id: int | None = None  # the held document (smallest hash so far)
        self._hash: int | None = None
        self.parts: list[pa.Table] = []  # its detail rows, chunk by chunk

    def offer(self, doc_ids: np.ndarray, keep: np.ndarray) -> int | None:
        """The document of ``doc_ids`` (one chunk, ``keep`` its sample) whose rows to hold,
        or None; the caller then calls ``hold`` with its rows."""
        if self.sampled or keep.any():
            self.sampled = True
            self.doc_id, self._hash, self.parts = None, None, []
            return None
        if len(doc_ids) == 0:
            return None
        hashes = doc_hash(doc_ids)
        k = int(np.argmin(hashes))
        doc, h = int(doc_ids[k]), int(hashes[k])
        if self._hash is not None and h > self._hash:
            return None
        if doc != self.doc_id:  # a smaller hash than the held one: replace it
            self.doc_id, self._hash, self.parts = doc, h, []
        return doc

    def hold(self, table: pa.Table) -> None:
        self.parts.append(table)


def kept(doc_ids: np.ndarray, mode: str, rate: float) -> np.ndarray:
    """Whether each document (or token, by its document) keeps per-token rows under ``mode``."""
    ids = np.asarray(doc_ids, dtype=np.int64)
    if mode == "full":
        return np.ones(ids.shape, dtype=bool)
    if mode == "none":
        return np.zeros(ids.shape, dtype=bool)
    return in_sample(ids, rate)


def detail_table(
    block: TokenBlock,
    vocab: Vocabulary,
    precision: str = "float32",
    *,
    stored: tuple[str, ...],
) -> pa.Table:
    """One row per token in ``detail_schema(precision, stored)``; measures (the block's
    stored ones, ``stored``) as lists over layers."""
    schema = detail_schema(precision, stored=stored)
    L = block.layers
    uniq, inverse = np.unique(block.token_id, return_inverse=True)
    strings = vocab.arrow(uniq)
    value_type = schema.field(stored[0]).type.value_type
    offsets = pa.array(np.arange(0, (len(block) + 1) * L, L, dtype=np.int32))
    cols = {
        "doc_id": block.doc_id,
        "segment": block.segment,
        "position": block.position,
        "token_id": block.token_id,
        "original_id": block.original_id,
        "token": pa.DictionaryArray.from_arrays(pa.array(inverse.astype(np.int32)), strings),
        "token_type": block.token_type,
        "is_special": block.is_special,
        "is_masked": block.is_masked,
        "category": block.category,
    }
    dtype = np.float16 if precision == "float16" else np.float32
    values = block.values.cpu().numpy()  # [tokens, measures, layers]: the kept rows only
    for k, m in enumerate(stored):
        flat = np.ascontiguousarray(values[:, k, :], dtype=dtype).ravel()  # token-major
        cols[m] = pa.ListArray.from_arrays(offsets, pa.array(flat, value_type))
    arrays = [
        cols[f.name] if isinstance(cols[f.name], pa.Array) else pa.array(cols[f.name], f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)
