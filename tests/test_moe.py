"""Mixtures of experts and learned attention sinks (docs/method.md §6).

Every group against the float64 brute force on the MoE families runs in
tests/test_measure_groups.py and tests/test_decoders.py (tiny_models.MOE); here: the fast
path's learned sinks against a float64 softmax with the sink's logit, their negative
control, and the float64 switch of the experts' kernel.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import mixscope
from mixscope.mixing import fast_attention as FA
from tiny_models import MOE

TEXTS = ["The cat sat on the mat.", "A longer sentence, to pad the other one a little."]


@pytest.mark.parametrize("padded", [False, True])
def test_learned_sinks_on_the_fast_path_match_a_float64_softmax(padded):
    """LSE' = logaddexp(LSE, σ_h), the output rescaled, α_ii and π = exp(σ_h − LSE')
    against softmax([scores, σ_h]) with the sink's column dropped; grouped heads."""
    torch.manual_seed(0)
    b, h, kv, n, d = 2, 4, 2, 9, 8
    q = torch.randn(b, h, n, d, dtype=torch.float64) * 2
    k, v = (torch.randn(b, kv, n, d, dtype=torch.float64) for _ in range(2))
    sinks = torch.randn(h, dtype=torch.float64) + 1.0
    keep = torch.ones(b, 1, n, n, dtype=torch.bool).tril()
    if padded:
        keep[1, :, :, :3] = False  # left padding: rows 0-2 of sequence 1 see no key
    module = torch.nn.Module()
    out, weights = FA.mixscope_attention_forward(
        module, q, k, v, keep, scaling=d**-0.5, is_causal=False, s_aux=sinks
    )
    kk, vv = (t.repeat_interleave(h // kv, 1) for t in (k, v))
    s = (q @ kk.transpose(-1, -2) * d**-0.5).masked_fill(~keep, float("-inf"))
    both = torch.cat([s, sinks.view(1, h, 1, 1).expand(b, h, n, 1)], dim=-1)
    probs = torch.softmax(both, dim=-1)
    alpha, pi = probs[..., :n], probs[..., n]  # [b, h, n, n], [b, h, n]
    rows = keep.expand(b, h, n, n).any(-1)  # query rows with a key
    assert (out.transpose(1, 2) - alpha @ vv)[rows].abs().max() <= 1e-12
    assert (weights.own - torch.diagonal(alpha, dim1=-2, dim2=-1))[rows].abs().max() <= 1e-12
    assert (weights.sink - pi)[rows].abs().max() <= 1e-12
    assert pi[rows].mean() > 0.1  # the sinks take a visible share: the test can fail


def test_dropping_the_sink_moves_the_measures_far_from_eager(tiny, monkeypatch):
    """Negative control: the fast path with the sink's mass dropped from the softmax (the
    output and α from the keys' log-sum-exp alone, as a kernel ignoring ``s_aux`` gives
    them) is far from eager's measures; with it, the same."""
    model, tok = tiny("gpt-oss", torch.float64)
    kw = dict(measures="all", dtype="float64")
    eager = mixscope.analyze((model, tok), TEXTS, attention="eager", **kw)
    fast = mixscope.analyze((model, tok), TEXTS, attention="fast", **kw)
    cols = [c for c in eager.column_names if c.endswith(("_n", "_w"))]
    assert "lsink_w" in cols
    same = max(np.abs(fast[c].to_numpy() - eager[c].to_numpy()).max() for c in cols)
    assert same <= 1e-9
    real = FA.with_learned_sinks

    def dropped(out, lse, sinks):
        return out, lse, real(out, lse, sinks)[2]  # π reported, the softmax without it

    monkeypatch.setattr(FA, "with_learned_sinks", dropped)
    wrong = mixscope.analyze((model, tok), TEXTS, attention="fast", **kw)
    diff = max(np.abs(wrong[c].to_numpy() - eager[c].to_numpy()).max() for c in cols)
    assert diff > 1e-2


def test_the_learned_sink_s_mass_is_what_the_weights_miss(tiny):
    """lsink_w = mean over heads of 1 − Σ_j α_ij, in (0, 1); the paper's weight measure
    counts tokens only: for the first token (nothing else to attend to) it is 0 and
    sink_w = 1 − lsink_w."""
    model, tok = tiny("gpt-oss", torch.float64)
    table = mixscope.analyze((model, tok), TEXTS[:1], measures="all", attention="eager")
    lsink = table["lsink_w"].to_numpy()
    assert (lsink > 0).all() and (lsink < 1).all()
    first = table["position"].to_numpy() == 0
    assert np.allclose(table["attn_w"].to_numpy()[first], 0.0)
    assert np.allclose(table["sink_w"].to_numpy()[first], 1 - lsink[first])


def test_a_float64_run_switches_the_experts_to_their_eager_kernel(tiny):
    """transformers' grouped experts kernel refuses float64: a float32 MoE model analysed
    in float64 (verify on) runs, its experts switched to eager for it."""
    from transformers import AutoModel

    from tiny_models import _config

    torch.manual_seed(0)
    model = AutoModel.from_config(_config("qwen3-moe"), attn_implementation="eager").eval()
    _, tok = tiny("qwen3-moe", torch.float32)
    assert model.config._experts_implementation not in (None, "eager")
    with pytest.raises(RuntimeError):  # the kernel itself, as the engine would meet it
        model.to(torch.float64)(torch.tensor([[1, 2, 3]]))
    table = mixscope.analyze((model, tok), TEXTS, dtype="float64", verify=True)
    assert table.num_rows > 0 and model.config._experts_implementation == "eager"
    assert math.isfinite(float(table["attnresln_n"].to_numpy().mean()))


# ---------------------------------------------------------------- the experts' split


def test_clamped_swiglu_coefficients_match_adaptive_quadrature():
    """gpt-oss's f = (clamp(u, ±L) + 1) · ψ(min(g, L)): A and B against scipy's adaptive
    quadrature of ∂f/∂g, ∂f/∂u split at the kinks (tests/reference_ff.py, written from the
    definition), on values below, between and beyond the clamps, g = 0 included; and
    completeness g·A + u·B = f exactly."""
    from mixscope.mixing.moe_parts import clamped_coefficients
    from reference_ff import _path_integrals, expert_partials

    alpha, limit = 1.702, 1.0
    g = torch.tensor([0.3, -2.0, 0.9, 1.7, 3.5, -0.4, 0.0, 0.0, 2.5, -5.0], dtype=torch.float64)
    u = torch.tensor([0.5, 0.2, -1.8, 2.9, -0.7, 4.0, 0.6, -3.0, 1.5, -1.2], dtype=torch.float64)
    a, b = clamped_coefficients(g, u, alpha, limit)
    f, dfdg, dfdu, kinks = expert_partials("gpt_oss", alpha, limit)
    for k in range(len(g)):
        gk, uk = float(g[k]), float(u[k])
        want_a, want_b = _path_integrals(dfdg, dfdu, gk, uk, kinks(gk, uk))
        assert abs(float(b[k]) - want_b) <= 1e-12, (gk, uk)
        assert abs(float(a[k]) - want_a) <= 1e-12, (gk, uk)
        assert abs(gk * float(a[k]) + uk * float(b[k]) - f(gk, uk)) <= 1e-14


def test_the_tiny_gpt_oss_experts_run_into_their_clamps(tiny):
    """The brute-force comparison covers the kinks: in the tiny gpt-oss (limit 1) many of
    the routed experts' gate and up pre-activations lie beyond the clamps."""
    model, tok = tiny("gpt-oss", torch.float64)
    seen = []
    experts = model.layers[0].mlp.experts
    handle = experts.register_forward_hook(lambda m, args, out: seen.append(args[0]))
    try:
        model(**tok(TEXTS[1], return_tensors="pt"))
    finally:
        handle.remove()
    gate_up = seen[0] @ experts.gate_up_proj[0] + experts.gate_up_proj_bias[0]
    g, u = gate_up[:, ::2], gate_up[:, 1::2]
    assert 0.05 < float((g > experts.limit).double().mean()) < 0.95
    assert 0.05 < float((u.abs() > experts.limit).double().mean()) < 0.95


@pytest.mark.parametrize("family", ["qwen3-moe", "gpt-oss"])
def test_gates_not_held_as_the_router_gave_them_fail_the_identity(tiny, family, monkeypatch):
    """Negative control: the experts' parts with the router's gates replaced (uniform over
    the token's top-k, as a split that recomputed its own gates would use) no longer add
    up to the MoE's output: verify names the FF's identity."""
    from mixscope.errors import ExactnessError
    from mixscope.mixing import moe_parts as MP

    model, tok = tiny(family, torch.float64)
    mixscope.analyze((model, tok), TEXTS, measures=["ff"], verify=True)  # held: it holds
    real = MP.moe_parts

    def uniform(moe, y, y_real, route, ff_out, **kw):
        gates, experts = route
        flat = torch.full_like(gates, 1 / gates.shape[1])
        return real(moe, y, y_real, (flat, experts), ff_out, **kw)

    monkeypatch.setattr(MP, "moe_parts", uniform)
    with pytest.raises(ExactnessError, match="FF output"):
        mixscope.analyze((model, tok), TEXTS, measures=["ff"], verify=True)


def test_dense_and_expert_layers_of_one_model_each_take_their_split(tiny):
    """Qwen3-MoE's mlp_only_layers: layer 1 a dense SwiGLU (FFParams), layer 2 experts
    (MoEParams); the ff group runs on both, and equals the brute force (test_measure_groups)."""
    from mixscope.mixing.engine import MixingEngine
    from mixscope.models.loading import load

    model, tok = tiny("qwen3-moe", torch.float32)
    engine = MixingEngine(load((model, tok)), measures=["ff"])
    assert engine.params[0].ff is not None and engine.params[0].moe is None
    assert engine.params[1].moe is not None and engine.params[1].ff is None
    table = mixscope.analyze((model, tok), TEXTS, measures=["ff"])
    for layer in (1, 2):
        values = table.filter(table["layer"].to_numpy() == layer)["ff_n"].to_numpy()
        assert np.isfinite(values).all() and values.max() > 0.05


# ---------------------------------------------------------------- a gpt-oss run end to end


def test_a_gpt_oss_run_s_sink_profile_and_figure_show_the_learned_sinks(tiny, tmp_path):
    """``mixscope run`` (in-process executor) on a tiny gpt-oss with every group: the
    stored ``lsink_w`` statistics, ``sink_profile``'s ``lsink_w`` equal to the detail
    rows' mean per layer, and the report's first-position figure draws it beside the
    weight and the norm."""
    import pyarrow.parquet as pq

    from mixscope.config import load_spec
    from mixscope.report import plots
    from mixscope.runtime.driver import run_job
    from mixscope.sql.named import run_query
    from mixscope.sql.views import connect

    model, tok = tiny("gpt-oss", torch.float32)
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(TEXTS * 3) + "\n", encoding="utf-8")
    spec = load_spec(
        None,
        {
            "model": str(tmp_path / "model"),
            "corpus.paths": [str(corpus)],
            "out": str(tmp_path / "out"),
            "runtime.executor": "local",
            "runtime.docs_per_shard": 2,
            "analysis.measures": "all",
            "output.detail": "full",
        },
    )
    summary = run_job(spec, show_progress=False)
    assert summary.status == "complete"
    rows = pq.read_table(tmp_path / "out" / "tokens", columns=["lsink_w"])["lsink_w"]
    per_layer = np.array(rows.to_pylist())  # [token, layer]
    profile = [
        dict(zip(("run_id", "layer", "category", "tokens", "sink_w", "sink_n", "gap",
                  "lsink_w"), r, strict=True))
        for r in run_query(connect(str(tmp_path / "out")), "sink_profile").fetchall()
    ]  # fmt: skip
    pooled = {r["layer"]: r for r in profile if r["category"] == "all"}
    assert sorted(pooled) == [1, 2]
    for layer, r in pooled.items():
        assert r["lsink_w"] == pytest.approx(per_layer[:, layer - 1].mean(), abs=1e-6)
        assert 0 < r["lsink_w"] < 1
    fig = plots.sink_profile(profile, "gpt-oss")
    lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines()}
    drawn = lines["all tokens: learned sink"].get_ydata()
    assert np.allclose(drawn, [100 * pooled[k]["lsink_w"] for k in (1, 2)])
    assert "all tokens: weight" in lines and "all tokens: norm" in lines


