"""Exactness identities: what a group's parts rebuild, against the model's real tensors.

Every group checks that its scopes, taken from the block's chain (mixing/chain.py) with
Σ_j a_ij rebuilt by :func:`attention_sum` from the captured attention weights and per-head
vectors (not from the model's own sum), add up to the real tensors: the paper group's
(docs/method.md §2) Σ_j r_ij + bias == z_i (the real input of the norm) and
Σ_j F_i(x_j) + bias == x̃_i (its real output), so a wrong head layout, a missed bias, a
misplaced residual or a norm read at the wrong place fails the check.

Errors are measured relative to the size of what is compared, ``|Δ| / max(1, max|·|)``
per token, so a real model's large residual stream (GPT-2's outlier dimensions) is held to
the same float precision as a tiny one.
"""

from __future__ import annotations

import torch

from mixscope.errors import ExactnessError
from mixscope.mixing.block_tensors import BlockParams, BlockTensors, per_head_transformed
from mixscope.mixing.measures.base import Residual

#: max |rebuilt − real| allowed, by the dtype the model computes in
TOLERANCE = {torch.float64: 1e-8, torch.float32: 1e-4, torch.bfloat16: 0.15, torch.float16: 2e-2}


def attention_sum(t: BlockTensors, p: BlockParams) -> torch.Tensor:
    """Σ_j a_ij rebuilt from α and the per-head vectors: [batch, seq, hidden]."""
    f = per_head_transformed(t, p)  # [batch, heads, seq, hidden]
    return torch.einsum("bhij,bhjd->bid", t.full_alpha(), f)


def relative_error(rebuilt: torch.Tensor, real: torch.Tensor, valid: torch.Tensor) -> float:
    """The largest ``|rebuilt − real| / max(1, max|real|)`` of a token over the valid ones."""
    scale = real.abs().amax(dim=-1).clamp_min(1.0)  # [batch, seq]
    diff = ((rebuilt - real).abs().amax(dim=-1) / scale)[valid]
    return float(diff.max()) if diff.numel() else 0.0


def check_residuals(
    residuals: list[Residual],
    model_dtype: torch.dtype,
    layer: int,
    norm_dtype: torch.dtype | None = None,
) -> float:
    """Raise :class:`ExactnessError` when a residual exceeds its dtype's tolerance; the
    largest residual otherwise.

    ``norm_dtype``: the dtype the norm really computes in when it differs from the model's
    (Llama's RMSNorm computes in float32 even in a float64 model): a residual marked
    ``norm`` is held to that dtype's tolerance, the others to the model's.
    """
    tol = TOLERANCE.get(model_dtype, 1e-4)
    norm_tol = max(tol, TOLERANCE.get(norm_dtype, tol)) if norm_dtype is not None else tol
    for r in residuals:
        limit = norm_tol if r.norm else tol
        if not r.error <= limit:  # also catches NaN
            raise ExactnessError(
                f"exactness identity fails at layer {layer}: max relative |{r.what}| = "
                f"{r.error:.3g} > {limit:g}; the decomposition does not rebuild this model's block"
            )
    return max((r.error for r in residuals), default=0.0)
