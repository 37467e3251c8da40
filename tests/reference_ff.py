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
    return _through_residual_and_norm(
        ff, ff_bias, ff_real, res_parts, res_bias, norm_gamma, norm_centre, branch, multiplier
    )


def _through_residual_and_norm(
    ff, ff_bias, ff_real, res_parts, res_bias, norm_gamma, norm_centre, branch, multiplier
) -> dict[str, np.ndarray]:
    """The FF's parts (``ff`` [n, n, d], ``ff_bias`` [n, d]; ``ff_real`` the FF output they
    must rebuild) through the branch norm, the residual and the norm after it: the ratios."""
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


# ---------------------------------------------------------------- mixtures of experts


def _path_integrals(dfdg, dfdu, g: float, u: float, kinks: list[float]) -> tuple[float, float]:
    """A = ∫₀¹ ∂f/∂g(tg, tu) dt, B = ∫₀¹ ∂f/∂u(tg, tu) dt by adaptive quadrature, split at
    the kinks of the path (where a clamp starts to bite)."""
    from scipy.integrate import quad

    points = [k for k in kinks if 0.0 < k < 1.0] or None
    opts = dict(points=points, epsabs=1e-14, epsrel=1e-13, limit=200)
    a = quad(lambda t: dfdg(t * g, t * u), 0.0, 1.0, **opts)[0]
    b = quad(lambda t: dfdu(t * g, t * u), 0.0, 1.0, **opts)[0]
    return a, b


def expert_partials(kind: str, alpha: float = 1.702, limit: float = 7.0):
    """(f, ∂f/∂g, ∂f/∂u, kinks(g, u)) of an expert's gated non-linearity f(g, u), written
    from its definition: SwiGLU φ(g) · u (φ = SiLU), or gpt-oss's clamped form
    (clamp(u, −L, L) + 1) · g′ σ(α g′), g′ = min(g, L)."""
    sig = lambda x: 1.0 / (1.0 + np.exp(-x))  # noqa: E731
    if kind == "silu":
        silu = lambda g: g * sig(g)  # noqa: E731
        dsilu = lambda g: sig(g) * (1 + g * (1 - sig(g)))  # noqa: E731
        return (
            lambda g, u: silu(g) * u,
            lambda g, u: dsilu(g) * u,
            lambda g, u: silu(g),
            lambda g, u: [],
        )
    psi = lambda g: g * sig(alpha * g)  # noqa: E731
    dpsi = lambda g: sig(alpha * g) * (1 + alpha * g * (1 - sig(alpha * g)))  # noqa: E731
    clamp = lambda u: min(max(u, -limit), limit)  # noqa: E731
    return (
        lambda g, u: (clamp(u) + 1) * psi(min(g, limit)),
        lambda g, u: (clamp(u) + 1) * dpsi(g) if g < limit else 0.0,
        lambda g, u: psi(min(g, limit)) if abs(u) < limit else 0.0,
        lambda g, u: [limit / g if g > limit else 2.0, limit / abs(u) if abs(u) > limit else 2.0],
    )


def moe_measures(
    y_parts: np.ndarray,
    y_bias: np.ndarray,
    res_parts: np.ndarray,
    res_bias: np.ndarray,
    moe,
    norm_gamma: np.ndarray | None,
    norm_centre: bool,
    *,
    branch=None,
    multiplier: float = 1.0,
) -> dict[str, np.ndarray]:
    """The ``ff`` group of a mixture of experts (docs/method.md §6): each token's router
    gates for its top-k experts held constant, each expert's part by integrated gradients
    of its own f(g, u) from its real pre-activations, ``FF_ij = Σ_e w_ie W_down^e (g_j A +
    u_j B)``, expert biases in the bias part. ``moe``: tests/reference_decoder.py's
    ``Moe`` (router, experts, act)."""
    n, _, d = y_parts.shape
    f, dfdg, dfdu, kinks = expert_partials(
        "silu" if moe.act == "silu" else "gpt_oss", moe.alpha, moe.limit
    )
    y_total = y_parts.sum(axis=1) + y_bias  # [n, d]
    ff = np.zeros((n, n, d))
    ff_bias = np.zeros((n, d))
    ff_real = np.zeros((n, d))
    for i, chosen in enumerate(moe.gates(y_total)):
        for e, gate in chosen.items():
            wg, bg, wu, bu, wd, bd = moe.experts[e]
            g, u = y_total[i] @ wg + bg, y_total[i] @ wu + bu  # [F] the real pre-activations
            pairs = list(zip(g, u, strict=True))
            ab = [_path_integrals(dfdg, dfdu, gk, uk, kinks(gk, uk)) for gk, uk in pairs]
            a, b = np.array(ab).T  # [F] each
            ff[i] += gate * ((y_parts[i] @ wg) * a + (y_parts[i] @ wu) * b) @ wd
            inner_bias = (y_bias[i] @ wg + bg) * a + (y_bias[i] @ wu + bu) * b
            ff_bias[i] += gate * (inner_bias @ wd + bd)
            ff_real[i] += gate * (np.array([f(gk, uk) for gk, uk in pairs]) @ wd + bd)
    return _through_residual_and_norm(
        ff, ff_bias, ff_real, res_parts, res_bias, norm_gamma, norm_centre, branch, multiplier
    )
