"""Per-token mixing ratios of one block (docs/method.md §1), without any per-pair tensor.

The context part needs only sums the model already computes: ``Σ_j a_ij`` is the output
projection minus ``b_O``; the self part ``a_ii = Σ_h α^h_ii f^h(x_i)`` needs the diagonal
of α (from the eager weights, or from a fused kernel's log-sum-exp: fast_attention.py)
and the token's own values. Cost: one extra ``[hidden, hidden]`` projection per block.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mixscope.measures import MEASURE_COLUMNS
from mixscope.mixing.block import BlockParams, BlockTensors, centre_, head_values

#: order of the measures along the ``measure`` axis of :func:`token_measures`
MEASURE_ORDER = MEASURE_COLUMNS


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


def token_measures(
    t: BlockTensors, p: BlockParams, no_context: torch.Tensor | None = None
) -> torch.Tensor:
    """The five measures of every token: [measure, batch, seq] in ``MEASURE_ORDER``.

    ``no_context`` [batch, seq] bool marks tokens that have no other token to mix in (the
    first token of a causal sequence): their five measures are exactly 0 by definition,
    not the float noise ``attn_out − b_O − a_ii`` would leave.
    """
    norm = lambda v: torch.linalg.vector_norm(v, dim=-1)  # noqa: E731  [batch, seq]
    # Each [batch, seq, hidden] temporary is reused in place once its norm is taken: on a
    # CPU these element-wise passes, not the one extra projection, are most of the cost.
    a_self = self_attention_vector(t, p)  # [batch, seq, hidden]
    a_context = torch.sub(t.attn_out, p.b_out).sub_(a_self)  # Σ_{j≠i} a_ij   [b, seq, hidden]
    r_self = torch.add(a_self, t.x)  # a_ii + x_i                            [b, seq, hidden]
    n_context, n_self, n_r_self = norm(a_context), norm(a_self), norm(r_self)
    del a_self
    # F_i(x_j) = γ ⊙ centre(r_ij + δ_ij m_i) / s(z_i): the shared s(z_i) cancels in the ratio;
    # m_i (parallel residual's MLP output, else absent) belongs to the token itself.
    ln_r_self = r_self if t.extra is None else r_self.add_(t.extra)
    n_ln_context = norm(centre_(a_context, p.norm_kind).mul_(p.gamma))
    n_ln_self = norm(centre_(ln_r_self, p.norm_kind).mul_(p.gamma))

    alpha_self = t.alpha_self.to(t.values.dtype)  # [batch, heads, seq]
    attn_w = 1.0 - alpha_self.mean(dim=1)  # [batch, seq]
    out = torch.stack(
        [
            attn_w,
            norm_ratio(n_context, n_self),
            attn_w / 2,
            norm_ratio(n_context, n_r_self),
            norm_ratio(n_ln_context, n_ln_self),
        ]
    )
    if no_context is not None:
        out = out.masked_fill(no_context.unsqueeze(0), 0.0)
    return out
