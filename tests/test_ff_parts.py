"""The feed-forward split's pieces (mixing/ff_parts.py) and the ``ff`` group's contract.

The values themselves are checked against the float64 brute force on every family in
tests/test_measure_groups.py; here: the quadrature's error (the figures the module states),
the h = 0 and g = 0 limits, the gated identity, and that the exactness identity catches a
wrong activation and a wrong placement.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import mixscope
from mixscope.errors import ExactnessError
from mixscope.mixing.ff_parts import (
    QUADRATURE_NODES,
    gated_coefficients,
    path_integral,
    secant,
    slope_at_zero,
)
from mixscope.mixing.measures import GROUPS
from mixscope.models.adapters import ADAPTERS, BERT

silu = torch.nn.functional.silu
TEXTS = ["The cat sat on the mat.", "A dog barked loudly at night, and nobody slept well."]


def _fine_integral(g: torch.Tensor, panels: int = 400, order: int = 20) -> torch.Tensor:
    """∫₀¹ silu(t·g) dt by a composite Gauss–Legendre rule (400 panels × 20 nodes)."""
    x, w = np.polynomial.legendre.leggauss(order)
    out = torch.zeros_like(g)
    for p in range(panels):
        lo, width = p / panels, 1 / panels
        for xi, wi in zip(x, w, strict=True):
            out += wi * width / 2 * silu((lo + width * (xi + 1) / 2) * g)
    return out


@pytest.mark.parametrize(("limit", "bound"), [(8, 1e-12), (20, 2e-8), (50, 1e-5), (120, 3e-4)])
def test_quadrature_error_is_what_the_module_states(limit, bound):
    g = torch.linspace(-limit, limit, 4001, dtype=torch.float64)
    err = float((path_integral(silu, g) - _fine_integral(g)).abs().max())
    print(f"|ΔB| for |g| <= {limit} with {QUADRATURE_NODES} nodes: {err:.2e}")
    assert err <= bound


def test_path_integral_is_exact_for_a_linear_and_a_quadratic_activation():
    g = torch.linspace(-30, 30, 101, dtype=torch.float64)
    assert torch.allclose(path_integral(lambda v: 3 * v, g), 1.5 * g, atol=1e-12)
    assert torch.allclose(path_integral(lambda v: v * v, g), g * g / 3, atol=1e-10)


@pytest.mark.parametrize(
    "act",
    [torch.nn.GELU(), torch.nn.GELU(approximate="tanh"), torch.nn.SiLU(), torch.nn.ReLU()],
)
def test_the_limits_where_the_pre_activation_is_zero(act):
    assert slope_at_zero(act) == pytest.approx(0.5, abs=1e-9)
    h = torch.tensor([0.0, 1e-3, -2.0, 3.0], dtype=torch.float64)
    c = secant(act, h, slope_at_zero(act))
    assert torch.isfinite(c).all() and c[0] == pytest.approx(0.5, abs=1e-9)
    assert torch.allclose(c[1:] * h[1:], act(h[1:]), atol=1e-15)


def test_gated_coefficients_rebuild_the_gated_product_exactly():
    gen = torch.Generator().manual_seed(0)
    g = 6 * torch.randn(1000, generator=gen, dtype=torch.float64)
    g[:10] = 0.0  # the g = 0 limit
    u = torch.randn(1000, generator=gen, dtype=torch.float64)
    a, b = gated_coefficients(silu, g, u, 0.5)
    assert torch.isfinite(a).all()
    assert torch.allclose(g * a + u * b, silu(g) * u, atol=1e-14, rtol=0)
    assert torch.allclose(a[:10], u[:10] * 0.25)  # φ'(0) / 2 · u


def test_every_family_names_its_feed_forward():
    for adapter in ADAPTERS:
        assert GROUPS["ff"].unsupported(adapter) is None, adapter.family
    bare = dataclasses.replace(BERT, ff_in=None)
    assert "no feed-forward modules" in GROUPS["ff"].unsupported(bare)


def test_the_identity_catches_a_wrong_activation(tiny, monkeypatch):
    """Negative control: GELU read as ReLU (φ(h)/h wrong where h < 0)."""
    from mixscope.mixing.block_weights import BlockWeights

    model, tok = tiny("bert", torch.float64)
    real = BlockWeights.ff

    def relu(self, *args):
        return dataclasses.replace(real(self, *args), act=torch.relu)

    monkeypatch.setattr(BlockWeights, "ff", relu)
    with pytest.raises(ExactnessError, match="FF output"):
        mixscope.analyze((model, tok), TEXTS, measures=["ff"], verify=True)


def test_the_identity_catches_a_wrong_placement(tiny, monkeypatch):
    """Negative control: GPT-NeoX's parallel FF read as sequential (the FF input from the
    attention block's parts instead of N_in(x))."""
    from mixscope.mixing.block_weights import BlockWeights

    model, tok = tiny("gpt-neox", torch.float64)
    real = BlockWeights.ff

    def sequential(self, *args):
        return dataclasses.replace(real(self, *args), placement="pre", input_norm=None)

    monkeypatch.setattr(BlockWeights, "ff", sequential)
    with pytest.raises(ExactnessError, match="FF"):
        mixscope.analyze((model, tok), TEXTS, measures=["ff"], verify=True)


