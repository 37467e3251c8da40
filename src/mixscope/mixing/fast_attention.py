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

The kernels that give the output and LSE, by device, are attention_kernels.py.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from mixscope.errors import MixscopeError
from mixscope.mixing.alpha_rows import ScoreInputs
from mixscope.mixing.attention_kernels import (
    additive_mask,
    attention_with_lse,
    capped_attention_with_lse,
    chunked_logsumexp,
    current_state,
    forward_state,
)

__all__ = [
    "FAST_ATTENTION",
    "FastWeights",
    "additive_mask",
    "attention_with_lse",
    "capped_attention_with_lse",
    "chunked_logsumexp",
    "first_positions",
    "first_weights",
    "forward_state",
    "mixscope_attention_forward",
    "register",
    "self_weights",
]

#: the name under which the implementation is registered (``config._attn_implementation``)
FAST_ATTENTION = "mixscope"


@dataclass(frozen=True)
class FastWeights:
    """What the fast implementation returns where eager returns the full weights: the
    weights each token gives itself and the sequence's first real position."""

    own: torch.Tensor  # α_ii [batch, heads, seq]
    first: torch.Tensor | None  # α_i0 [batch, heads, seq]; None where no group reads it
    #: π^h_i, the learned sinks' mass (gpt-oss), [batch, heads, seq]; None without sinks
    sink: torch.Tensor | None = None
    #: q, k, the mask and LSE, where a group reads every pair's weight (alpha_rows.py)
    scores: ScoreInputs | None = None


@contextlib.contextmanager
def first_positions(first: torch.Tensor | None) -> Iterator[None]:
    """The first real position [batch] of each sequence, for the forward inside (None:
    no α_i0): a :func:`forward_state` of its own (tests; the engine opens one per forward)."""
    with forward_state(first):
        yield


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
    sinks = kwargs.pop("s_aux", None)  # gpt-oss's learned sink logits σ_h [heads]
    unknown = sorted(k for k, v in kwargs.items() if k not in READ_ELSEWHERE and v is not None)
    if unknown:  # position biases, cross-attention, …
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
    sink = None
    if sinks is not None:
        out, lse, sink = with_learned_sinks(out, lse, sinks)
    cap = None if softcap is None else float(softcap)
    alpha_self = self_weights(query, key, attention_mask, lse, scale, cap)  # [b, heads, seq]
    state = current_state()
    first = None if state is None else state.first_position
    alpha_first = None
    if first is not None:
        alpha_first = first_weights(query, key, attention_mask, lse, scale, first, cap)
    scores = None
    if state is not None and state.scores:  # every pair's weight, recomputed later by rows
        scores = ScoreInputs(query, key, attention_mask, lse, scale, causal, cap)
    weights = FastWeights(alpha_self, alpha_first, sink, scores)
    return out.transpose(1, 2).contiguous(), weights


def with_learned_sinks(
    out: torch.Tensor,  # [batch, heads, seq, head_dim] the kernel's output (no sink)
    lse: torch.Tensor,  # [batch, heads, seq] the kernel's log-sum-exp over the keys
    sinks: torch.Tensor,  # [heads] σ_h, each head's sink logit (no value vector)
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A learned sink joins the softmax without a value (docs/method.md §6): LSE' =
    logaddexp(LSE, σ_h); the output is rescaled by exp(LSE − LSE') (the keys' share of
    the mass); π = exp(σ_h − LSE') is the sink's mass. Returns (output, LSE', π); the
    weights α_ij = exp(s_ij + m_ij − LSE') then sum to 1 − π. Rows with no key (padding)
    are not read."""
    work = torch.float64 if lse.dtype == torch.float64 else torch.float32
    sigma = sinks.to(device=lse.device, dtype=work).view(1, -1, 1)  # [1, heads, 1]
    total = torch.logaddexp(lse.to(work), sigma)  # [batch, heads, seq]  LSE'
    keys = torch.exp(lse.to(work) - total)  # the keys' share of the mass, 1 − π
    out = (out.to(work) * keys.unsqueeze(-1)).to(out.dtype)
    return out, total, torch.exp(sigma - total)


def register() -> None:
    """Register the implementation and SDPA's mask function under :data:`FAST_ATTENTION`."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(FAST_ATTENTION, mixscope_attention_forward)
    AttentionMaskInterface.register(FAST_ATTENTION, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
