"""The in-process entry points: ``analyze`` (per-token measures) and ``contribution_maps``.

Used by notebooks, tests, the CLI and (later) the shard worker; everything else builds on it.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from mixscope.corpus.encode import (
    EncodedSequence,
    encode_documents,
    pad_batch,
    pad_offsets,
    validate_documents,
)
from mixscope.errors import MixscopeError
from mixscope.mixing.engine import MixingEngine
from mixscope.mixing.pairs import PAIR_MEASURES
from mixscope.models.loading import LoadedModel, load
from mixscope.store.schema import MEASURE_COLUMNS, TOKENS_SCHEMA

log = logging.getLogger("mixscope")


@dataclass
class ContributionMap:
    """Per-pair contribution norms ‖P_ij‖ of one sequence; row i receives, column j gives."""

    doc_id: int
    segment: int
    token_ids: list[int]
    tokens: list[str]
    maps: dict[str, np.ndarray] = field(default_factory=dict)  # measure → [layer, seq, seq]

    @property
    def attn_n(self) -> np.ndarray:
        return self.maps["attn_n"]

    @property
    def attnres_n(self) -> np.ndarray:
        return self.maps["attnres_n"]

    @property
    def attnresln_n(self) -> np.ndarray:
        return self.maps["attnresln_n"]


def _prepare(
    model: Any,
    texts: Any,
    *,
    max_length: int | None,
    batch_size: int,
    device: Any,
    dtype: Any,
    revision: str | None,
    mask_rate: float,
    seed: int,
) -> tuple[LoadedModel, list[EncodedSequence]]:
    docs = validate_documents(texts)
    if batch_size < 1:
        raise MixscopeError(f"batch_size must be at least 1, got {batch_size}")
    loaded = load(model, revision=revision, dtype=dtype, device=device)
    max_length = loaded.resolve_max_length(max_length)
    seqs = encode_documents(
        loaded.tokenizer, docs, max_length=max_length, mask_rate=mask_rate, seed=seed
    )
    return loaded, seqs


def _fit_batch(size: int, width: int, token_limit: int | None) -> int:
    """Halve ``size`` until ``size · width`` is below a token count that ran out of memory."""
    while token_limit is not None and size > 1 and size * width >= token_limit:
        size //= 2
    return size


def _release_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _run_batches(
    engine: MixingEngine,
    seqs: list[EncodedSequence],
    batch_size: int,
    *,
    pairs: bool,
    padding_side: str | None = None,
) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """Engine outputs per sequence, in ``seqs`` order: ([layer, measure, seq], pairs).

    Sequences run longest first in batches of at most ``batch_size``, padded on
    ``padding_side`` (default: the tokenizer's). On an accelerator out-of-memory error the
    batch is halved and retried; the token count (batch · width) that failed is remembered
    on the engine (``engine.oom_token_limit``), so later and shorter batches stay under it
    and grow back to ``batch_size`` when short enough. A single sequence that does not fit
    raises a :class:`MixscopeError`.
    """
    pad_id = engine.loaded.pad_token_id
    side = padding_side or engine.loaded.padding_side
    pad_offsets([1], side)  # validates the side before any work
    results: list[Any] = [None] * len(seqs)
    order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))  # longest first
    start = 0
    while start < len(order):
        width = len(seqs[order[start]])
        size = _fit_batch(batch_size, width, engine.oom_token_limit)
        batch = order[start : start + size]
        members = [seqs[i] for i in batch]
        ids, mask, types = pad_batch(members, pad_id, padding_side=side)
        try:
            out = engine.run(
                torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(types), pairs=pairs
            )
        except torch.cuda.OutOfMemoryError as exc:
            if len(batch) == 1:
                raise MixscopeError(
                    f"out of device memory on a single sequence of {width} tokens; use a smaller "
                    "max_length, a lower-precision dtype (bfloat16) or a larger device"
                ) from exc
            tokens = len(batch) * width
            engine.oom_token_limit = min(tokens, engine.oom_token_limit or tokens)
            log.warning(
                "out of device memory at batch %d × %d tokens; retrying with batch %d",
                len(batch),
                width,
                max(1, len(batch) // 2),
            )
            out = None
        if out is None:  # outside the except block, so the failed tensors can be freed
            _release_memory()
            continue
        measures = out.measures.numpy()  # [batch, layer, measure, seq]
        offsets = pad_offsets([len(s) for s in members], side)
        for b, (i, off) in enumerate(zip(batch, offsets, strict=True)):
            span = slice(off, off + len(seqs[i]))
            pair = out.pairs[b, :, :, span, span].numpy() if out.pairs is not None else None
            results[i] = (measures[b, :, :, span], pair)
        start += len(batch)
    return results


def to_table(
    seqs: Sequence[EncodedSequence],
    measures: Sequence[np.ndarray],
    tokenizer: Any,
) -> pa.Table:
    """Long-format rows (document, segment, position, layer) in ``TOKENS_SCHEMA``.

    ``measures[k]`` is the [layer, measure, seq] array of ``seqs[k]``.
    """
    layers = measures[0].shape[0]
    lengths = np.array([len(s) for s in seqs])
    rep = lambda a: np.repeat(a, layers)  # noqa: E731  per token → per token-layer row
    token_ids = np.concatenate([s.input_ids for s in seqs])
    uniq, inverse = np.unique(token_ids, return_inverse=True)
    vocab = pa.array(tokenizer.convert_ids_to_tokens(uniq.tolist()), pa.string())
    cols: dict[str, Any] = {
        "doc_id": rep(np.repeat([s.doc_id for s in seqs], lengths)),
        "segment": rep(np.repeat([s.segment for s in seqs], lengths)).astype(np.int32),
        "position": rep(np.concatenate([np.arange(n) for n in lengths])).astype(np.int32),
        "token_id": rep(token_ids).astype(np.int32),
        "token": pa.DictionaryArray.from_arrays(pa.array(rep(inverse).astype(np.int32)), vocab),
        "token_type": rep(np.concatenate([s.token_type_ids for s in seqs])).astype(np.int8),
        "is_special": rep(np.concatenate([s.special for s in seqs])),
        "is_masked": rep(np.concatenate([s.masked for s in seqs])),
        "layer": np.tile(np.arange(1, layers + 1, dtype=np.int16), int(lengths.sum())),
    }
    # [layer, measure, seq] → [seq, layer, measure] so rows run position-major, layer-minor
    stacked = np.concatenate([m.transpose(2, 0, 1) for m in measures]).reshape(
        -1, len(MEASURE_COLUMNS)
    )
    for k, name in enumerate(MEASURE_COLUMNS):
        cols[name] = np.ascontiguousarray(stacked[:, k], dtype=np.float32)
    return pa.Table.from_pydict(cols, schema=TOKENS_SCHEMA)


def analyze(
    model: Any,
    texts: Any,
    *,
    max_length: int | None = None,
    batch_size: int = 8,
    device: Any = None,
    dtype: Any = None,
    revision: str | None = None,
    mask_rate: float = 0.0,
    seed: int = 0,
    verify: bool = False,
    padding_side: str | None = None,
) -> pa.Table:
    """Context-mixing measures of every token and layer of ``texts``.

    ``model``: a local directory, a hub id, or a ``(model, tokenizer)`` pair of loaded
    transformers objects (any attention implementation; eager is used for the run).
    ``texts``: strings or ``(text, text_pair)`` tuples. Returns one row per
    (doc_id, segment, position, layer) in :data:`mixscope.store.schema.TOKENS_SCHEMA`;
    padding never appears. ``verify`` checks the exactness identity on every block of
    every batch and raises :class:`~mixscope.errors.ExactnessError` if it fails.
    ``padding_side`` ("left" or "right"; default: the tokenizer's) changes nothing in the
    numbers, only how batches are laid out. On CUDA out-of-memory the batch is halved and
    retried (see :func:`_run_batches`).
    """
    loaded, seqs = _prepare(
        model,
        texts,
        max_length=max_length,
        batch_size=batch_size,
        device=device,
        dtype=dtype,
        revision=revision,
        mask_rate=mask_rate,
        seed=seed,
    )
    engine = MixingEngine(loaded, verify=verify)
    results = _run_batches(engine, seqs, batch_size, pairs=False, padding_side=padding_side)
    return to_table(seqs, [m for m, _ in results], loaded.tokenizer)


def contribution_maps(
    model: Any,
    texts: Any,
    *,
    max_length: int | None = None,
    batch_size: int = 1,
    device: Any = None,
    dtype: Any = None,
    revision: str | None = None,
    mask_rate: float = 0.0,
    seed: int = 0,
    padding_side: str | None = None,
) -> list[ContributionMap]:
    """Per-pair norms ‖P_ij‖ of ATTN-N, ATTNRES-N and ATTNRESLN-N for a handful of texts.

    Memory is O(layers · seq²) per sequence for the maps themselves, computed in Gram form
    (no [batch, heads, seq, seq, hidden] tensor). One map per sequence (segment). In a
    causal model the entries above the diagonal (j > i) are exactly 0.
    """
    loaded, seqs = _prepare(
        model,
        texts,
        max_length=max_length,
        batch_size=batch_size,
        device=device,
        dtype=dtype,
        revision=revision,
        mask_rate=mask_rate,
        seed=seed,
    )
    engine = MixingEngine(loaded)
    results = _run_batches(engine, seqs, batch_size, pairs=True, padding_side=padding_side)
    maps = []
    for s, (_, pair) in zip(seqs, results, strict=True):
        assert pair is not None
        ids = s.input_ids.tolist()
        maps.append(
            ContributionMap(
                doc_id=s.doc_id,
                segment=s.segment,
                token_ids=ids,
                tokens=loaded.tokenizer.convert_ids_to_tokens(ids),
                maps={name: pair[:, k] for k, name in enumerate(PAIR_MEASURES)},
            )
        )
    return maps