def test_a_parallel_feed_forward_mixes_nothing(tiny):
    """GPT-NeoX's parallel residual: the FF reads the token alone, ff_n is 0 exactly, and
    the FF's own part moves the later scopes away from the attention block's."""
    model, tok = tiny("gpt-neox", torch.float64)
    table = mixscope.analyze((model, tok), TEXTS, measures="paper,ff", verify=True)
    assert (table["ff_n"].to_numpy() == 0).all()
    assert not np.allclose(table["ffres_n"].to_numpy(), table["attnres_n"].to_numpy())


def test_float32_agrees_with_float64(tiny):
    """A float32 model (statistics in float32) against its float64 copy: the subtraction
    that yields the context part loses nothing visible."""
    out = {}
    for dtype in (torch.float32, torch.float64):
        model, tok = tiny("llama-gqa2", dtype)
        table = mixscope.analyze((model, tok), TEXTS, measures="ff", attention="fast")
        out[dtype] = np.stack([table[c].to_numpy() for c in ("ff_n", "ffres_n", "ffresln_n")])
    diff = np.abs(out[torch.float32] - out[torch.float64]).max()
    print(f"float32 vs float64: {diff:.2e}")
    assert diff < 1e-4


def test_the_bias_free_shortcut_changes_no_number(tiny, monkeypatch):
    """Mistral has no b_O, β or b₁: its FF's context part is the real output minus the own
    part (one W₂ pass fewer); forced through the general path it gives the same values."""
    from mixscope.mixing import block_weights
    from mixscope.mixing.engine import MixingEngine
    from mixscope.models.loading import load

    model, tok = tiny("mistral", torch.float64)
    assert all(p.ff.bias_free for p in MixingEngine(load((model, tok)), measures="ff").params)
    short = mixscope.analyze((model, tok), TEXTS, measures="ff", attention="fast")
    monkeypatch.setattr(block_weights, "ff_bias_free", lambda *_a: False)
    general = mixscope.analyze((model, tok), TEXTS, measures="ff", attention="fast")
    for c in ("ff_n", "ffres_n", "ffresln_n"):
        assert np.allclose(short[c].to_numpy(), general[c].to_numpy(), atol=1e-7), c


def test_chunks_of_tokens_change_no_number(tiny, monkeypatch):
    """Every step of the split is per token: a batch in chunks of 16 tokens gives the
    values of one chunk (the tiny models fit in one)."""
    import mixscope.mixing.ff_parts as ff_parts

    model, tok = tiny("gpt2", torch.float64)
    whole = mixscope.analyze((model, tok), TEXTS, measures="ff", attention="fast")
    monkeypatch.setitem(ff_parts.CHUNK_ELEMENTS, "cpu", 1)  # the 16-token floor
    chunked = mixscope.analyze((model, tok), TEXTS, measures="ff", attention="fast")
    for c in ("ff_n", "ffres_n", "ffresln_n"):
        assert np.allclose(whole[c].to_numpy(), chunked[c].to_numpy(), rtol=0, atol=1e-12), c
