"""Per-token detail: which documents keep their rows, and the compact table they go into.

``output.detail``: ``full`` keeps every document, ``none`` none, ``sample`` the documents
with ``in_sample(doc_id, sample_rate)``: a fixed hash of the document id (splitmix64) below
``sample_rate · 2^64``. The same documents are kept in every run, shard and machine, a
smaller rate keeps a subset of a larger one's documents, and the rule needs nothing but
the id, so anyone can recompute it.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mixscope.stats.token_block import TokenBlock, Vocabulary
from mixscope.store.schema import STORED_MEASURES, detail_schema

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
    stored: tuple[str, ...] = STORED_MEASURES,
) -> pa.Table:
    """One row per token in ``detail_schema(precision, stored)``; measures (the block's
    stored ones, ``stored``) as lists over layers."""
    schema = detail_schema(precision, stored)
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
    for k, m in enumerate(stored):
        flat = np.ascontiguousarray(block.values[:, k, :].T, dtype=dtype).ravel()  # token-major
        cols[m] = pa.ListArray.from_arrays(offsets, pa.array(flat, value_type))
    arrays = [
        cols[f.name] if isinstance(cols[f.name], pa.Array) else pa.array(cols[f.name], f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)
