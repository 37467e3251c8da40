"""The ``distance`` group's exactness identity (eager path, ``verify``): method.md §5e.

Three residuals, each of which a wrong piece fails:

- the Gram-form per-pair norms ‖L_jᵀ α_ij‖ (G_j = L_j L_jᵀ, the group's own computation)
  against the norms of the materialised per-source vectors ``a_ij = Σ_h α^h_ij f^h(x_j)``
  (a wrong head layout, value slice, output-projection block or Gram factor, or weights
  in place of norms);
- the buckets partition the sources: Σ_b of the bucket sums equals Σ_{j≠i} of the
  materialised norms, and of the head-mean weights (a bucket edge off by one, the token's
  own part counted, a source dropped);
- the shares of every token with context sum to 1, those of a token without to 0.

The per-source vectors are materialised a block of query rows at a time ([batch, rows, seq,
hidden]): the check costs O(seq² · hidden) time but not that memory.
"""

from __future__ import annotations

import torch

from mixscope.mixing.alpha_rows import BLOCK_SCORES, block_rows
from mixscope.mixing.block_tensors import per_head_transformed
from mixscope.mixing.chain import BlockChain
from mixscope.mixing.distance import distance_sums, head_grams, head_mix, pair_values
from mixscope.mixing.measures.base import BatchInfo, Residual


def _largest(diff: torch.Tensor, scale: torch.Tensor | float, valid: torch.Tensor) -> float:
    """max over valid tokens of |diff| / max(1, scale), diff and scale [batch, seq]."""
    size = torch.as_tensor(scale, dtype=diff.dtype, device=diff.device).clamp_min(1.0)
    rel = (diff.abs() / size)[valid]
    return float(rel.max()) if rel.numel() else 0.0


def distance_residuals(
    exact: BlockChain, batch: BatchInfo, profile: torch.Tensor
) -> list[Residual]:
    """The identity's residuals for one block; ``profile`` [2 · 12, batch, seq] is what the
    group computed from the same block."""
    t, p = exact.t, exact.p
    alpha = t.full_alpha()  # [batch, heads, seq, seq]
    b, seq = alpha.shape[0], alpha.shape[2]
    f = per_head_transformed(t, p)  # f^h(x_j)   [batch, heads, seq, hidden]
    mix = head_mix(head_grams(t.values, p), alpha.dtype)  # [batch, seq, heads + 1, heads]
    pair_err = torch.zeros(b, seq, dtype=alpha.dtype, device=alpha.device)
    context = torch.zeros_like(pair_err)  # Σ_{j≠i} ‖a_ij‖, materialised
    rows = block_rows(b, 1, seq, BLOCK_SCORES // max(1, f.shape[-1]))
    for start in range(0, seq, rows):
        stop = min(seq, start + rows)
        block = alpha[:, :, start:stop]  # [batch, heads, rows, seq]
        a = torch.einsum("bhij,bhjd->bijd", block, f)  # a_ij   [batch, rows, seq, hidden]
        real = torch.linalg.vector_norm(a, dim=-1)  # [batch, rows, seq]
        src = block.permute(0, 3, 1, 2)  # [batch, seq, heads, rows]
        gram_form = pair_values(src, mix)[0].mT  # [batch, rows, seq]
        scale = real.amax(dim=-1).clamp_min(1.0)  # [batch, rows]
        pair_err[:, start:stop] = (gram_form - real).abs().amax(dim=-1) / scale
        own = torch.diagonal(real, offset=start, dim1=-2, dim2=-1)  # ‖a_ii‖  [batch, rows]
        context[:, start:stop] = real.sum(-1) - own
    sums = distance_sums(alpha, None, t.values, p, batch.buckets)  # [2, K, batch, seq]
    mean = alpha.mean(dim=1)  # ᾱ   [batch, seq(i), seq(j)]
    weight = mean.sum(-1) - torch.diagonal(mean, dim1=-2, dim2=-1)  # Σ_{j≠i} ᾱ_ij
    norms, weights = sums.sum(dim=1).to(alpha.dtype)  # Σ_b of each   [batch, seq]
    real_tok = batch.valid
    has_context = real_tok & ~batch.no_context
    total = profile.reshape(2, -1, *profile.shape[1:]).sum(dim=1)  # [2, batch, seq]
    expected = has_context.to(total.dtype)  # 1 with context, 0 without
    return [
        Residual("‖a_ij‖ (Gram form) − ‖a_ij‖ (materialised)", _largest(pair_err, 1, real_tok)),
        Residual(
            "Σ_b Σ_{j∈B_b} ‖a_ij‖ − Σ_{j≠i} ‖a_ij‖", _largest(norms - context, context, real_tok)
        ),
        Residual("Σ_b Σ_{j∈B_b} ᾱ_ij − Σ_{j≠i} ᾱ_ij", _largest(weights - weight, weight, real_tok)),
        Residual(
            "Σ_b dist share − 1 (0 without context)",
            _largest((total - expected).abs().amax(dim=0), expected, real_tok),
        ),
    ]
