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
    from mixscope.models.adapters import Adapter


class GlobEnc(MeasureGroup):
    name = "globenc"
    title = "N-Enc, the whole encoder layer up to LN2 (GlobEnc, Modarressi et al., NAACL 2022)"
    columns = (Column("globenc_n", "GLOBENC-N", "#756bb1"),)
    needs = frozenset({"block_input", "values", "attention", "attn_out", "attn_norm"})
    verify_needs = frozenset({"ff_norm"})

    def unsupported(self, adapter: Adapter) -> str | None:
        if adapter.placement != "post" or adapter.ff_norm is None:
            return (
                f"it needs a post-LN block (LN2 after the feed-forward); {adapter.family} "
                "is pre-LN, where the paper's ATTNRESLN-N already reads LN2"
            )
        return None

    def compute(
        self, t: BlockTensors, p: BlockParams, batch: BatchInfo, work: Workspace
    ) -> torch.Tensor:
        import torch

        from mixscope.mixing.measures.paper import LN_PARTS
        from mixscope.mixing.ratios import norm_ratio

        assert p.ff_norm is not None
        shared = work.shared.get(LN_PARTS)
        # F_i's context and own parts times s₁ (s₁ and s₂ cancel in the ratio)
        ln_context, ln_self = shared if shared is not None else _ln_parts(t, p)
        norm = lambda v: torch.linalg.vector_norm(v, dim=-1)  # noqa: E731  [batch, seq]
        kind, gamma = p.ff_norm.norm_kind, p.ff_norm.gamma

        def split(v: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
            """γ₂ ⊙ centre(v) into a new buffer (or ``out``): the paper group's parts stay
            as they are for any group after this one."""
            if kind == "rms":
                return torch.mul(v, gamma, out=out)
            return torch.sub(v, v.mean(dim=-1, keepdim=True), out=out).mul_(gamma)

        g = split(ln_context)  # Σ_{j≠i} G_ij · s₂ / s₁    [batch, seq, hidden]
        n_context = norm(g)
        g_self = split(ln_self, out=g)  # G_ii · s₂ / s₁, in the same buffer
        ratio = norm_ratio(n_context, norm(g_self))  # [batch, seq]
        return ratio.masked_fill(batch.no_context, 0.0).unsqueeze(0)  # [1, batch, seq]

    def check(self, t: BlockTensors, p: BlockParams, batch: BatchInfo) -> list[Residual]:
        from mixscope.mixing.block_tensors import centre, norm_scale
        from mixscope.mixing.exactness import rebuilt_norm_output, relative_error

        n2 = p.ff_norm
        assert n2 is not None and t.ff_norm_in is not None and t.ff_norm_out is not None
        s1 = norm_scale(t.z, p)  # [batch, seq, 1]
        bias1 = p.gamma * centre(p.b_out, p.norm_kind) / s1 + p.beta  # LN1's bias part
        parts1 = rebuilt_norm_output(t, p) - bias1  # Σ_j F_i(x_j), from α   [b, seq, hidden]
        s2 = norm_scale(t.ff_norm_in, n2)  # [batch, seq, 1]
        ff = t.ff_norm_in - t.y  # the feed-forward's output (and its bias)
        split = lambda v: n2.gamma * centre(v, n2.norm_kind) / s2  # noqa: E731
        rebuilt = split(parts1) + split(bias1 + ff) + n2.beta
        return [
            Residual(
                "Σ_j G_ij + bias + FF − LN2 output",
                relative_error(rebuilt, t.ff_norm_out, batch.valid),
                norm=True,
            )
        ]


def _ln_parts(t: BlockTensors, p: BlockParams) -> tuple[torch.Tensor, torch.Tensor]:
    """(γ ⊙ centre(Σ_{j≠i} r_ij), γ ⊙ centre(r_ii)) when the paper group did not run."""
    import torch

    from mixscope.mixing.block_tensors import centre_
    from mixscope.mixing.ratios import self_attention_vector

    a_self = self_attention_vector(t, p)  # [batch, seq, hidden]
    context = torch.sub(t.attn_out, p.b_out).sub_(a_self)  # [batch, seq, hidden]
    own = a_self.add_(t.own_residual())  # [batch, seq, hidden]
    return (
        centre_(context, p.norm_kind).mul_(p.gamma),
        centre_(own, p.norm_kind).mul_(p.gamma),
    )


GROUP = GlobEnc()
