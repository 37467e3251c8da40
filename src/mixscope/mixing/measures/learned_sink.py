"""The ``learned_sink`` group: how much of each token's attention a learned sink takes.

docs/method.md §6. gpt-oss gives every head a learned sink: a logit σ_h that joins the
softmax with no value vector, so a row of the attention weights sums to 1 − π^h_i with

    π^h_i = exp(σ_h − LSE'_i),   LSE'_i = logaddexp(LSE_i, σ_h)

the sink's mass. The attention-sink literature measures sinks by weight on a real token
(the ``sink`` group's first position); here the sink is no token, and its mass is what
the token's new representation does *not* take from any token:

    lsink_w_i = mean over heads of π^h_i

On the fast path π comes from the kernel's log-sum-exp as α_ii does; on eager, from the
weights the model returns (the sink's column dropped): π = 1 − Σ_j α_ij. The sink adds no
part vector, so every norm-based measure is unchanged by it, and the paper's weight
measure counts the weight on other tokens only (paper.py). Applies only to families with
learned sinks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mixscope.mixing.measures.base import BatchInfo, MeasureGroup, Residual

if TYPE_CHECKING:
    import torch

    from mixscope.mixing.chain import BlockChain


class LearnedSink(MeasureGroup):
    name = "learned_sink"
    needs = frozenset({"attention"})

    def compute(self, block: BlockChain, batch: BatchInfo) -> torch.Tensor:  # noqa: ARG002
        t = block.t
        assert t.sink_mass is not None, "a family with learned sinks gives their mass"
        return t.sink_mass.to(t.values.dtype).mean(dim=1).unsqueeze(0)  # [1, batch, seq]

    def check(self, exact: BlockChain, batch: BatchInfo) -> list[Residual]:  # noqa: ARG002
        """No identity of its own: on eager, π is the weights' own row deficit (1 − Σ_j
        α_ij), and the sink adds no part vector, so the paper's identities (Σ_j r_ij +
        bias = z, rebuilt from these α) already hold the weights to the model's; the fast
        path's π is checked against eager's and the float64 brute force in the tests."""
        return []


GROUP = LearnedSink()
