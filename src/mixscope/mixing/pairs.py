"""Per-pair contribution norms ‖P_ij‖ (the paper's Figure 1) in Gram form (docs/method.md §1).

With u^h_j the per-head vectors of source j and the [heads, heads] Gram matrix G_j,
‖Σ_h α^h_ij u^h_j‖² = α_ijᵀ G_j α_ij: memory n·H·d + n²·H per sequence, never the
[batch, heads, seq, seq, hidden] tensor of the authors' code.
"""

from __future__ import annotations

import torch

from mixscope.mixing.block_tensors import norm_scale, per_head_transformed
from mixscope.mixing.chain import BlockChain, norm_split


def _gram_norms(alpha: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """‖Σ_h α^h_ij u^h_j‖ for all i, j.

    alpha [batch, heads, seq, seq], u [batch, heads, seq, hidden] → [batch, seq, seq].
    """
    gram = torch.einsum("bhjd,bkjd->bjhk", u, u)  # [batch, seq(j), heads, heads]
    sq = torch.einsum("bhij,bjhk,bkij->bij", alpha, gram, alpha)  # [batch, seq(i), seq(j)]
    return sq.clamp_min(0).sqrt()


def pair_norms(block: BlockChain, causal: bool = False) -> torch.Tensor:
    """‖a_ij‖, ‖r_ij‖, ‖F_i(x_j)‖: [measure, batch, seq(i), seq(j)], the paper
    group's per-pair columns (``registry.MeasureSet.pair``) in order.

    The off-diagonal parts are the attention's, through the block's chain: the norm inside
    the branch (its 1/s of query i's real branch output), the branch's multiplier and the
    norm after the residual sum; the diagonal is the chain's own part of each scope.
    ``causal``: the entries j > i (sources a causal query cannot see) are set to exactly 0.
    """
    t, p = block.t, block.p
    alpha = t.full_alpha()  # [batch, heads, seq, seq]
    f = per_head_transformed(t, p)  # [batch, heads, seq, hidden]
    attn = _gram_norms(alpha, f)  # [batch, seq, seq]
    u, row = f, None  # the branch's per-head vectors, and its per-query 1/s  [batch, seq, 1]
    if p.attn_branch_norm is not None:
        u = norm_split(f, p.attn_branch_norm)
        row = norm_scale(t.attn_out, p.attn_branch_norm).reciprocal()
    res = attn.clone() if row is None else _gram_norms(alpha, u) * row
    m = abs(p.branch_scale)  # the branch's multiplier (Granite), 1 elsewhere
    res = res * m
    if p.norm is None:  # nothing normalizes the sum: the next stage reads r_ij
        ln = res.clone()
    else:
        ln = _gram_norms(alpha, norm_split(u, p.norm)) / block.s_norm * m
        ln = ln if row is None else ln * row
    own = lambda parts: torch.linalg.vector_norm(parts.applied().own, dim=-1)  # noqa: E731
    res.diagonal(dim1=-2, dim2=-1).copy_(own(block.attnres))
    ln.diagonal(dim1=-2, dim2=-1).copy_(own(block.attnresln))
    out = torch.stack([attn, res, ln])
    if causal:
        seq = out.shape[-1]
        future = torch.ones(seq, seq, dtype=torch.bool, device=out.device).triu(1)
        out = out.masked_fill(future, 0.0)
    return out
