"""A brute-force float64 reference of the ``ff`` group (docs/method.md §5), by numerical
integration: no closed form.

Independent of ``mixscope``: every per-source part of the FF input ``y_ij`` is given as an
``[n, n, d]`` array (by tests/reference.py or tests/reference_decoder.py); each part is
carried through the feed-forward by integrated gradients with a zero baseline, taken as a
many-step midpoint Riemann sum of autograd gradients along the straight path (element-wise
FF: in the pre-activation space; gated FF: in the (gate, up) space), then through the
residual and the norm after it, and the ratios taken from the ``[n, n, d]`` arrays by the
textbook formula. Completeness (the parts and the bias part rebuild the FF output) is
asserted here, so an unconverged sum cannot pass silently.
"""

from __future__ import annotations

import numpy as np
import torch

#: midpoint steps of the Riemann sum; the sums at STEPS and 2·STEPS are combined by
#: Richardson extrapolation, (4 S(2M) − S(M)) / 3, which cancels the O(M⁻²) error term
STEPS = 512
_CHUNK = 256

ACTIVATIONS = {
    "gelu": torch.nn.functional.gelu,
    "gelu_new": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
    "silu": torch.nn.functional.silu,
    "relu": torch.nn.functional.relu,
}


def _ratio(P: np.ndarray) -> np.ndarray:
    """‖Σ_{j≠i} P_ij‖ / (‖Σ_{j≠i} P_ij‖ + ‖P_ii‖) for P [n, n, d] → [n]; 0 where both are 0."""
    n = P.shape[0]
    out = np.zeros(n)
    for i in range(n):
        c = np.linalg.norm(sum((P[i, j] for j in range(n) if j != i), np.zeros(P.shape[2])))
        o = np.linalg.norm(P[i, i])
        out[i] = c / (c + o) if c + o > 0 else 0.0
    return out


def _path_gradients(act: str, points: list[np.ndarray], gated: bool, steps: int) -> list:
    """∫₀¹ of the gradients at t · (endpoint) dt: [n, f] per input of the FF's non-linear
    part (element-wise: φ(h); gated: φ(g) ⊙ u, gradients for g and u): midpoint Riemann
    sums at ``steps`` and ``2 · steps``, Richardson-extrapolated."""
    coarse = _midpoint(act, points, gated, steps)
    fine = _midpoint(act, points, gated, 2 * steps)
    return [(4 * f - c) / 3 for f, c in zip(fine, coarse, strict=True)]


def _midpoint(act: str, points: list[np.ndarray], gated: bool, steps: int) -> list:
    """The midpoint Riemann sum of the path gradients, by autograd: [n, f] each."""
    phi = ACTIVATIONS[act]
    ends = [torch.from_numpy(p) for p in points]
    sums = [torch.zeros_like(e) for e in ends]
    ts = (torch.arange(steps, dtype=torch.float64) + 0.5) / steps
    for start in range(0, steps, _CHUNK):
        t = ts[start : start + _CHUNK].view(-1, 1, 1)
        xs = [(t * e).requires_grad_(True) for e in ends]  # [chunk, n, f]
        out = phi(xs[0]) * xs[1] if gated else phi(xs[0])
        grads = torch.autograd.grad(out.sum(), xs)  # elementwise: the Jacobian's diagonal
        for s, g in zip(sums, grads, strict=True):
            s += g.sum(dim=0)
    return [(s / steps).numpy() for s in sums]


def ff_measures(
    y_parts: np.ndarray,
    y_bias: np.ndarray,
    res_parts: np.ndarray,
    res_bias: np.ndarray,
    mlp: list[tuple[np.ndarray, np.ndarray]],
    act: str,
    norm_gamma: np.ndarray | None,
    norm_centre: bool,
    *,
    branch=None,
    multiplier: float = 1.0,
    steps: int = STEPS,
) -> dict[str, np.ndarray]:
    """ff_n, ffres_n, ffresln_n of every token, and the rebuilt FF output and stream.

    ``y_parts`` [n, n, d]: the FF input's part of source j for token i; ``y_bias`` [n, d]
    its bias part. ``res_parts`` / ``res_bias``: what the residual around the FF carries.
    ``mlp``: [(W₁ [d, f], b₁), (W₂ [f, d], b₂)] or, gated, [(W_g, b_g), (W_u, b_u),
    (W_down, b_down)], row convention. ``norm_gamma``/``norm_centre``: the norm after the
    FF's residual (its shared scale cancels in the ratio; None: no norm stands there).
    ``branch``: a norm inside the FF branch (Gemma, OLMo-2), with ``gamma``, ``beta``,
    ``centre(v)`` and ``scale(v)``: the FF's parts through it, with the real output's scale.
    ``multiplier``: the FF branch's output scaled before the residual add (Granite).
    """
    gated = len(mlp) == 3
    ins, (w_out, b_out) = mlp[:-1], mlp[-1]
    part_pre = [y_parts @ w for w, _ in ins]  # per input projection [n, n, f]
    bias_pre = [y_bias @ w + b for w, b in ins]  # [n, f]
    totals = [p.sum(axis=1) + b for p, b in zip(part_pre, bias_pre, strict=True)]  # [n, f]
    if gated:
        dg, du = _path_gradients(act, totals, True, steps)
        inner = part_pre[0] * dg[:, None, :] + part_pre[1] * du[:, None, :]  # [n, n, f]
        inner_bias = bias_pre[0] * dg + bias_pre[1] * du
        real = ACTIVATIONS[act](torch.from_numpy(totals[0])).numpy() * totals[1]
    else:
        (dh,) = _path_gradients(act, totals, False, steps)
        inner = part_pre[0] * dh[:, None, :]
        inner_bias = bias_pre[0] * dh
        real = ACTIVATIONS[act](torch.from_numpy(totals[0])).numpy()
    ff = inner @ w_out  # FF_ij [n, n, d]
    ff_bias = inner_bias @ w_out + b_out  # [n, d]
    ff_real = real @ w_out + b_out
    scale = max(1.0, float(np.abs(ff_real).max()))
    assert np.abs(ff.sum(axis=1) + ff_bias - ff_real).max() <= 1e-9 * scale, "not converged"
    ff_n = _ratio(ff)  # on the raw FF parts (docs/method.md §6), before any branch norm
    if branch is not None:  # γ ⊙ centre(FF_ij) / s(FF_i), the real output's s held fixed
        s_ff = branch.scale(ff_real)  # [n, 1]
        ff = branch.gamma * branch.centre(ff) / s_ff[:, :, None]
        ff_bias = branch.gamma * branch.centre(ff_bias) / s_ff + branch.beta
    ff, ff_bias = ff * multiplier, ff_bias * multiplier
    P = ff + res_parts  # [n, n, d]
    if norm_gamma is None:
        N = P
    else:
        N = norm_gamma * (P - P.mean(axis=2, keepdims=True) if norm_centre else P)
    return {
        "ff_n": ff_n,
        "ffres_n": _ratio(P),
        "ffresln_n": _ratio(N),
        "_ff_out": ff_real,  # FF(y), for the caller's own consistency checks
        "_stream": P.sum(axis=1) + ff_bias + res_bias,  # the norm's input, rebuilt
    }