@pytest.mark.parametrize("attention", ["eager", "fast"])
@pytest.mark.parametrize("family", MOE)
def test_every_group_in_float32_against_the_float64_brute_force(tiny, family, attention):
    """The float32 model (the grouped experts kernel, as users run it) on padded batches,
    both sides: every applicable group within 1e-5 of the float64 brute force."""
    import reference_decoder as RD
    from mixscope.mixing.measures import GROUPS
    from mixscope.models.adapters import adapter_for_config

    model, tok = tiny(family, torch.float32)
    reference, _ = tiny(family, torch.float64)
    adapter = adapter_for_config(model.config)
    columns = [c.name for g in GROUPS.values() if g.unsupported(adapter) is None for c in g.columns]
    assert {"ff_n", "ffresln_n", "attnresln_n"} <= set(columns)
    layers = model.config.num_hidden_layers
    worst = 0.0
    for side in ("right", "left"):
        table = mixscope.analyze(
            (model, tok), TEXTS, measures="all", attention=attention, padding_side=side
        )
        doc_ids = table["doc_id"].to_numpy()
        for d, text in enumerate(TEXTS):
            ids = tok(text)["input_ids"]
            ref = RD.reference(reference, ids, layer_inputs=RD.capture(reference, ids).x)
            sel = doc_ids == d
            for name in columns:
                got = table[name].to_numpy()[sel].reshape(len(ids), layers).T
                want = np.stack([b.measures[name] for b in ref.layers])
                worst = max(worst, float(np.abs(got - want).max()))
    assert worst <= 1e-5, worst
