"""The ``paper`` group: the five measures of Kobayashi et al. (EMNLP 2021), docs/method.md §1–2.

Per token i of one attention block, with the per-source vectors of the block's sum
``z_i = Σ_j Σ_h α^h_ij f^h(x_j) + b_O + x_i``:

- ``attn_w`` = 1 − ᾱ_ii (ATTN-W; ᾱ the head mean of the attention weights),
- ``attn_n`` = ratio(a) (ATTN-N, Kobayashi et al. 2020), ``a_ij = Σ_h α^h_ij f^h(x_j)``,
- ``attnres_w`` = (1 − ᾱ_ii) / 2 (ATTNRES-W, Abnar & Zuidema 2020): derived, not stored,
- ``attnres_n`` = ratio(r), ``r_ij = a_ij + δ_ij x_i`` (ATTNRES-N),
- ``attnresln_n`` = ratio(F_i), ``F_i(x_j) = γ ⊙ centre(r_ij) / s(z_i)`` (ATTNRESLN-N, the
  paper's proposal),

with ``ratio(P) = ‖Σ_{j≠i} P_ij‖ / (‖Σ_{j≠i} P_ij‖ + ‖P_ii‖)``. No per-pair tensor: the
context sum is the attention output minus b_O minus the token's own part, and the shared
s(z_i) cancels in the ratio. Every family, pre-LN included (the norm is then LN2 or, with a
parallel residual, the next block's input norm). Exactness: Σ_j r_ij + b_O == z_i and
Σ_j F_i(x_j) + γ ⊙ centre(b_O) / s(z_i) + β == the real norm output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mixscope.mixing.measures.base import (
    BatchInfo,
    Column,
    MeasureGroup,
    Residual,
    Workspace,
)

if TYPE_CHECKING:
    import torch

    from mixscope.mixing.block_tensors import BlockParams, BlockTensors

#: ``Workspace.shared`` key: (γ ⊙ centre(Σ_{j≠i} r_ij), γ ⊙ centre(r_ii (+ m_i))), each
#: [batch, seq, hidden]: F_i's context and own parts times s(z_i) (globenc reads them)
LN_PARTS = "ln_parts"
#: ``Workspace.shared`` key: a_ii = Σ_h α^h_ii f^h(x_i) [batch, seq, hidden] (ff reads it)
ATTN_SELF = "attn_self"


class Paper(MeasureGroup):
    name = "paper"
    title = "ATTN-W, ATTN-N, ATTNRES-W, ATTNRES-N, ATTNRESLN-N (Kobayashi et al., EMNLP 2021)"
    columns = (
        Column("attn_w", "ATTN-W", "#9ecae1", dashed=True),
        Column("attn_n", "ATTN-N", "#3182bd", pair=True),
        Column("attnres_w", "ATTNRES-W", "#fdae6b", derived=("attn_w", 0.5), dashed=True),
        Column("attnres_n", "ATTNRES-N", "#e6550d", pair=True),
        Column("attnresln_n", "ATTNRESLN-N", "#31a354", pair=True),
    )
    needs = frozenset({"block_input", "values", "attention", "attn_out", "attn_norm"})

    def compute(
        self, t: BlockTensors, p: BlockParams, batch: BatchInfo, work: Workspace
    ) -> torch.Tensor:
        import torch

        from mixscope.mixing.block_tensors import centre_
        from mixscope.mixing.ratios import norm_ratio, self_attention_vector

        norm = lambda v: torch.linalg.vector_norm(v, dim=-1)  # noqa: E731  [batch, seq]
        # Each [batch, seq, hidden] temporary is reused in place once its norm is taken: on
        # a CPU these element-wise passes, not the one extra projection, are most of the cost.
        a_self = self_attention_vector(t, p)  # a_ii                     [batch, seq, hidden]
        a_context = torch.sub(t.attn_out, p.b_out).sub_(a_self)  # Σ_{j≠i} a_ij  [b, s, hidden]
        r_self = torch.add(a_self, t.x)  # a_ii + x_i                      [batch, seq, hidden]
        n_context, n_self, n_r_self = norm(a_context), norm(a_self), norm(r_self)
        work.shared[ATTN_SELF] = a_self  # not modified below
        # F_i(x_j) = γ ⊙ centre(r_ij + δ_ij m_i) / s(z_i): the shared s(z_i) cancels in the
        # ratio; m_i (a parallel residual's MLP output, else absent) is the token's own.
        ln_r_self = r_self if t.extra is None else r_self.add_(t.extra)
        ln_context = centre_(a_context, p.norm_kind).mul_(p.gamma)
        ln_self = centre_(ln_r_self, p.norm_kind).mul_(p.gamma)
        work.shared[LN_PARTS] = (ln_context, ln_self)
        alpha_self = t.alpha_self.to(t.values.dtype)  # [batch, heads, seq]
        attn_w = 1.0 - alpha_self.mean(dim=1)  # [batch, seq]
        out = torch.stack(
            [
                attn_w,
                norm_ratio(n_context, n_self),
                attn_w / 2,
                norm_ratio(n_context, n_r_self),
                norm_ratio(norm(ln_context), norm(ln_self)),
            ]
        )  # [measure, batch, seq]
        # a token with nothing to mix in (a causal sequence's first): exactly 0, not the
        # float noise of attn_out − b_O − a_ii
        return out.masked_fill(batch.no_context.unsqueeze(0), 0.0)

    def check(self, t: BlockTensors, p: BlockParams, batch: BatchInfo) -> list[Residual]:
        from mixscope.mixing.exactness import (
            rebuilt_norm_input,
            rebuilt_norm_output,
            relative_error,
        )

        return [
            Residual(
                "Σ_j r_ij + b_O − z", relative_error(rebuilt_norm_input(t, p), t.z, batch.valid)
            ),
            Residual(
                "Σ_j F_i(x_j) + bias − norm output",
                relative_error(rebuilt_norm_output(t, p), t.y, batch.valid),
                norm=True,
            ),
        ]


GROUP = Paper()
