"""The measure groups (``mixing/measures/``) against the float64 brute force, and selection.

Every group the registry has, on every family's tiny random model (post-LN encoders:
tests/reference.py; pre-LN decoders and OPT-350m's post-LN: tests/reference_decoder.py,
which materialise every per-source vector) and the real MiniLM; eager and fast attention;
batches padded on the right and on the left, compared with each sequence's own unpadded
reference, so the numbers cannot depend on the padding. Then each group's exactness
identity under ``verify`` (and a negative control that it catches a wrong input), and
the selection rules: ``all``, refusal of a group that does not apply, unknown names.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import mixscope
import reference as R
import reference_decoder as RD
from mixscope.errors import ExactnessError, MixscopeError
from mixscope.mixing.measures import GROUPS, measure_set
from mixscope.models.adapters import adapter_for_config
from tiny_models import DECODER_FAMILIES, FAMILIES, MOE, PRE_LN_ENCODERS

TEXTS = [
    "The cat sat on the mat.",
    "A somewhat longer sentence with quite a few more tokens in it, to pad the others.",
    ("A dog barked loudly at night.", "The neighbours were not amused."),
    "Short one.",
]
TOL = 1e-6  # float64 engine vs float64 brute force
OBSERVED: dict[str, float] = {}


def _note(key: str, value: float) -> None:
    OBSERVED[key] = max(OBSERVED.get(key, 0.0), value)
    print(f"{key}: {value:.3g}")


def _ids(tok, doc) -> tuple[list[int], list[int]]:
    enc = tok(*((doc,) if isinstance(doc, str) else doc))
    return enc["input_ids"], enc.get("token_type_ids") or [0] * len(enc["input_ids"])


_REFS: dict = {}


def _reference(model, tok, family: str, doc):
    """The brute-force reference of one unpadded document (cached): name → [layer, n]."""
    key = (family, doc)
    if key not in _REFS:
        ids, types = _ids(tok, doc)
        if family in DECODER_FAMILIES + PRE_LN_ENCODERS:  # pre-LN blocks
            ref = RD.reference(model, ids, layer_inputs=RD.capture(model, ids).x)
        else:
            ref = R.reference(model, ids, types)
        # the measures every layer has (Qwen3-MoE's dense first layer has the dense FF's)
        names = set.intersection(*(set(b.measures) for b in ref.layers))
        _REFS[key] = {m: np.stack([b.measures[m] for b in ref.layers]) for m in names}
    return _REFS[key]


def _per_sequence(table, columns, layers: int) -> dict[int, dict[str, np.ndarray]]:
    """doc_id → column → [layer, n] (single-segment documents)."""
    doc = table["doc_id"].to_numpy()
    assert (table["segment"].to_numpy() == 0).all()
    out = {}
    for d in np.unique(doc):
        sel = doc == d
        n = int(sel.sum()) // layers
        out[int(d)] = {c: table[c].to_numpy()[sel].reshape(n, layers).T for c in columns}
    return out


def _compare(model, tok, family: str, attention: str, side: str) -> float:
    adapter = adapter_for_config(model.config)
    table = mixscope.analyze(
        (model, tok),
        TEXTS,
        measures="all",
        attention=attention,
        padding_side=side,
        batch_size=len(TEXTS),
        dtype="float64",
    )
    expected = tuple(
        c.name for g in GROUPS.values() if g.unsupported(adapter) is None for c in g.columns
    )
    assert tuple(table.column_names[-len(expected) :]) == expected
    layers = int(table["layer"].to_numpy().max())
    worst = 0.0
    for d, got in _per_sequence(table, expected, layers).items():
        ref = _reference(model, tok, family, TEXTS[d])
        for name in expected:
            diff = np.abs(got[name] - ref[name])
            assert np.isfinite(got[name]).all(), name
            assert diff.max() <= TOL, (
                f"{family}/{attention}/{side} doc {d} {name}: off by {diff.max():.3g} at "
                f"(layer, pos) {np.unravel_index(diff.argmax(), diff.shape)}"
            )
            worst = max(worst, float(diff.max()))
    return worst


@pytest.mark.parametrize("attention", ["eager", "fast"])
@pytest.mark.parametrize("family", FAMILIES + DECODER_FAMILIES + PRE_LN_ENCODERS)
def test_every_group_against_the_brute_force(tiny, family, attention):
    model, tok = tiny(family, torch.float64)
    for side in ("right", "left"):
        _note(f"groups/{family}/{attention}", _compare(model, tok, family, attention, side))


def test_every_group_on_minilm(minilm_path):
    """The real MiniLM (float64 copy): the new groups' values are not degenerate there."""
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(minilm_path)
    model = AutoModel.from_pretrained(minilm_path, dtype=torch.float64).eval()
    for attention in ("eager", "fast"):
        _note("groups/minilm", _compare(model, tok, "minilm", attention, "left"))
    table = mixscope.analyze((model, tok), TEXTS, measures="all", dtype="float64")
    sink_w, sink_n = table["sink_w"].to_numpy(), table["sink_n"].to_numpy()
    assert 0 < sink_w.mean() < 1 and 0 < sink_n.mean() < 1
    # weight and norm disagree on the first position (Kobayashi et al. 2020)
    assert abs(sink_w.mean() - sink_n.mean()) > 0.01


