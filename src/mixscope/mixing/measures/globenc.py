"""The ``globenc`` group: GlobEnc's whole-layer ratio N-Enc (Modarressi et al., NAACL 2022).

docs/method.md §5. The parts of the LN1 output, ``F_i(x_j)`` (the paper group's
ATTNRESLN-N parts), ride the second residual into LN2; GlobEnc leaves the feed-forward's
parts out and carries them through LN2's distributive split:

    G_ij = γ₂ ⊙ centre(F_i(x_j)) / s₂(i),     globenc_n = ratio(G)

with s₂ the std of the *real* LN2 input (FF output + x̃_i), which cancels in the ratio; γ₂
and the centring do not. Only post-LN blocks (BERT, RoBERTa, ELECTRA, DistilBERT, OPT-350m)
have an LN2 after the FF residual; in a pre-LN block the paper group's ATTNRESLN-N
already uses LN2, so the group does not apply there.

Exactness (eager path): Σ_j G_ij + γ₂ ⊙ centre(b₁ + FF_i) / s₂ + β₂ == the real LN2 output,
with Σ_j F_i(x_j) rebuilt from α and the per-head vectors, b₁ = γ₁ ⊙ centre(b_O) / s₁ + β₁
the LN1 output's bias part and FF_i = LN2 input − LN1 output the feed-forward's own output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mixscope.mixing.measures.base import BatchInfo, MeasureGroup, Residual

if TYPE_CHECKING:
    import torch

    from mixscope.mixing.chain import BlockChain


class GlobEnc(MeasureGroup):
    name = "globenc"
    needs = frozenset({"block_input", "values", "attention", "attn_out", "attn_norm"})
    verify_needs = frozenset({"ff_norm"})

    def compute(self, block: BlockChain, batch: BatchInfo) -> torch.Tensor:
        n2 = block.p.ff_norm
        assert n2 is not None
        # the LN1 output's parts F_i(x_j) through LN2's split (s₁ and s₂ cancel)
        ratio = block.attnresln.ratio_after(n2)  # [batch, seq]
        return ratio.masked_fill(batch.no_context, 0.0).unsqueeze(0)  # [1, batch, seq]

    def check(self, exact: BlockChain, batch: BatchInfo) -> list[Residual]:
        import torch

        from mixscope.mixing.block_tensors import norm_scale
        from mixscope.mixing.chain import Parts
        from mixscope.mixing.exactness import relative_error

        t, n2 = exact.t, exact.p.ff_norm
        assert n2 is not None and t.ff_norm_in is not None and t.ff_norm_out is not None
        # LN2's input: the LN1 output's parts (F_i(x_j) and LN1's bias part) plus the
        # feed-forward's output, which GlobEnc counts as bias (FF_i = LN2 input − LN1 output)
        ff = Parts(torch.zeros_like(t.y), None, t.ff_norm_in - t.y)
        parts = exact.attnresln.plus(ff).through_norm(n2, norm_scale(t.ff_norm_in, n2))
        return [
            Residual(
                "Σ_j G_ij + bias + FF − LN2 output",
                relative_error(parts.total(), t.ff_norm_out, batch.valid),
                norm=True,
            )
        ]


GROUP = GlobEnc()
