"""The ``sink`` group: how much each token draws from the sequence's first position.

docs/method.md §5. The first position ([CLS], BOS, or the first token) is where the
"attention sink" literature finds most of the attention weight; Kobayashi et al. (2020)
showed that weight and norm disagree there. Per token i (position 0 included, where a_i0
is its own part), with the attention block's parts ``a_ij = Σ_h α^h_ij f^h(x_j)``:

    sink_w_i = ᾱ_i0                                   (head mean of α^h_i0)
    sink_n_i = ‖a_i0‖ / (‖a_i0‖ + ‖Σ_{j≠0} a_ij‖)

"Position 0" is the first *real* token: with left padding it is not index 0, and the
results do not depend on the padding. O(n): α^h_i0 comes from q_i · k_0 and the fused
kernel's log-sum-exp (fast path) or a column of the full weights (eager), and
``a_i0 = Σ_h α^h_i0 f^h(x_0)`` needs one [heads, hidden] matrix per sequence. Every family.

Exactness (eager path): a_i0 (from the first token's values, as computed here) + Σ_{j≠0}
a_ij (from the full α and the per-head vectors) + b_O == the real attention output: a
wrong first position, head layout or value slice fails it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mixscope.mixing.measures.base import BatchInfo, MeasureGroup, Residual

if TYPE_CHECKING:
    import torch

    from mixscope.mixing.chain import BlockChain


class Sink(MeasureGroup):
    name = "sink"
    needs = frozenset({"values", "attention", "attn_out"})

    def compute(self, block: BlockChain, batch: BatchInfo) -> torch.Tensor:
        import torch

        from mixscope.mixing.attention_parts import first_attention_vector, norm_ratio

        t, p = block.t, block.p
        assert t.alpha_first is not None
        norm = lambda v: torch.linalg.vector_norm(v, dim=-1)  # noqa: E731  [batch, seq]
        a_first = first_attention_vector(t, p, batch.first_position)  # a_i0 [b, seq, hidden]
        n_first = norm(a_first)
        rest = torch.sub(t.attn_out, p.b_out).sub_(a_first)  # Σ_{j≠0} a_ij  [b, seq, hidden]
        weight = t.alpha_first.to(a_first.dtype).mean(dim=1)  # ᾱ_i0   [batch, seq]
        ratio = norm_ratio(n_first, norm(rest))
        # a token with nothing else to attend to draws everything from position 0 (itself):
        # its weight exactly 1, less a learned sink's mass where the family has one
        own = 1.0 if t.sink_mass is None else 1.0 - t.sink_mass.to(weight.dtype).mean(dim=1)
        weight = torch.where(batch.no_context, own, weight)
        ratio = ratio.masked_fill(batch.no_context, 1.0)
        return torch.stack([weight, ratio])  # [measure, batch, seq]

    def check(self, exact: BlockChain, batch: BatchInfo) -> list[Residual]:
        import torch

        from mixscope.mixing.attention_parts import first_attention_vector
        from mixscope.mixing.block_tensors import per_head_transformed
        from mixscope.mixing.exactness import relative_error

        t, p = exact.t, exact.p
        alpha = t.full_alpha().clone()  # [batch, heads, seq, seq]
        rows = torch.arange(alpha.shape[0], device=alpha.device)
        alpha[rows, :, :, batch.first_position] = 0.0  # the other sources only
        f = per_head_transformed(t, p)  # [batch, heads, seq, hidden]
        rest = torch.einsum("bhij,bhjd->bid", alpha, f)  # Σ_{j≠0} a_ij  [batch, seq, hidden]
        rebuilt = first_attention_vector(t, p, batch.first_position) + rest + p.b_out
        return [
            Residual(
                "a_i0 + Σ_{j≠0} a_ij + b_O − attention output",
                relative_error(rebuilt, t.attn_out, batch.valid),
            )
        ]


GROUP = Sink()
