"""The ``distance`` group: how far each layer reaches, by norm beside weight.

docs/method.md §5e. The paper's ratios say *how much* of a token's new representation comes
from context, not *from how far*. With the ATTN parts ``a_ij = Σ_h α^h_ij f^h(x_j)`` and
the head-mean weights ᾱ_ij, for token i, its sources j ≠ i at distance δ = |i − j| (i − j
in a causal model) and the buckets ``B_0 = {1}, B_1 = {2, 3}, …, B_b = {2^b .. 2^(b+1) − 1}``,
the last (B_11 by default) open-ended:

    dist_n_b = Σ_{j∈B_b} ‖a_ij‖ / Σ_{j≠i} ‖a_ij‖     (Kobayashi et al. 2020's per-pair norms)
    dist_w_b = Σ_{j∈B_b} ᾱ_ij  / Σ_{j≠i} ᾱ_ij

Each row sums to 1 over b; 0 where a token has no context (a causal sequence's first).
The two disagree where sinks and frequent tokens take weight but carry little norm. The
bucket count is ``analysis.distance_buckets`` (2–12; with K < 12 the last bucket opens at
2^(K−1) and the columns past it hold 0). Every family, eager and fast: per-pair norms
from the per-token [heads, heads] Gram matrices, α recomputed block by block from q, k and
the kernel's log-sum-exp on the fast path (mixing/distance.py): memory O(seq · block).

Exactness (eager path): the Gram-form per-pair norms equal the norms of the materialised
per-source vectors a_ij; the buckets partition the sources (their sums equal Σ_{j≠i} of
the materialised norms and of the weights); the shares sum to 1 (0 without context).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mixscope.mixing.measures.base import BatchInfo, MeasureGroup, Residual
from mixscope.registry import DISTANCE_BUCKETS

if TYPE_CHECKING:
    import torch

    from mixscope.mixing.chain import BlockChain

#: the group's buckets (its stored columns: fixed, so their codes are stable)
BUCKETS = DISTANCE_BUCKETS


class Distance(MeasureGroup):
    name = "distance"
    needs = frozenset({"values", "attention"})

    def compute(self, block: BlockChain, batch: BatchInfo) -> torch.Tensor:
        import torch

        from mixscope.mixing.distance import distance_sums, shares

        t = block.t
        sums = distance_sums(t.alpha, t.scores, t.values, block.p, batch.buckets)  # [2, K, b, s]
        out = shares(sums).to(t.values.dtype)  # [2 (norm, weight), K, batch, seq]
        if batch.buckets < BUCKETS:  # the columns past the last bucket: 0
            out = torch.nn.functional.pad(out, (0, 0, 0, 0, 0, BUCKETS - batch.buckets))
        out = out.masked_fill(batch.no_context | ~batch.valid, 0.0)
        return out.reshape(2 * BUCKETS, *out.shape[2:])  # [measure, batch, seq]

    def check(self, exact: BlockChain, batch: BatchInfo) -> list[Residual]:
        from mixscope.mixing.distance_check import distance_residuals

        return distance_residuals(exact, batch, self.compute(exact, batch))


GROUP = Distance()
