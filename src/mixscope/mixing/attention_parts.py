"""A token's attention parts that the per-token ratios are built from, without any per-pair
tensor: its own part a_ii, its part from the first position a_i0, and the ratio of two norms.

The context part needs only sums the model already computes: ``Σ_j a_ij`` is the output
projection minus ``b_O``; the self part ``a_ii = Σ_h α^h_ii f^h(x_i)`` needs the diagonal
of α (from the eager weights, or from a fused kernel's log-sum-exp: fast_attention.py)
and the token's own values. Cost: one extra ``[hidden, hidden]`` projection per block.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mixscope.mixing.block_tensors import BlockParams, BlockTensors, head_values


def self_attention_vector(t: BlockTensors, p: BlockParams) -> torch.Tensor:
    """a_ii = Σ_h α^h_ii f^h(x_i): [batch, seq, hidden]."""
    alpha_self = t.alpha_self.to(t.values.dtype)  # [batch, heads, seq]
    v = head_values(t.values, p)  # [batch, seq, heads, head_dim]
    weighted = v * alpha_self.transpose(1, 2).unsqueeze(-1)  # [batch, seq, heads, head_dim]
    batch, seq = weighted.shape[:2]
    return F.linear(weighted.reshape(batch, seq, -1), p.w_out)  # [batch, seq, hidden]


def norm_ratio(c: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
    """‖context‖ / (‖context‖ + ‖own‖) from the two norms [batch, seq]; 0 where both are 0
    (no context)."""
    total = c + o
    return torch.where(total > 0, c / torch.where(total > 0, total, 1), torch.zeros_like(c))


def first_attention_vector(t: BlockTensors, p: BlockParams, first: torch.Tensor) -> torch.Tensor:
    """a_i0 = Σ_h α^h_i0 f^h(x_0), x_0 the first real token of each sequence:
    [batch, seq, hidden]. f^h(x_0) is one [heads, hidden] matrix per sequence, so this costs
    heads · hidden per token, not a projection."""
    assert t.alpha_first is not None
    v = head_values(t.values, p)  # [batch, seq, heads, head_dim]
    v0 = v[torch.arange(v.shape[0], device=v.device), first]  # [batch, heads, head_dim]
    w = p.w_out.reshape(p.w_out.shape[0], p.heads, p.head_dim)  # [hidden, heads, head_dim]
    f0 = torch.einsum("bhe,dhe->bhd", v0, w)  # f^h(x_0)   [batch, heads, hidden]
    alpha = t.alpha_first.to(f0.dtype)  # [batch, heads, seq]
    return torch.einsum("bhi,bhd->bid", alpha, f0)  # [batch, seq, hidden]
