"""The "mixscope" attention implementation: a fast kernel's output plus each token's own weight.

The per-token measures need, per head, only the attention output (what every fused kernel
returns) and the diagonal α_ii of the attention weights. The fused kernels also return the
log-sum-exp of each query row, ``LSE_i = log Σ_j exp(s_ij + m_ij)``, so

    α_ii = exp(s_ii + m_ii − LSE_i),   s_ii = scale · q_i · k_i

costs O(seq · head_dim) per head and no [seq, seq] tensor is ever kept. Registered with
transformers' ``AttentionInterface`` (and its mask interface, with SDPA's masks), the one
function serves every family that routes attention through ``ALL_ATTENTION_FUNCTIONS``:
it returns ``(output [batch, seq, heads, head_dim], FastWeights)`` — α_ii and α_i0 (the
sequence's first real position, from q_i · k_0 the same way), each [batch, heads, seq] —
where the eager path returns the full weights, and the engine's hook reads either.

Kernels, by device: CPU ``_scaled_dot_product_flash_attention_for_cpu`` (masks, every
float dtype); CUDA ``_scaled_dot_product_flash_attention`` (no mask, half precision) or
``_scaled_dot_product_efficient_attention`` (additive masks); soft-capped scores (Gemma-2)
compiled flex attention on CUDA, an exact chunked attention elsewhere. Anywhere else, or where a
kernel refuses its input, SDPA gives the output and a log-sum-exp over query chunks gives
LSE (O(chunk · seq) memory per head, one extra q·k product).
"""

from __future__ import annotations

import contextlib
import logging
import math
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from mixscope.errors import MixscopeError, first_line

log = logging.getLogger("mixscope")

#: the name under which the implementation is registered (``config._attn_implementation``)
FAST_ATTENTION = "mixscope"

#: query rows per chunk of the fallback log-sum-exp, as a budget of score elements
CHUNK_SCORES = 1 << 24

_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning(message)


# the last boolean mask converted, and its conversion: every layer of a forward gets the
# same mask object, so it is converted once per forward, not once per layer
_converted: list[Any] = [None, None, None]  # [weakref to the bool mask, dtype, additive]


