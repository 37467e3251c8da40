"""The feed-forward block split over its input's parts, by exact integrated gradients.

docs/method.md §5 (Kobayashi et al., ICLR 2024). The FF input of token i is a sum of parts,
``y_i = Σ_j y_ij + y_bias``; its pre-activation ``h = W₁ y + b₁`` splits the same way
(``h_j = W₁ y_ij``, the bias part taking b₁). Integrated gradients with a zero baseline in
the pre-activation space give each part its share of the non-linearity:

- element-wise φ (GELU, gelu_new, ReLU): ``FF_ij = W₂ (h_j ⊙ φ(h) / h)``, the exact limit of
  the Riemann sum (where h = 0, φ'(0));
- gated (SwiGLU), ``W_down (φ(g) ⊙ u)`` on the straight path from 0 in the (gate, up) space:
  ``B = ∫₀¹ φ(t·g) dt``, ``A = u ⊙ (φ(g) − B) / g`` and ``FF_ij = W_down (g_j ⊙ A + u_j ⊙ B)``,
  so that ``g ⊙ A + u ⊙ B = φ(g) ⊙ u`` exactly whatever the quadrature of B.

Completeness holds by construction: the parts and the bias part sum to the real FF output.
Every function here is linear in the part, so a token needs two parts only (its own and
the sum of the others): O(seq · d_ff) per layer, never a per-pair tensor.

B has no closed form for SiLU; Gauss–Legendre quadrature with :data:`QUADRATURE_NODES`
nodes leaves, measured in float64 against a 400-panel composite rule
(tests/test_ff_parts.py): |ΔB| ≤ 2e-13 for |g| ≤ 8, 9e-9 for |g| ≤ 20, 5e-6 for |g| ≤ 50
and 2e-4 for |g| ≤ 120 (relative to |B| ≈ |g|/2 there: below float32's 6e-8 up to |g| ≈
50). Gate pre-activations of real models rarely leave ±20.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from mixscope.mixing.block_tensors import FFParams, project

#: Gauss–Legendre nodes for B = ∫₀¹ φ(t·g) dt (see the module docstring for the error)
QUADRATURE_NODES = 16
#: [tokens, d_ff] elements per chunk of tokens: cache-sized on a CPU (the element-wise
#: passes run in cache), large on an accelerator (few kernel launches); bounds memory too
CHUNK_ELEMENTS = {"cpu": 1 << 20}
DEVICE_CHUNK_ELEMENTS = 1 << 24

Activation = Callable[[torch.Tensor], torch.Tensor]


def chunk_tokens(d_ff: int, device: torch.device) -> int:
    """How many tokens one chunk of the FF split takes."""
    return max(16, CHUNK_ELEMENTS.get(device.type, DEVICE_CHUNK_ELEMENTS) // d_ff)


@functools.cache
def gauss_legendre(nodes: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Nodes and weights of the ``nodes``-point Gauss–Legendre rule on [0, 1]."""
    import numpy as np

    x, w = np.polynomial.legendre.leggauss(nodes)
    return tuple(float(t) for t in (x + 1) / 2), tuple(float(v) for v in w / 2)


def slope_at_zero(act: Activation) -> float:
    """φ'(0) by a symmetric difference in float64 (exact to O(ε²) for a smooth φ; 1/2 for
    ReLU, whose one-sided slopes are 0 and 1): the limit of φ(h)/h where h = 0."""
    eps = 1e-6
    v = act(torch.tensor([eps, -eps], dtype=torch.float64))
    return float((v[0] - v[1]) / (2 * eps))


def secant(act: Activation, h: torch.Tensor, slope0: float) -> torch.Tensor:
    """φ(h) / h element-wise; φ'(0) where h = 0. [..., d_ff]."""
    return act(h).div_(h).nan_to_num_(nan=slope0)


def path_integral(act: Activation, g: torch.Tensor, nodes: int = QUADRATURE_NODES) -> torch.Tensor:
    """B = ∫₀¹ φ(t·g) dt element-wise (Gauss–Legendre): [..., d_ff]."""
    ts, ws = gauss_legendre(nodes)
    out = torch.zeros_like(g)
    scaled = torch.empty_like(g)
    for t, w in zip(ts, ws, strict=True):
        out.add_(act(torch.mul(g, t, out=scaled)), alpha=w)  # 3 passes per node
    return out


def gated_coefficients(
    act: Activation, g: torch.Tensor, u: torch.Tensor, slope0: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(A, B) of the gated split, each [..., d_ff]: a part (g_j, u_j) maps to
    ``g_j ⊙ A + u_j ⊙ B``. Where g = 0, (φ(g) − B) / g → φ'(0) / 2."""
    b = path_integral(act, g)
    a = act(g).sub_(b).div_(g).nan_to_num_(nan=slope0 / 2).mul_(u)
    return a, b


def context_pre_activations(
    ff: FFParams,
    pre: tuple[torch.Tensor, ...],
    own_pre: tuple[torch.Tensor, ...],
    scaled: torch.Tensor,
    inv_scale: torch.Tensor,
    const: torch.Tensor,
) -> tuple[torch.Tensor, ...]:
    """Σ_{j≠i} h_j per input projection, [tokens, d_ff] each: the real pre-activation
    minus the own part and the bias part ``W (scaled · inv_scale + const) + b`` (``scaled``,
    ``const`` [hidden]; ``inv_scale`` [tokens, 1]). By linearity the bias part costs two
    matrix–vector products, not a pass of every token through W."""
    out = []
    for h, own, w, b in zip(pre, own_pre, ff.inputs, ff.input_biases, strict=True):
        w_scaled = project(scaled, w, ff.transposed)  # [d_ff]
        w_const = project(const, w, ff.transposed).add_(b.to(const.dtype))  # [d_ff]
        context = torch.sub(h, own).sub_(w_const).addcmul_(inv_scale, w_scaled, value=-1)
        out.append(context)  # [tokens, d_ff]
    return tuple(out)


def split_output(
    ff: FFParams,
    pre: tuple[torch.Tensor, ...],
    parts: list[tuple[torch.Tensor, ...]],
) -> torch.Tensor:
    """The FF output of each part: ``[len(parts), tokens, hidden]`` (W₂ without b₂).

    ``pre``: the real pre-activations (``(h,)`` or ``(g, u)``, [tokens, d_ff] each), which
    fix the coefficients; ``parts``: each part's pre-activations, same layout (broadcastable).
    One W₂ product for every part at once.
    """
    stacked = torch.empty(len(parts), *pre[0].shape, dtype=pre[0].dtype, device=pre[0].device)
    if ff.gated:
        a, b = gated_coefficients(ff.act, pre[0], pre[1], ff.slope0)
        for k, (g_j, u_j) in enumerate(parts):
            torch.mul(g_j, a, out=stacked[k]).addcmul_(u_j, b)
    else:
        c = secant(ff.act, pre[0], ff.slope0)
        for k, (h_j,) in enumerate(parts):
            torch.mul(h_j, c, out=stacked[k])
    return project(stacked, ff.w_out, ff.transposed)  # [parts, tokens, hidden]
