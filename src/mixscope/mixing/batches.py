"""Sequences through the engine in batches sized by tokens, longest first, with OOM back-off.

The one batch runner of the package: ``analyze()`` and ``contribution_maps()`` take its
results per sequence on the host (:func:`run_batches`), the shard worker as one tensor per
chunk left on the engine's device for the statistics (:func:`run_chunk`).
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from mixscope.corpus.encode import EncodedSequence, pad_batch, pad_offsets
from mixscope.errors import MixscopeError
from mixscope.mixing.engine import EngineOutput, MixingEngine

log = logging.getLogger("mixscope")

#: default token budget of one batch (padding included); long sequences run fewer at a time
BATCH_TOKENS = 16384


def batch_size_for(
    width: int, batch_size: int, batch_tokens: int | None, oom_limit: int | None
) -> int:
    """Sequences of ``width`` tokens per batch: at most ``batch_size``, at most
    ``batch_tokens`` tokens, and halved below a token count that ran out of memory."""
    size = batch_size if batch_tokens is None else min(batch_size, max(1, batch_tokens // width))
    while oom_limit is not None and size > 1 and size * width >= oom_limit:
        size //= 2
    return size


def _release_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _batches(
    engine: MixingEngine,
    seqs: list[EncodedSequence],
    batch_size: int,
    batch_tokens: int | None,
    pairs: bool,
    padding_side: str | None,
) -> Iterator[tuple[list[int], list[int], EngineOutput]]:
    """(members of ``seqs``, each one's padding offset, the engine's output) per batch."""
    pad_id = engine.loaded.pad_token_id
    side = padding_side or engine.loaded.padding_side
    pad_offsets([1], side)  # validates the side before any work
    order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))  # longest first
    start = 0
    while start < len(order):
        width = len(seqs[order[start]])
        size = batch_size_for(width, batch_size, batch_tokens, engine.oom_token_limit)
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
        yield batch, pad_offsets([len(s) for s in members], side), out
        start += len(batch)


def run_batches(
    engine: MixingEngine,
    seqs: list[EncodedSequence],
    batch_size: int,
    *,
    batch_tokens: int | None = BATCH_TOKENS,
    pairs: bool = False,
    padding_side: str | None = None,
) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """Engine outputs per sequence, in ``seqs`` order, on the host: ([layer, measure, seq],
    pairs).

    Sequences run longest first in batches of at most ``batch_size`` sequences and
    ``batch_tokens`` tokens (None: no token budget), padded on ``padding_side`` (default:
    the tokenizer's). On an accelerator out-of-memory error the batch is halved and
    retried; the token count (batch · width) that failed is remembered on the engine
    (``engine.oom_token_limit``), so later and shorter batches stay under it and grow back
    when short enough. A single sequence that does not fit raises a :class:`MixscopeError`.
    """
    results: list[Any] = [None] * len(seqs)
    for batch, offsets, out in _batches(
        engine, seqs, batch_size, batch_tokens, pairs, padding_side
    ):
        measures = out.measures.cpu().numpy()  # [batch, layer, measure, seq]
        maps = out.pairs.cpu() if out.pairs is not None else None
        for b, (i, off) in enumerate(zip(batch, offsets, strict=True)):
            span = slice(off, off + len(seqs[i]))
            pair = maps[b, :, :, span, span].numpy() if maps is not None else None
            results[i] = (measures[b, :, :, span], pair)
    return results


def run_chunk(
    engine: MixingEngine,
    seqs: list[EncodedSequence],
    batch_size: int,
    *,
    batch_tokens: int | None = BATCH_TOKENS,
) -> torch.Tensor:
    """The chunk's measures on the engine's device: ``[tokens, measure, layer]`` float32,
    the sequences end to end in ``seqs`` order (batched as :func:`run_batches`). What the
    shard's statistics read where they are computed: nothing crosses to the host here."""
    lengths = np.array([len(s) for s in seqs], dtype=np.int64)
    starts = np.cumsum(lengths) - lengths  # [seqs] each one's first token in the chunk
    out: torch.Tensor | None = None
    for batch, offsets, result in _batches(engine, seqs, batch_size, batch_tokens, False, None):
        m = result.measures  # [batch, layer, measure, seq]
        B, L, M, S = m.shape
        if out is None:
            out = torch.empty(int(lengths.sum()), M, L, dtype=m.dtype, device=m.device)
        n = lengths[batch]  # [batch] tokens of each member
        within = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)  # [tokens] 0..n-1
        rows = np.repeat(np.arange(len(batch)) * S + np.asarray(offsets), n) + within
        into = np.repeat(starts[batch], n) + within  # [tokens] their place in the chunk
        flat = m.permute(0, 3, 2, 1).reshape(B * S, M, L)  # [batch · seq, measure, layer]
        picked = torch.from_numpy(rows).to(m.device)
        out.index_copy_(0, torch.from_numpy(into).to(m.device), flat.index_select(0, picked))
    if out is None:
        return torch.zeros(0, len(engine.measure_set.columns), engine.num_layers)
    return out
