"""The tensors of one attention block, captured from a real forward pass.

One dimension vocabulary everywhere: ``batch``, ``seq`` (query i / key j), ``heads``,
``kv_heads``, ``head_dim``, ``hidden``, ``d_ff`` (the feed-forward's width), ``tokens``
(batch · seq flattened, where every step is per token).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from mixscope.mixing.alpha_rows import ScoreInputs


@dataclass
class NormParams:
    """A normalization's weights (float statistics dtype): what its distributive split needs."""

    gamma: torch.Tensor  # [hidden]  norm weight (ones when the norm has none)
    beta: torch.Tensor  # [hidden]   norm bias (zeros for RMSNorm)
    eps: float
    norm_kind: Literal["layer", "rms"]


@dataclass
class FFParams:
    """The feed-forward block of one layer (``Adapter.ff_*``), for the ``ff`` measure group.

    ``FF(y) = W₂ φ(W₁ y + b₁) + b₂``, or gated ``W_down (φ(W_g y + b_g) ⊙ (W_u y + b_u)) + b_d``
    (SwiGLU): ``inputs`` holds (W₁,) or (W_g, W_u). Weights stay in the model's dtype and
    layout (no copy: a float32 model shares them); :func:`project` applies them.
    """

    inputs: tuple[torch.Tensor, ...]  # [d_ff, hidden] each ([hidden, d_ff] if transposed)
    input_biases: tuple[torch.Tensor, ...]  # [d_ff] each (zeros when the model has none)
    w_out: torch.Tensor  # [hidden, d_ff] ([d_ff, hidden] if transposed)
    b_out: torch.Tensor  # [hidden]
    transposed: bool  # weights stored [in, out] (GPT-2 Conv1D)
    act: Callable[[torch.Tensor], torch.Tensor]  # φ, element-wise (the model's own module)
    slope0: float  # φ'(0): the limit of φ(h)/h where h = 0
    #: where the FF sits: after the post-LN block's LN1 ("post"), on LN2 of x + attention
    #: ("pre"), or beside the attention on N_in(x) ("parallel" residual)
    placement: Literal["post", "pre", "parallel"]
    #: the norm the FF reads with a parallel residual (applied to x itself); None otherwise
    input_norm: NormParams | None = None
    #: the FF input's bias part and the input projections' biases are all zero (Llama,
    #: Mistral: no b_O, no β, no b₁), so the bias part's FF output is zero and the others'
    #: part is the real output minus b₂ minus the own part: one W₂ pass fewer
    bias_free: bool = False

    @property
    def gated(self) -> bool:
        return len(self.inputs) == 2


