"""The exactness identity of METHOD.md, checked on the real normalization output.

Σ_j F_i(x_j) + γ ⊙ centre(b_O) / s(z_i) + β == x̃_i, with every Σ_j rebuilt from the
captured attention weights and per-head vectors (not from the model's own sum), so a
wrong head layout, a missed bias or a misplaced residual fails the check.
"""

from __future__ import annotations

import torch

from mixscope.errors import ExactnessError
from mixscope.mixing.block import (
    BlockParams,
    BlockTensors,
    centre,
    norm_scale,
    per_head_transformed,
)

#: max |rebuilt − real| allowed, by the dtype the model computes in
TOLERANCE = {torch.float64: 1e-8, torch.float32: 1e-4, torch.bfloat16: 0.15, torch.float16: 2e-2}


def rebuilt_norm_output(t: BlockTensors, p: BlockParams) -> torch.Tensor:
    """Σ_j F_i(x_j) + bias terms: what the norm output must be. [batch, seq, hidden]."""
    f = per_head_transformed(t, p)  # [batch, heads, seq, hidden]
    summed = torch.einsum("bhij,bhjd->bid", t.alpha, f)  # Σ_j a_ij         [batch, seq, hidden]
    s = norm_scale(t.z, p)  # [batch, seq, 1]
    parts = p.gamma * centre(summed + t.x, p.norm_kind) / s  # Σ_j F_i(x_j)
    return parts + p.gamma * centre(p.b_out, p.norm_kind) / s + p.beta


def exactness_error(t: BlockTensors, p: BlockParams, valid: torch.Tensor) -> float:
    """Largest |rebuilt − real norm output| over the valid (non-padding) tokens."""
    diff = (rebuilt_norm_output(t, p) - t.y).abs().amax(dim=-1)  # [batch, seq]
    diff = diff[valid]
    return float(diff.max()) if diff.numel() else 0.0


def check_exactness(
    t: BlockTensors, p: BlockParams, valid: torch.Tensor, model_dtype: torch.dtype, layer: int
) -> float:
    """Raise :class:`ExactnessError` when the identity fails beyond the dtype's tolerance."""
    err = exactness_error(t, p, valid)
    tol = TOLERANCE.get(model_dtype, 1e-4)
    if not err <= tol:  # also catches NaN
        raise ExactnessError(
            f"exactness identity fails at layer {layer}: max |Σ_j F_i(x_j) + bias − LN output| "
            f"= {err:.3g} > {tol:g}; the decomposition does not rebuild this model's block"
        )
    return err