def additive_mask(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """A boolean keep-mask (True = attend) as an additive one (0 / −inf) in ``dtype``."""
    if mask is None or mask.dtype != torch.bool:
        return None if mask is None else mask.to(dtype)
    ref, cached_dtype, cached = _converted
    if ref is not None and ref() is mask and cached_dtype == dtype:
        return cached
    out = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(
        ~mask, float("-inf")
    )
    _converted[:] = [weakref.ref(mask), dtype, out]
    return out


@dataclass(frozen=True)
class FastWeights:
    """What the fast implementation returns where eager returns the full weights: the
    weights each token gives itself and the sequence's first real position."""

    own: torch.Tensor  # α_ii [batch, heads, seq]
    first: torch.Tensor | None  # α_i0 [batch, heads, seq]; None where no group reads it


# the first real position of each sequence of the batch being run ([batch] long), set by
# the engine around its forward (left padding moves it) when a selected group reads α_i0;
# None: α_i0 is not computed
_first: list[torch.Tensor | None] = [None]


@contextlib.contextmanager
def first_positions(first: torch.Tensor | None) -> Iterator[None]:
    """The first real position [batch] of each sequence, for the forward inside (None:
    no α_i0)."""
    _first[0] = first
    try:
        yield
    finally:
        _first[0] = None


def release_masks() -> None:
    """Drop the cached conversion (the engine calls this after every forward)."""
    _converted[:] = [None, None, None]


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


def _weights_at(
    query: torch.Tensor,  # [batch, heads, seq, head_dim]
    keys: torch.Tensor,  # [batch, kv_heads, seq, head_dim]: the key each query row weighs
    mask_at: torch.Tensor | None,  # that key's mask entry per row, [batch | 1, 1 | heads, seq]
    lse: torch.Tensor,  # [batch, heads, seq]
    scale: float,
    softcap: float | None = None,
) -> torch.Tensor:
    """α_{i,k(i)} = exp(s_{i,k(i)} + m_{i,k(i)} − LSE_i): [batch, heads, seq] (float32;
    float64 for float64 inputs); ``softcap``: s capped first, c · tanh(s / c)."""
    work = lse.dtype if lse.dtype == torch.float64 else torch.float32
    batch, heads, seq, dim = query.shape
    kv = keys.shape[1]
    q = query.to(work).reshape(batch, kv, heads // kv, seq, dim)  # heads grouped by kv head
    s = (q * keys.to(work).unsqueeze(2)).sum(-1).reshape(batch, heads, seq) * scale
    if softcap is not None:
        s = torch.tanh(s / softcap) * softcap
    if mask_at is not None:
        if mask_at.dtype == torch.bool:
            s = s.masked_fill(~mask_at, float("-inf"))
        else:
            s = s + mask_at.to(work)
    lse = lse.to(work)
    # a fully masked row (a padded query) has no weights: 0, whatever its kernel's LSE says
    return torch.where(torch.isfinite(lse), torch.exp(s - lse), 0.0)


def self_weights(
    query: torch.Tensor,  # [batch, heads, seq, head_dim]
    key: torch.Tensor,  # [batch, kv_heads, seq, head_dim]
    mask: torch.Tensor | None,  # bool keep-mask or additive, [batch | 1, 1 | heads, seq, seq]
    lse: torch.Tensor,  # [batch, heads, seq]
    scale: float,
    softcap: float | None = None,
) -> torch.Tensor:
    """α_ii = exp(s_ii + m_ii − LSE_i): [batch, heads, seq] (float32; float64 for float64)."""
    diag = None if mask is None else torch.diagonal(mask, dim1=-2, dim2=-1)  # [b|1, 1|h, seq]
    return _weights_at(query, key, diag, lse, scale, softcap)


def first_weights(
    query: torch.Tensor,  # [batch, heads, seq, head_dim]
    key: torch.Tensor,  # [batch, kv_heads, seq, head_dim]
    mask: torch.Tensor | None,  # bool keep-mask or additive, [batch | 1, 1 | heads, seq, seq]
    lse: torch.Tensor,  # [batch, heads, seq]
    scale: float,
    first: torch.Tensor | None,  # [batch] the first real position; None: 0
    softcap: float | None = None,
) -> torch.Tensor:
    """α_i0 = exp(s_i0 + m_i0 − LSE_i), 0 the first real position: [batch, heads, seq]."""
    batch, kv, seq, dim = key.shape
    if first is None:
        first = torch.zeros(batch, dtype=torch.long, device=key.device)
    rows = torch.arange(batch, device=key.device)
    k0 = key[rows, :, first].unsqueeze(2).expand(batch, kv, seq, dim)  # [batch, kv, seq, dim]
    column = None
    if mask is not None:
        m = mask.expand(batch, *mask.shape[1:])  # [batch, 1 | heads, q, k]
        column = m[rows, :, :, first]  # [batch, 1 | heads, q]
    return _weights_at(query, k0, column, lse, scale, softcap)


#: keyword arguments of an attention call whose content is already in what the kernel reads:
#: positions (in q and k), the sliding window (in the mask), the cache flags (no cache is
#: kept). ``softcap`` (Gemma-2) runs the exact chunked path with the capped scores; any
#: other argument with a value changes the attention (gpt-oss's learned sinks ``s_aux``,
#: position biases, cross-attention): refused, never dropped
READ_ELSEWHERE = frozenset(
    {
        "position_ids",
        "sliding_window",
        "use_cache",
        "cache_position",
        "output_attentions",
        "deterministic",  # ModernBERT's flag for flash-attention's backward pass
    }
)


def mixscope_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,  # [batch, heads, seq, head_dim]
    key: torch.Tensor,  # [batch, kv_heads, seq, head_dim]
    value: torch.Tensor,  # [batch, kv_heads, seq, head_dim]
    attention_mask: torch.Tensor | None,  # from SDPA's mask function: bool [b, 1, q, k] or None
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, FastWeights]:
    """An ``AttentionInterface`` function: (output [batch, seq, heads, head_dim], α_ii and
    α_i0 as :class:`FastWeights`).

    Same masking rules as transformers' SDPA forward; inference only (dropout must be 0).
    """
    if dropout:
        raise MixscopeError("fast attention runs inference only: attention dropout must be 0")
    softcap = kwargs.pop("softcap", None)  # Gemma-2's score cap: the chunked exact path
    unknown = sorted(k for k, v in kwargs.items() if k not in READ_ELSEWHERE and v is not None)
    if unknown:  # soft-capping, learned sinks (s_aux), position biases, cross-attention, …
        raise MixscopeError(
            f"fast attention does not implement the attention argument {unknown[0]!r} of "
            f"{type(module).__name__}: use attention='eager' for this model"
        )
    if query.shape[1] % key.shape[1]:
        raise MixscopeError("fast attention: key/value heads must divide the query heads")
    if query.shape[2] != key.shape[2]:
        raise MixscopeError("fast attention analyses whole sequences (no key/value cache)")
    scale = scaling if scaling is not None else 1.0 / math.sqrt(query.shape[-1])
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = bool(causal) and attention_mask is None and query.shape[2] > 1
    if softcap is None:
        out, lse = attention_with_lse(query, key, value, attention_mask, scale, causal)
    else:
        out, lse = capped_attention_with_lse(
            query, key, value, attention_mask, scale, causal, float(softcap)
        )
    cap = None if softcap is None else float(softcap)
    alpha_self = self_weights(query, key, attention_mask, lse, scale, cap)  # [b, heads, seq]
    first = _first[0]
    alpha_first = None
    if first is not None:
        alpha_first = first_weights(query, key, attention_mask, lse, scale, first, cap)
    return out.transpose(1, 2).contiguous(), FastWeights(alpha_self, alpha_first)


def register() -> None:
    """Register the implementation and SDPA's mask function under :data:`FAST_ATTENTION`."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(FAST_ATTENTION, mixscope_attention_forward)
    AttentionMaskInterface.register(FAST_ATTENTION, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
