"""Per-pair contribution norms ‖P_ij‖ (the paper's Figure 1) in Gram form (docs/method.md §1).

With u^h_j the per-head vectors of source j and the [heads, heads] Gram matrix G_j,
‖Σ_h α^h_ij u^h_j‖² = α_ijᵀ G_j α_ij: memory n·H·d + n²·H per sequence, never the
[batch, heads, seq, seq, hidden] tensor of the authors' code.
"""

from __future__ import annotations

import torch

from mixscope.mixing.block_tensors import (
    BlockParams,
    BlockTensors,
    centre,
    norm_scale,
    per_head_transformed,
)
from mixscope.mixing.ratios import self_attention_vector

#: order of the maps along the ``measure`` axis of :func:`pair_norms`


def _gram_norms(alpha: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """‖Σ_h α^h_ij u^h_j‖ for all i, j.

    alpha [batch, heads, seq, seq], u [batch, heads, seq, hidden] → [batch, seq, seq].
    """
    gram = torch.einsum("bhjd,bkjd->bjhk", u, u)  # [batch, seq(j), heads, heads]
    sq = torch.einsum("bhij,bjhk,bkij->bij", alpha, gram, alpha)  # [batch, seq(i), seq(j)]
    return sq.clamp_min(0).sqrt()


def pair_norms(t: BlockTensors, p: BlockParams, causal: bool = False) -> torch.Tensor:
    """‖a_ij‖, ‖r_ij‖, ‖F_i(x_j)‖: [measure, batch, seq(i), seq(j)] in ``PAIR_MEASURES``.

    ``causal``: the entries j > i (sources a causal query cannot see) are set to exactly 0.
    """
    f = per_head_transformed(t, p)  # [batch, heads, seq, hidden]
    attn = _gram_norms(t.full_alpha(), f)  # [batch, seq, seq]
    u = p.gamma * centre(f, p.norm_kind)  # [batch, heads, seq, hidden]
    s = norm_scale(t.z, p)  # [batch, seq, 1]
    ln = _gram_norms(t.full_alpha(), u) / s  # [batch, seq, seq]

    a_self = self_attention_vector(t, p)  # [batch, seq, hidden]
    res_diag = torch.linalg.vector_norm(a_self + t.x, dim=-1)  # ‖a_ii + x_i‖  [batch, seq]
    ln_self = p.gamma * centre(a_self + t.own_residual(), p.norm_kind)  # (+ m_i, parallel)
    ln_diag = torch.linalg.vector_norm(ln_self, dim=-1) / s[..., 0]

    attnres = attn.clone()
    attnres.diagonal(dim1=-2, dim2=-1).copy_(res_diag)
    ln.diagonal(dim1=-2, dim2=-1).copy_(ln_diag)
    out = torch.stack([attn, attnres, ln])
    if causal:
        seq = out.shape[-1]
        future = torch.ones(seq, seq, dtype=torch.bool, device=out.device).triu(1)
        out = out.masked_fill(future, 0.0)
    return out
