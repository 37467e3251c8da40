"""The tensors of one attention block, captured from a real forward pass.

One dimension vocabulary everywhere: ``batch``, ``seq`` (query i / key j), ``heads``,
``kv_heads``, ``head_dim``, ``hidden``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch


@dataclass
class NormParams:
    """A normalization's weights (float statistics dtype): what its distributive split needs."""

    gamma: torch.Tensor  # [hidden]  norm weight (ones when the norm has none)
    beta: torch.Tensor  # [hidden]   norm bias (zeros for RMSNorm)
    eps: float
    norm_kind: Literal["layer", "rms"]


@dataclass
class BlockParams:
    """The weights of one block that the decomposition needs (float statistics dtype)."""

    w_out: torch.Tensor  # [hidden, heads * head_dim]   W_O in PyTorch (out, in) layout
    b_out: torch.Tensor  # [hidden]                     b_O (zeros when the model has none)
    gamma: torch.Tensor  # [hidden]                     norm weight
    beta: torch.Tensor  # [hidden]                      norm bias (zeros for RMSNorm)
    eps: float
    norm_kind: Literal["layer", "rms"]
    heads: int
    kv_heads: int
    #: the norm after the feed-forward's residual sum of a post-LN block (LN2), where a
    #: selected group reads it (``Adapter.ff_norm``); None otherwise
    ff_norm: NormParams | None = None

    @property
    def head_dim(self) -> int:
        return self.w_out.shape[1] // self.heads


@dataclass
class BlockTensors:
    """Activations of one block for one batch (statistics dtype)."""

    x: torch.Tensor  # [batch, seq, hidden]                 block input = the residual
    values: torch.Tensor  # [batch, seq, kv_heads * head_dim]  x W_V + b_V (b_V inside f)
    alpha_self: torch.Tensor  # [batch, heads, seq]            α_ii, each token's own weight
    attn_out: torch.Tensor  # [batch, seq, hidden]             Σ_j a_ij + b_O (output projection)
    z: torch.Tensor  # [batch, seq, hidden]                 the real input of the norm
    y: torch.Tensor  # [batch, seq, hidden]                 the real output of the norm
    # A term of z that belongs to the token itself besides x_i (parallel residual: the MLP
    # output m_i, so z_i = Σ_j a_ij + b_O + x_i + m_i); None when z = x + attention output.
    extra: torch.Tensor | None = None  # [batch, seq, hidden]
    # The full attention weights (eager path only: per-pair maps and the exactness check read
    # them whole); None on the fast path, which never builds a [seq, seq] tensor.
    alpha: torch.Tensor | None = None  # [batch, heads, seq, seq]  rows = queries
    # α^h_i0: each token's weight on the sequence's first real position (BatchInfo.first)
    alpha_first: torch.Tensor | None = None  # [batch, heads, seq]
    # the real input and output of the norm after the feed-forward (post-LN LN2), where a
    # selected group's exactness check reads them
    ff_norm_in: torch.Tensor | None = None  # [batch, seq, hidden]
    ff_norm_out: torch.Tensor | None = None  # [batch, seq, hidden]

    def full_alpha(self) -> torch.Tensor:
        """The full weights [batch, heads, seq, seq]; only the eager path captures them."""
        if self.alpha is None:
            raise ValueError("the full attention weights need the eager attention path")
        return self.alpha

    def own_residual(self) -> torch.Tensor:
        """What the token adds to z besides attention: x_i (+ m_i). [batch, seq, hidden]."""
        return self.x if self.extra is None else self.x + self.extra


def select_values(out: torch.Tensor, layout: str, heads: int, head_dim: int) -> torch.Tensor:
    """The values [batch, seq, kv_heads * head_dim] from the value module's output.

    ``layout`` (``Adapter.value_layout``): "plain" is the output itself; "fused" is the last
    third of [q | k | v]; "fused_per_head" the last third of each head's [q_h | k_h | v_h].
    """
    if layout == "plain":
        return out
    if layout == "fused":
        width = out.shape[-1] // 3
        return out[..., 2 * width :]
    if layout == "fused_per_head":
        per_head = out.reshape(*out.shape[:-1], heads, 3 * head_dim)
        return per_head[..., 2 * head_dim :].reshape(*out.shape[:-1], heads * head_dim)
    raise ValueError(f"unknown value layout {layout!r}")


def head_values(values: torch.Tensor, p: BlockParams) -> torch.Tensor:
    """Values per query head (grouped-query heads repeated): [batch, seq, heads, head_dim]."""
    batch, seq, _ = values.shape
    v = values.reshape(batch, seq, p.kv_heads, p.head_dim)
    if p.kv_heads != p.heads:
        v = v.repeat_interleave(p.heads // p.kv_heads, dim=2)
    return v


def centre(t: torch.Tensor, norm_kind: str) -> torch.Tensor:
    """Subtract the mean over ``hidden`` (LayerNorm); RMSNorm does not centre."""
    if norm_kind == "rms":
        return t
    return t - t.mean(dim=-1, keepdim=True)


def centre_(t: torch.Tensor, norm_kind: str) -> torch.Tensor:
    """:func:`centre` in place (``t`` is overwritten and returned)."""
    if norm_kind == "rms":
        return t
    return t.sub_(t.mean(dim=-1, keepdim=True))


def norm_scale(z: torch.Tensor, p: BlockParams | NormParams) -> torch.Tensor:
    """The shared denominator s(z_i) of the real norm ``p``: [batch, seq, 1]."""
    if p.norm_kind == "rms":
        return torch.sqrt(z.pow(2).mean(dim=-1, keepdim=True) + p.eps)
    return torch.sqrt(z.var(dim=-1, unbiased=False, keepdim=True) + p.eps)


def per_head_transformed(t: BlockTensors, p: BlockParams) -> torch.Tensor:
    """f^h(x_j) = (x_j W_V^h + b_V^h) W_O^h for every head and token: [batch, heads, seq, hidden].

    Memory n·H·d per sequence: used by the per-pair maps and the exactness check only.
    """
    v = head_values(t.values, p)  # [batch, seq, heads, head_dim]
    w = p.w_out.reshape(p.w_out.shape[0], p.heads, p.head_dim)  # [hidden, heads, head_dim]
    return torch.einsum("bjhe,dhe->bhjd", v, w)