@dataclass
class MoEParams:
    """A mixture of experts (``Adapter.moe_*``), for the ``ff`` group: every expert's
    weights in the model's dtype, as views (no copy), in → out layout."""

    #: gate and up in one [experts, hidden, 2 · d_ff] view: one product for both
    gate_up: torch.Tensor
    interleaved: bool  # gate the even columns of ``gate_up``, up the odd; else the halves
    gate_b: torch.Tensor  # [experts, d_ff] (zeros where the model has none)
    up_b: torch.Tensor  # [experts, d_ff]
    down: torch.Tensor  # [experts, d_ff, hidden]
    down_b: torch.Tensor  # [experts, hidden]
    #: φ of f = φ(g) · u (SiLU); None: gpt-oss's clamped SwiGLU with ``alpha``, ``limit``
    act: Callable[[torch.Tensor], torch.Tensor] | None
    slope0: float = 0.5  # φ'(0)
    alpha: float = 1.702
    limit: float = 7.0

    def split(self, gate_up: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(gate, up) columns of a product with ``gate_up``: [..., d_ff] each."""
        if self.interleaved:
            return gate_up[..., ::2], gate_up[..., 1::2]
        d_ff = gate_up.shape[-1] // 2
        return gate_up[..., :d_ff], gate_up[..., d_ff:]


def project(x: torch.Tensor, w: torch.Tensor, transposed: bool) -> torch.Tensor:
    """``x`` through a weight without its bias: [..., in] → [..., out] (statistics dtype)."""
    w = w.to(x.dtype)
    return x @ w if transposed else torch.nn.functional.linear(x, w)


@dataclass
class BlockParams:
    """The weights of one block that the decomposition needs (float statistics dtype).

    The norms are the steps of the block's chain (mixing/chain.py): each is None where the
    family has no norm at that place (the step is the identity)."""

    w_out: torch.Tensor  # [hidden, heads * head_dim]   W_O in PyTorch (out, in) layout
    b_out: torch.Tensor  # [hidden]                     b_O (zeros when the model has none)
    #: the norm after the attention's residual sum, which the next stage reads (BERT's LN1,
    #: Llama's post-attention norm, the next block's input norm with a parallel residual);
    #: None where the FF reads the sum raw (OLMo-2)
    norm: NormParams | None
    heads: int
    kv_heads: int
    #: the norm inside the attention branch, on its output before the residual add
    #: (Gemma-2/3, OLMo-2 ``post_attention_layernorm``); None elsewhere
    attn_branch_norm: NormParams | None = None
    #: the norm inside the FF branch, on its output before the residual add (Gemma-2/3,
    #: OLMo-2 ``post_feedforward_layernorm``), where a selected group reads the FF
    ff_branch_norm: NormParams | None = None
    #: the norm after the feed-forward's residual sum (LN2 of a post-LN block; the next
    #: block's input norm or the final norm of a pre-LN one), where a selected group reads
    #: it; None otherwise, and where no norm stands there (OLMo-2 between blocks)
    ff_norm: NormParams | None = None
    #: the feed-forward block, where a selected group reads it; None otherwise
    ff: FFParams | None = None
    #: a mixture of experts in its place (a block with experts); None otherwise
    moe: MoEParams | None = None
    #: each branch's output scaled before the residual add (Granite's residual_multiplier)
    branch_scale: float = 1.0

    @property
    def head_dim(self) -> int:
        return self.w_out.shape[1] // self.heads

    @property
    def ff_placement(self) -> str:
        """Where the FF sits ("post", "pre", "parallel"); a mixture of experts is pre-LN."""
        return "pre" if self.ff is None else self.ff.placement


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
    # α^h_i0: each token's weight on the sequence's first real position (BatchInfo.first_position)
    alpha_first: torch.Tensor | None = None  # [batch, heads, seq]
    # π^h_i, the learned sinks' mass where the family has them (gpt-oss): rows of α sum to
    # 1 − π; None elsewhere
    sink_mass: torch.Tensor | None = None  # [batch, heads, seq]
    # the real input and output of the norm after the feed-forward's residual sum, where a
    # selected group's exactness check reads them
    ff_norm_in: torch.Tensor | None = None  # [batch, seq, hidden]
    ff_norm_out: torch.Tensor | None = None  # [batch, seq, hidden]
    # the feed-forward's pre-activations: (W₁ y + b₁,) or (W_g y + b_g, W_u y + b_u)
    ff_pre: tuple[torch.Tensor, ...] | None = None  # [batch, seq, d_ff] each
    # the feed-forward's real output FF(y) (its exactness check)
    ff_out: torch.Tensor | None = None  # [batch, seq, hidden]
    # a mixture of experts' routing: each token's top-k gates and their experts
    ff_route: tuple[torch.Tensor, torch.Tensor] | None = None  # [batch · seq, k] each
    # what the fast kernel saw (q, k, mask, LSE), where a selected group reads every pair's
    # weight (mixing/alpha_rows.py recomputes α's rows from it); None on eager
    scores: ScoreInputs | None = None

    def full_alpha(self) -> torch.Tensor:
        """The full weights [batch, heads, seq, seq]; only the eager path captures them."""
        if self.alpha is None:
            raise ValueError("the full attention weights need the eager attention path")
        return self.alpha


def select_values(
    out: torch.Tensor, layout: str, heads: int, head_dim: int, kv_heads: int | None = None
) -> torch.Tensor:
    """The values [batch, seq, kv_heads * head_dim] from the value module's output.

    ``layout`` (``Adapter.value_layout``): "plain" is the output itself; "fused" the last
    kv_heads · head_dim columns of [q | k | v] (GPT-2's last third; Phi-3's grouped-query
    heads); "fused_per_head" the last third of each head's [q_h | k_h | v_h].
    """
    if layout == "plain":
        return out
    if layout == "fused":
        return out[..., -(kv_heads or heads) * head_dim :]
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


def norm_scale(z: torch.Tensor, p: NormParams) -> torch.Tensor:
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
