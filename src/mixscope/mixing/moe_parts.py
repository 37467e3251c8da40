"""A mixture of experts split over its input's parts (docs/method.md §6).

``FF(y_i) = Σ_{e∈T(i)} w_ie FF_e(y_i)``: the router's gates ``w_ie`` for token i's top-k
experts are held constant (as a norm's ``s(z_i)`` is), and each expert's output is split
by the exact integrated gradients of §5 from its own real pre-activations, ``g = W_g y +
b_g`` and ``u = W_u y + b_u``: a part ``y_j`` maps to ``W_down (g_j ⊙ A + u_j ⊙ B)`` with
``A = ∫₀¹ ∂f/∂g(tg, tu) dt`` and ``B = ∫₀¹ ∂f/∂u(tg, tu) dt``, so that ``g ⊙ A + u ⊙ B =
f(g, u)`` (f(0, 0) = 0); the experts' biases (b_g, b_u through A, B; b_down) belong to the
bias part. Completeness holds exactly: the parts and the bias part rebuild the real
output.

- SwiGLU experts (Qwen3-MoE, OLMoE, Mixtral), ``f = φ(g) · u``: mixing/ff_parts.py's
  coefficients.
- gpt-oss's clamped SwiGLU, ``f = (clamp(u, −L, L) + 1) · ψ(min(g, L))``, ``ψ(x) = x σ(αx)``:
  on the path t·(g, u) the clamps bite at ``t = L/g`` (g > L) and ``t = L/|u|`` (|u| > L).
  ``∂f/∂u = ψ(min(tg, L))`` while ``|tu| < L`` (0 after), so ``B = ∫₀^a ψ(tg) dt + (T_u −
  a) ψ(L)`` with ``T_u = min(1, L/|u|)`` and ``a = min(T_u, L/g)``: Gauss–Legendre on the
  smooth piece, exact on the constant one (piecewise between the kinks). Then ``A = (f −
  u ⊙ B) / g`` by completeness (its limit where g = 0).

Per token only its own part, the others' sum and the bias part are carried, through the
k experts it was routed to (recomputed from the captured FF input): memory linear in
tokens, no per-pair tensor.
"""

from __future__ import annotations

import torch

from mixscope.mixing.block_tensors import MoEParams
from mixscope.mixing.chain import Parts
from mixscope.mixing.ff_parts import QUADRATURE_NODES, gated_coefficients, gauss_legendre


def _psi(x: torch.Tensor, alpha: float) -> torch.Tensor:
    return x * torch.sigmoid(alpha * x)