@pytest.mark.parametrize("family", FAMILIES + DECODER_FAMILIES + PRE_LN_ENCODERS)
def test_verify_checks_every_groups_identity(tiny, family):
    model, tok = tiny(family, torch.float64)
    table = mixscope.analyze((model, tok), TEXTS, measures="all", verify=True, batch_size=4)
    assert table.num_rows > 0


def test_sink_identity_catches_weights_of_the_wrong_position(tiny, monkeypatch):
    """Negative control: α_i0 read one column too far, the values at the right position."""
    import mixscope.mixing.capture as capture

    model, tok = tiny("bert", torch.float64)
    real = capture._first_column
    monkeypatch.setattr(capture, "_first_column", lambda alpha, first: real(alpha, first + 1))
    with pytest.raises(ExactnessError, match="a_i0"):
        mixscope.analyze((model, tok), TEXTS, measures=["sink"], verify=True)


def test_globenc_identity_catches_a_wrong_norm(tiny, monkeypatch):
    """Negative control: γ₂ of LN2 replaced by LN1's."""
    from mixscope.mixing.points import ModelPoints

    model, tok = tiny("bert", torch.float64)
    real = ModelPoints.params

    def swapped(self, idx, needs, heads, kv_heads):
        p = real(self, idx, needs, heads, kv_heads)
        p.ff_norm.gamma = p.norm.gamma
        return p

    monkeypatch.setattr(ModelPoints, "params", swapped)
    with pytest.raises(ExactnessError, match="LN2"):
        mixscope.analyze((model, tok), TEXTS, measures=["globenc"], verify=True)


def test_groups_alone_equal_groups_together(tiny):
    """Sharing between groups changes no number: each group alone gives the same values
    as all of them at once (the paper's parts reused by globenc, in place)."""
    for family in ("roberta", "gpt-oss"):
        _alone_equals_together(*tiny(family, torch.float64))


def _alone_equals_together(model, tok) -> None:
    adapter = adapter_for_config(model.config)
    together = mixscope.analyze((model, tok), TEXTS, measures="all", attention="fast")
    applies = [n for n, g in GROUPS.items() if g.unsupported(adapter) is None]
    assert len(applies) >= 3  # roberta: all but learned_sink; gpt-oss: paper, sink, learned_sink
    for name in applies:
        alone = mixscope.analyze((model, tok), TEXTS, measures=[name], attention="fast")
        for col in measure_set((name,)).columns:
            assert np.array_equal(alone[col].to_numpy(), together[col].to_numpy()), col


def test_default_is_the_paper_group(tiny):
    model, tok = tiny("bert", torch.float64)
    table = mixscope.analyze((model, tok), TEXTS[:1])
    assert tuple(table.column_names[9:]) == mixscope.MEASURES == measure_set(("paper",)).columns


def test_a_group_that_does_not_apply_is_refused_and_all_skips_it(tiny):
    model, tok = tiny("gpt2", torch.float64)
    with pytest.raises(MixscopeError, match=r"globenc.*post-LN") as err:
        mixscope.analyze((model, tok), TEXTS[:1], measures=["paper", "globenc"])
    assert "\n" not in str(err.value)
    table = mixscope.analyze((model, tok), TEXTS[:1], measures="all")
    assert "globenc_n" not in table.column_names and "sink_n" in table.column_names


