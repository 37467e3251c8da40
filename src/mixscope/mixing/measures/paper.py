"""The ``paper`` group: the five measures of Kobayashi et al. (EMNLP 2021), docs/method.md §1–2.

Per token i of one attention block, with the per-source vectors of the block's sum
``z_i = Σ_j Σ_h α^h_ij f^h(x_j) + b_O + x_i``:

- ``attn_w`` = Σ_{j≠i} ᾱ_ij (ATTN-W; ᾱ the head mean of the attention weights): 1 − ᾱ_ii,
  and 1 − ᾱ_ii − π̄_i with learned sinks (gpt-oss: the sink's mass π is no token's),
- ``attn_n`` = ratio(a) (ATTN-N, Kobayashi et al. 2020), ``a_ij = Σ_h α^h_ij f^h(x_j)``,
- ``attnres_w`` = ``attn_w`` / 2 (ATTNRES-W, Abnar & Zuidema 2020): derived, not stored,
- ``attnres_n`` = ratio(r), ``r_ij = a_ij + δ_ij x_i`` (ATTNRES-N),
- ``attnresln_n`` = ratio(F_i), ``F_i(x_j) = γ ⊙ centre(r_ij) / s(z_i)`` (ATTNRESLN-N, the
  paper's proposal),

with ``ratio(P) = ‖Σ_{j≠i} P_ij‖ / (‖Σ_{j≠i} P_ij‖ + ‖P_ii‖)``. No per-pair tensor: the
context sum is the attention output minus b_O minus the token's own part, and the shared
s(z_i) cancels in the ratio. Every family, pre-LN included (the norm is then LN2 or, with a
parallel residual, the next block's input norm); with a norm inside the attention branch
(Gemma, OLMo-2) the residual sums the normed parts, and where no norm follows the sum
(OLMo-2) ``attnresln_n`` = ``attnres_n`` (docs/method.md §6). The scopes come from the
block's chain (mixing/chain.py). Exactness: Σ_j r_ij + bias == z_i and Σ_j F_i(x_j) + bias
== the real norm output, each Σ_j rebuilt from α and the per-head vectors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mixscope.mixing.measures.base import BatchInfo, MeasureGroup, Residual

if TYPE_CHECKING:
    import torch

    from mixscope.mixing.chain import BlockChain


class Paper(MeasureGroup):
    name = "paper"
    needs = frozenset({"block_input", "values", "attention", "attn_out", "attn_norm"})

    def compute(self, block: BlockChain, batch: BatchInfo) -> torch.Tensor:
        import torch

        t = block.t
        alpha_self = t.alpha_self.to(t.values.dtype)  # [batch, heads, seq]
        attn_w = 1.0 - alpha_self.mean(dim=1)  # [batch, seq]
        if t.sink_mass is not None:  # a learned sink's weight is on no token
            attn_w = attn_w - t.sink_mass.to(attn_w.dtype).mean(dim=1)
        attn_n, attnres_n, attnresln_n = block.attention_ratios()
        out = torch.stack([attn_w, attn_n, attn_w / 2, attnres_n, attnresln_n])
        # a token with nothing to mix in (a causal sequence's first): exactly 0, not the
        # float noise of attn_out − b_O − a_ii
        return out.masked_fill(batch.no_context.unsqueeze(0), 0.0)

    def check(self, exact: BlockChain, batch: BatchInfo) -> list[Residual]:
        from mixscope.mixing.exactness import relative_error

        t = exact.t
        return [
            Residual(
                "Σ_j r_ij + bias − z",
                relative_error(exact.norm_input.total(), t.z, batch.valid),
                norm=exact.p.attn_branch_norm is not None,
            ),
            Residual(
                "Σ_j F_i(x_j) + bias − norm output",
                relative_error(exact.attnresln.total(), t.y, batch.valid),
                norm=True,
            ),
        ]


GROUP = Paper()