def clamped_coefficients(
    g: torch.Tensor, u: torch.Tensor, alpha: float, limit: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(A, B) of gpt-oss's clamped SwiGLU at pre-activations (g, u), each [..., d_ff]."""
    big_u = u.abs() > limit
    t_u = torch.where(big_u, limit / u.abs(), torch.ones_like(u))  # where ∂f/∂u ends
    t_g = torch.where(g > limit, limit / g, torch.ones_like(g))  # where g′ stops growing
    a = torch.minimum(t_u, t_g)
    smooth = torch.zeros_like(g)
    for t, w in zip(*gauss_legendre(QUADRATURE_NODES), strict=True):
        smooth.add_(_psi(a * t * g, alpha), alpha=w)
    psi_l = float(_psi(torch.tensor(limit, dtype=torch.float64), alpha))
    b = a * smooth + (t_u - a).clamp_min(0.0) * psi_l
    f = (u.clamp(-limit, limit) + 1) * _psi(g.clamp(max=limit), alpha)
    # g = 0: ∂f/∂g = (clamp(tu) + 1) ψ′(0) = (clamp(tu) + 1) / 2 all along the path
    mean_clamp = torch.where(big_u, u.sign() * (limit - limit**2 / (2 * u.abs())), u / 2)
    at_zero = (mean_clamp + 1) / 2
    safe = torch.where(g == 0, torch.ones_like(g), g)
    coef_a = torch.where(g == 0, at_zero, (f - u * b) / safe)
    return coef_a, b


def _coefficients(
    moe: MoEParams, g: torch.Tensor, u: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    if moe.act is None:
        return clamped_coefficients(g, u, moe.alpha, moe.limit)
    return gated_coefficients(moe.act, g, u, moe.slope0)


def moe_parts(
    moe: MoEParams,
    y: Parts,  # the FF input's parts of some tokens, rows [tokens, hidden]
    y_real: torch.Tensor,  # [tokens, hidden] the real FF input (the router's)
    route: tuple[torch.Tensor, torch.Tensor],  # gates, experts [tokens, k]
    ff_out: torch.Tensor,  # [tokens, hidden] the real output, which the parts complete
    *,
    explicit: bool = False,
) -> tuple[Parts, torch.Tensor]:
    """(the output's parts: own FF_ii, others' Σ_{j≠i} FF_ij and the bias part; the bias
    part as computed). By completeness the others' part is the real output minus the own
    and bias parts, which spares its pass through the down projections; ``explicit``
    computes it through them too, and the bias part of the Parts is then the real output's
    remainder (the exactness check compares the sum of the computed parts)."""
    y = y.applied()
    dtype = y_real.dtype
    own = torch.zeros_like(y_real)
    context = torch.zeros_like(y_real)
    bias = torch.zeros_like(y_real)
    # no bias part reaches the experts (Llama-like blocks: no b_O, no β) and they have no
    # biases: its output is 0 (then a third fewer products)
    expert_biases = (moe.gate_b, moe.up_b, moe.down_b)
    bias_free = not bool(y.bias.any()) and not any(bool(b.any()) for b in expert_biases)
    y_bias = y.bias.expand_as(y_real)
    gates, experts = route
    for e in experts.unique().tolist():
        rows, slots = (experts == e).nonzero(as_tuple=True)  # token-slots routed to e
        m = rows.shape[0]
        weight = gates[rows, slots].to(dtype).unsqueeze(-1)  # [m, 1]
        b_g, b_u = moe.gate_b[e].to(dtype), moe.up_b[e].to(dtype)
        inputs = [y_real[rows], y.own[rows]] + ([] if bias_free else [y_bias[rows]])
        stacked = torch.cat(inputs)  # [k·m, hidden]: the real input, own, bias parts (k = 2 | 3)
        g_all, u_all = moe.split(stacked @ moe.gate_up[e].to(dtype))  # [k·m, d_ff], no biases
        g, u = (g_all[:m], u_all[:m]) if bias_free else (g_all[:m] + b_g, u_all[:m] + b_u)
        a, b = _coefficients(moe, g, u)  # from the real pre-activations
        k = len(inputs)
        # each part's (g_j ⊙ A + u_j ⊙ B), the expert's biases left out: linear in the part
        inner = g_all.reshape(k, m, -1) * a + u_all.reshape(k, m, -1) * b  # [k, m, d_ff]
        if not bias_free:
            inner[2] += b_g * a + b_u * b  # the bias part takes the expert's own biases
        if explicit:  # the others' part through the down projection too
            inner[0] -= inner[1]
            if not bias_free:
                inner[0] -= inner[2] - b_g * a - b_u * b
            chosen = inner
        else:
            chosen = inner[1:]  # own (and bias): the others' part by completeness
        out = chosen @ moe.down[e].to(dtype)  # [k | k − 1, m, hidden]
        out *= weight
        if explicit:
            context.index_add_(0, rows, out[0])
            out = out[1:]
        own.index_add_(0, rows, out[0])
        expert_bias = moe.down_b[e].to(dtype) * weight  # [m, hidden]
        bias.index_add_(0, rows, expert_bias if bias_free else out[1].add_(expert_bias))
    if not explicit:
        context = torch.sub(ff_out, own).sub_(bias)
        return Parts(own, context, bias), bias
    remainder = torch.sub(ff_out, own).sub_(context)
    return Parts(own, context, remainder), bias
