"""Soft-capped attention on CUDA: flex attention with a tanh score modification.

Gemma-2 caps every score before the softmax, ``s' = c · tanh(s / c)``; the per-token
measures need the output and the log-sum-exp of the *capped* scores (α_ii = exp(s'_ii −
LSE_i)). No SDPA kernel takes a score cap, but PyTorch's flex attention compiles a fused
kernel from a score modification and returns the LSE with the output (``AuxRequest``), so
on a GPU the cap costs what a fused kernel costs, with O(seq) memory per head. The mask
(padding, sliding windows, causality) enters the same score modification.

Compiled flex attention runs on CUDA only where it returns the LSE (PyTorch's CPU lowering
refuses ``return_lse``); elsewhere ``fast_attention.capped_attention_with_lse`` takes the
exact chunked path. Uncompiled (``compiled=False``), the same function runs anywhere on
an unfused reference implementation: how the tests check it on the CPU.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import torch


@functools.cache
def _compiled() -> Any:
    """flex attention compiled once per process (shapes vary: compiled dynamic)."""
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=True)


def _score_mod(
    mask: torch.Tensor | None,  # bool keep-mask or additive, [batch, 1 | heads, q, k]
    is_causal: bool,
    softcap: float,
) -> Any:
    """The score modification: cap, then the mask (the order Gemma-2's eager path uses)."""
    per_head = mask is not None and mask.shape[1] > 1
    boolean = mask is not None and mask.dtype == torch.bool

    def mod(score: Any, b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        score = torch.tanh(score / softcap) * softcap
        if mask is not None:
            m = mask[b, h if per_head else 0, q_idx, kv_idx]
            score = torch.where(m, score, float("-inf")) if boolean else score + m
        if is_causal:
            score = torch.where(kv_idx <= q_idx, score, float("-inf"))
        return score

    return mod


def flex_capped_attention(
    query: torch.Tensor,  # [batch, heads, seq, head_dim]
    key: torch.Tensor,  # [batch, kv_heads, seq, head_dim]
    value: torch.Tensor,  # [batch, kv_heads, seq, head_dim]
    mask: torch.Tensor | None,  # bool keep-mask or additive, broadcastable to [b, h, q, k]
    scale: float,
    is_causal: bool,
    softcap: float,
    *,
    compiled: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(output [batch, heads, seq, head_dim], LSE of the capped scores [batch, heads, seq]).

    A fully masked query row (padding) gives output 0 and LSE −inf (no weights).
    """
    from torch.nn.attention.flex_attention import AuxRequest, flex_attention

    if mask is not None:
        mask = mask.expand(query.shape[0], *mask.shape[1:])  # [batch, 1 | heads, q, k]
    fn = _compiled() if compiled else flex_attention
    with warnings.catch_warnings():  # uncompiled: "will use an unfused implementation"
        warnings.simplefilter("ignore", UserWarning)
        out, aux = fn(
            query,
            key,
            value,
            score_mod=_score_mod(mask, is_causal, softcap),
            scale=scale,
            enable_gqa=key.shape[1] != query.shape[1],
            return_aux=AuxRequest(lse=True),
        )
    return out, aux.lse