def test_a_path_model_is_refused_before_its_weights_load(tiny, tmp_path, monkeypatch):
    model, tok = tiny("gpt2", torch.float64)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    import mixscope.api as api

    def no_work(*_a, **_k):  # pragma: no cover - must not be reached
        raise AssertionError("the model was loaded before the refusal")

    monkeypatch.setattr(api, "load", no_work)
    with pytest.raises(MixscopeError, match="'globenc' does not apply"):
        mixscope.analyze(str(tmp_path), TEXTS[:1], measures="globenc")


@pytest.mark.parametrize(
    ("value", "message"),
    [("nope", "unknown group 'nope'"), ([], "at least one group"), ("paper,,x", "'x'")],
)
def test_unknown_groups_are_one_line_errors(tiny, value, message):
    model, tok = tiny("bert", torch.float64)
    with pytest.raises(MixscopeError, match=message):
        mixscope.analyze((model, tok), TEXTS[:1], measures=value)


def _hooks_left(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_no_hook_is_left_when_the_forward_fails(tiny, monkeypatch):
    """A long-lived actor's model keeps no hook after a failed batch (the hooks live in a
    context manager around the forward)."""
    from mixscope.mixing.engine import MixingEngine
    from mixscope.models.loading import load

    model, tok = tiny("bert", torch.float64)
    loaded = load((model, tok))
    engine = MixingEngine(loaded, measures="all")
    before = _hooks_left(model)
    ids = torch.tensor([tok("Some text here.")["input_ids"]])
    mask = torch.ones_like(ids)
    ff = model.encoder.layer[1].intermediate

    def boom(*_a, **_k):
        raise RuntimeError("forward failed in the middle")

    monkeypatch.setattr(ff, "forward", boom)
    with pytest.raises(RuntimeError, match="in the middle"):
        engine.run(ids, mask)
    assert _hooks_left(model) == before
    monkeypatch.undo()
    out = engine.run(ids, mask)  # the same engine still works afterwards
    assert out.measures.shape[2] == len(engine.measure_set.columns)
    assert _hooks_left(model) == before


def test_no_hook_is_left_when_registration_fails(tiny, monkeypatch):
    import mixscope.mixing.capture as capture
    from mixscope.mixing.engine import MixingEngine
    from mixscope.models.loading import load

    model, tok = tiny("bert", torch.float64)
    engine = MixingEngine(load((model, tok)), measures="all")
    before = _hooks_left(model)
    real, calls = capture.Capture._register, []

    def failing(self, *args):
        calls.append(1)
        if len(calls) == 7:  # part-way through the second block
            raise RuntimeError("cannot register")
        return real(self, *args)

    monkeypatch.setattr(capture.Capture, "_register", failing)
    ids = torch.tensor([tok("Some text here.")["input_ids"]])
    with pytest.raises(RuntimeError, match="cannot register"):
        engine.run(ids, torch.ones_like(ids))
    assert len(calls) == 7 and _hooks_left(model) == before


@pytest.mark.parametrize("family", [*FAMILIES, *DECODER_FAMILIES, *PRE_LN_ENCODERS])
def test_the_forward_ends_after_the_last_block_it_reads(tiny, family):
    """The forward pass stops once the last block is finished (capture.ForwardDone): with
    the default groups nothing reads the last block's feed-forward output where the block
    finishes before it (post-LN encoders: at LN1; pre-LN decoders: at LN2), so that module
    never runs; with ``ff`` it must. Every layer's measures are there either way, equal to
    those of the run that goes to the end, and no hook is left."""
    from mixscope.mixing.engine import MixingEngine
    from mixscope.models.loading import load

    model, tok = tiny(family, torch.float64)
    loaded = load((model, tok))
    a = loaded.adapter
    last = loaded.model.get_submodule(a.layers)[-1]
    ff_out = last.get_submodule(a.moe_experts if family in MOE else a.ff_out)
    calls: list[int] = []
    handle = ff_out.register_forward_hook(lambda *_: calls.append(1))
    ids = torch.tensor([tok("Some text here, a little longer.")["input_ids"]])
    mask = torch.ones_like(ids)
    before = _hooks_left(model)
    try:
        default = MixingEngine(loaded).run(ids, mask)
        stops_early = not a.parallel_residual  # a parallel block's norm is the next input's
        assert calls == ([] if stops_early else [1])
        calls.clear()
        with_ff = MixingEngine(loaded, measures="all").run(ids, mask)
        assert calls == [1]  # the ff group reads the last feed-forward: the forward runs on
    finally:
        handle.remove()
    assert _hooks_left(model) == before - 1
    n = default.measures.shape[2]  # the default groups' columns come first under "all"
    assert default.measures.shape[1] == with_ff.measures.shape[1] == model.config.num_hidden_layers
    assert torch.isfinite(default.measures).all()
    assert torch.equal(default.measures, with_ff.measures[:, :, :n])


def test_selection_from_the_spec_flags_and_set(tmp_path):
    from mixscope.config import spec_from_flags
    from mixscope.errors import SpecError

    corpus = tmp_path / "c.txt"
    corpus.write_text("x\n")
    base = {"corpus.paths": [str(corpus)]}
    assert spec_from_flags(None, (), base).analysis.measures == ("paper",)
    flags = {**base, "analysis.measures": ["paper,sink"]}  # --measures paper,sink
    assert spec_from_flags(None, (), flags).analysis.measures == ("paper", "sink")
    sets = ("analysis.measures=[paper, globenc]",)
    assert spec_from_flags(None, sets, base).analysis.measures == ("paper", "globenc")
    assert spec_from_flags(None, ("measures=all",), base).analysis.measures == ("all",)
    with pytest.raises(SpecError, match=r"analysis\.measures: unknown group 'nope'"):
        spec_from_flags(None, ("analysis.measures=[paper, nope]",), base)


@pytest.mark.parametrize(("measures", "computed"), [("paper", False), ("paper,sink", True)])
def test_first_position_weights_only_where_a_group_reads_them(tiny, measures, computed):
    """α_i0 costs the fast kernel a q · k pass per head: computed only for the sink group."""
    from mixscope.mixing.engine import MixingEngine
    from mixscope.mixing.fast_attention import FastWeights
    from mixscope.models.loading import load

    model, tok = tiny("llama", torch.float64)
    engine = MixingEngine(load((model, tok)), attention="fast", measures=measures)
    seen: list = []
    attn = model.get_submodule("layers.0.self_attn")
    handle = attn.register_forward_hook(lambda _m, _i, out: seen.append(out[1]))
    try:
        ids = torch.tensor([tok("Some text here.")["input_ids"]])
        engine.run(ids, torch.ones_like(ids))
    finally:
        handle.remove()
    assert isinstance(seen[0], FastWeights) and (seen[0].first is not None) == computed


@pytest.mark.parametrize(
    "family", ["bert", "llama", "gpt-neox", "opt-post", "gemma3", "olmo2", "granite"]
)
def test_the_chain_s_fused_ratios_are_its_scopes_ratios(tiny, family, monkeypatch):
    """BlockChain.attention_ratios: the in-place pass down the chain (the paper group's hot
    path; norms inside the branch and multipliers too) gives the same bits as the ratios
    of the cached scopes."""
    from mixscope.mixing.block_tensors import BlockTensors
    from mixscope.mixing.chain import BlockChain
    from mixscope.mixing.engine import MixingEngine

    model, tok = tiny(family, torch.float64)
    blocks = []
    real = MixingEngine._finish

    def keep(self, capture, idx, store, out, pairs):
        blocks.append((dict(store), self.params[idx]))
        return real(self, capture, idx, store, out, pairs)

    monkeypatch.setattr(MixingEngine, "_finish", keep)
    mixscope.analyze((model, tok), TEXTS, batch_size=4)
    assert blocks
    for store, p in blocks:
        captured = {k: store[k] for k in ("x", "values", "alpha_self", "attn_out", "z", "y")}
        t = BlockTensors(**captured, extra=store.get("extra"))
        fused = BlockChain(t, p).attention_ratios()
        chain = BlockChain(t, p)
        scopes = (chain.attn.ratio(), chain.attnres.ratio(), chain.attnresln.ratio())
        assert chain.attention_ratios()[2] is not None  # the cached path now
        for a, b in zip(fused, scopes, strict=True):
            assert torch.equal(a, b)
