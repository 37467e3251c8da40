"""Attention kernels that return each query row's log-sum-exp with the output.

The fast attention implementation (fast_attention.py) needs, per head, the attention output
and ``LSE_i = log Σ_j exp(s_ij + m_ij)`` of every query row; the fused kernels compute it
anyway. By device: CPU ``_scaled_dot_product_flash_attention_for_cpu`` (masks, every float
dtype); CUDA ``_scaled_dot_product_flash_attention`` (no mask, half precision) or
``_scaled_dot_product_efficient_attention`` (additive masks). Anywhere else, or where a
kernel refuses its input, SDPA gives the output and a log-sum-exp over query chunks gives
LSE (O(chunk · seq) memory per head, one extra q·k product). Soft-capped scores (Gemma-2):
compiled flex attention on CUDA (flex_capped.py), an exact chunked attention elsewhere.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from mixscope.errors import first_line

log = logging.getLogger("mixscope")

#: query rows per chunk of the fallback log-sum-exp, as a budget of score elements
CHUNK_SCORES = 1 << 24

_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning(message)


@dataclass
class ForwardState:
    """What one engine forward shares between its layers' attention calls: the first real
    position of each sequence (left padding moves it; None: α_i0 is not computed) and the
    last boolean mask converted (every layer gets the same mask object, so it is converted
    once per forward, not once per layer). Held in a context variable for the forward's
    duration (:func:`forward_state`), never in module globals: two engines in one process,
    in two threads, each see their own."""

    first_position: torch.Tensor | None = None  # [batch] long
    #: keep what the kernel saw (q, k, mask, LSE) for a group that reads every pair's weight
    scores: bool = False
    converted: list[Any] = field(default_factory=lambda: [None, None, None])  # ref, dtype, mask


_STATE: contextvars.ContextVar[ForwardState | None] = contextvars.ContextVar(
    "mixscope_forward", default=None
)


@contextlib.contextmanager
def forward_state(
    first_position: torch.Tensor | None = None, scores: bool = False
) -> Iterator[ForwardState]:
    """A fresh :class:`ForwardState` for the forward inside (the engine's); dropped after."""
    token = _STATE.set(ForwardState(first_position, scores))
    try:
        yield _STATE.get()  # type: ignore[misc]
    finally:
        _STATE.reset(token)


def current_state() -> ForwardState | None:
    """The state of the forward running in this context; None outside an engine forward."""
    return _STATE.get()


def additive_mask(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """A boolean keep-mask (True = attend) as an additive one (0 / −inf) in ``dtype``;
    converted once per forward inside an engine forward (:class:`ForwardState`)."""
    if mask is None or mask.dtype != torch.bool:
        return None if mask is None else mask.to(dtype)
    state = _STATE.get()
    if state is not None:
        ref, cached_dtype, cached = state.converted
        if ref is not None and ref() is mask and cached_dtype == dtype:
            return cached
    out = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(
        ~mask, float("-inf")
    )
    if state is not None:
        state.converted[:] = [weakref.ref(mask), dtype, out]
    return out


def chunked_logsumexp(
    query: torch.Tensor,  # [batch, heads, seq, head_dim]
    key: torch.Tensor,  # [batch, heads, seq, head_dim]
    mask: torch.Tensor | None,  # [batch | 1, 1 | heads, seq, seq] additive, or None
    scale: float,
    is_causal: bool,
) -> torch.Tensor:
    """LSE_i over keys, in float32 (float64 for float64 inputs), query chunk by chunk: [b, h, q].

    Fully masked rows come out 0, as the CPU kernel gives them (their α is 0 either way).
    """
    return _chunked(query, key, mask, scale, is_causal)[1]


def _chunked(
    query: torch.Tensor,  # [batch, heads, seq, head_dim]
    key: torch.Tensor,  # [batch, heads, seq, head_dim]
    mask: torch.Tensor | None,  # [batch | 1, 1 | heads, seq, seq] additive, or None
    scale: float,
    is_causal: bool,
    value: torch.Tensor | None = None,  # [batch, heads, seq, head_dim]: the output too
    softcap: float | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor]:
    """(the attention output where ``value`` is given, LSE): the exact attention query
    chunk by chunk, O(chunk · seq) memory per head; ``softcap`` c caps the scores as
    Gemma-2 does, ``c · tanh(s / c)``, before the mask."""
    batch, heads, seq, _ = query.shape
    work = torch.float64 if query.dtype == torch.float64 else torch.float32
    chunk = max(1, CHUNK_SCORES // max(1, batch * heads * key.shape[2]))
    out = torch.empty(batch, heads, seq, dtype=work, device=query.device)
    attended = None if value is None else torch.empty_like(query)
    keys = key.to(work).transpose(-1, -2)  # [batch, heads, head_dim, k]
    for start in range(0, seq, chunk):
        stop = min(seq, start + chunk)
        scores = query[:, :, start:stop].to(work) @ keys * scale  # [batch, heads, chunk, k]
        if softcap is not None:
            scores = torch.tanh(scores / softcap) * softcap
        if mask is not None:
            scores = scores + mask[..., start:stop, :].to(work)
        if is_causal:
            rows = torch.arange(start, stop, device=query.device)[:, None]
            cols = torch.arange(key.shape[2], device=query.device)[None, :]
            scores = scores.masked_fill(cols > rows, float("-inf"))
        lse = torch.logsumexp(scores, dim=-1)  # [batch, heads, chunk]
        finite = torch.where(torch.isfinite(lse), lse, 0.0)
        out[:, :, start:stop] = finite
        if value is not None and attended is not None:
            weights = torch.exp(scores - finite.unsqueeze(-1))  # 0 where masked
            attended[:, :, start:stop] = (weights @ value.to(work)).to(query.dtype)
    return attended, out


def capped_attention_with_lse(
    query: torch.Tensor,  # [batch, heads, seq, head_dim]
    key: torch.Tensor,  # [batch, kv_heads, seq, head_dim]
    value: torch.Tensor,  # [batch, kv_heads, seq, head_dim]
    mask: torch.Tensor | None,  # bool keep-mask or additive, broadcastable to [b, h, q, k]
    scale: float,
    is_causal: bool,
    softcap: float,
    *,
    kernel: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Soft-capped attention (Gemma-2's ``attn_logit_softcapping``) with the log-sum-exp
    of the *capped* scores: on CUDA compiled flex attention with a tanh score modification
    (flex_capped.py); elsewhere, or where flex attention fails, the exact chunked path
    (O(chunk · seq) memory per head). ``kernel`` forces "flex" (uncompiled off CUDA) or
    "chunked" (tests)."""
    name = kernel or ("flex" if query.device.type == "cuda" else "chunked")
    if name == "flex":
        from mixscope.mixing.flex_capped import flex_capped_attention

        try:
            return flex_capped_attention(
                query, key, value, mask, scale, is_causal, softcap,
                compiled=query.device.type == "cuda",
            )  # fmt: skip
        except Exception as exc:  # compilation errors come in many types
            if kernel is not None:
                raise
            first = first_line(exc) or type(exc).__name__
            _warn_once("flex", f"fast attention: flex attention unavailable ({first}); chunked")
    k, v = _repeat_heads(query, key), _repeat_heads(query, value)
    out, lse = _chunked(query, k, additive_mask(mask, query.dtype), scale, is_causal, v, softcap)
    assert out is not None
    return out, lse


def _repeat_heads(q: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Key/value heads repeated to the query heads (kv head g serves heads g·r … g·r + r − 1)."""
    return t if t.shape[1] == q.shape[1] else t.repeat_interleave(q.shape[1] // t.shape[1], 1)


def _cpu_kernel(q, k, v, mask, scale, is_causal):
    # the CPU flash kernel takes grouped key/value heads as they are (no repeated copy)
    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    return op(q, k, v, 0.0, is_causal, attn_mask=additive_mask(mask, q.dtype), scale=scale)


def _aligned_bias(mask: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """An additive bias [batch, heads, q, k] whose rows start 16-element aligned (what the
    memory-efficient kernel requires; SDPA's own mask preprocessing does the same)."""
    bias = additive_mask(mask, q.dtype)
    assert bias is not None
    keys = bias.shape[-1]
    if keys % 16:
        bias = F.pad(bias, (0, 16 - keys % 16))[..., :keys]
    return bias.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])


def _cuda_kernel(q, k, v, mask, scale, is_causal):
    seq = q.shape[2]
    k, v = _repeat_heads(q, k), _repeat_heads(q, v)
    if mask is None and q.dtype in (torch.float16, torch.bfloat16):
        try:
            out = torch.ops.aten._scaled_dot_product_flash_attention(
                q, k, v, 0.0, is_causal, False, scale=scale
            )
            return out[0], out[1][..., :seq]
        except RuntimeError:  # head size or device the flash kernel does not take
            pass
    bias = None if mask is None else _aligned_bias(mask, q, k)
    out = torch.ops.aten._scaled_dot_product_efficient_attention(
        q, k, v, bias, True, 0.0, is_causal, scale=scale
    )
    return out[0], out[1][..., :seq]


def _fallback(q, k, v, mask, scale, is_causal):
    k, v = _repeat_heads(q, k), _repeat_heads(q, v)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, is_causal=is_causal)
    lse = chunked_logsumexp(q, k, additive_mask(mask, q.dtype), scale, is_causal)
    return out, lse


KERNELS: dict[str, Callable[..., tuple[torch.Tensor, torch.Tensor]]] = {
    "cpu": _cpu_kernel,
    "cuda": _cuda_kernel,
}


def attention_with_lse(
    query: torch.Tensor,  # [batch, heads, seq, head_dim]
    key: torch.Tensor,  # [batch, kv_heads, seq, head_dim]  (kv_heads divides heads)
    value: torch.Tensor,  # [batch, kv_heads, seq, head_dim]
    mask: torch.Tensor | None,  # bool keep-mask or additive, broadcastable to [b, h, q, k]
    scale: float,
    is_causal: bool,
    *,
    kernel: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The attention output [batch, heads, seq, head_dim] and each row's LSE [batch, heads, seq].

    ``kernel`` forces "cpu", "cuda" or "fallback" (tests); by default the device's kernel,
    and the fallback, with one warning, where that kernel refuses the input.
    """
    name = kernel or query.device.type
    fn = KERNELS.get(name)
    if fn is not None:
        try:
            out, lse = fn(query, key, value, mask, scale, is_causal)
            return out, lse
        except (RuntimeError, TypeError, NotImplementedError) as exc:
            if kernel is not None:
                raise
            first = first_line(exc) or type(exc).__name__
            _warn_once(name, f"fast attention: {name} kernel unavailable ({first}); fallback")
    return _fallback(query, key, value, mask, scale, is_causal)
