"""Decoders (GPT-2, GPT-NeoX/Pythia, GPT-J, Llama/Mistral/Qwen2/Qwen3/SmolLM3, Phi-3, StableLM,
OPT, Gemma-2/3, OLMo-2) against the float64 brute-force reference of
tests/reference_decoder.py.

Every family's tiny random model (all parameters redrawn, biases non-zero where the family
has them, norm gains away from 1), GPT-NeoX with and without the parallel residual, Llama
with 4, 2 and 1 key/value heads; the engine in float64 (1e-5) and float32 (1e-4), left and
right padding, per-pair maps, the exactness identity (``verify=True``), first-token zeros,
GPT-2's missing pad token, and the out-of-memory batch halving. The reference validates
itself against the real model first. ``pytest -s`` prints the largest differences seen.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import mixscope
import reference_decoder as RD
from mixscope.errors import MixscopeError
from mixscope.mixing.batches import run_batches
from mixscope.mixing.engine import MixingEngine
from mixscope.models.adapters import adapter_for_config
from mixscope.models.loading import load
from tiny_models import DECODER_FAMILIES, PRE_LN_ENCODERS

#: every block the decoder reference rebuilds: pre-LN decoders and encoders (ModernBERT)
PRE_LN = DECODER_FAMILIES + PRE_LN_ENCODERS
#: the families whose attention is causal (EmbeddingGemma's decoder block attends both ways)
CAUSAL = tuple(f for f in DECODER_FAMILIES if f != "embeddinggemma")

TOL = {"float64": 1e-5, "float32": 1e-4}

TEXTS = [
    "The cat sat on the mat.",
    "A somewhat longer sentence with quite a few more tokens in it, to pad the others.",
    ("A dog barked loudly at night.", "The neighbours were not amused."),
    "Short one.",
]
# how closely the float64 model matches an exact float64 forward: transformers computes the
# softmax, rotary tables and LlamaRMSNorm in float32 for every family here but GPT-2
SELF_CHECK_TOL = {"gpt2": 1e-12}
# Gemma computes each of its six RMSNorms per layer (q/k norms and the sandwich) in float32
# even in a float64 model, and scales the embeddings: the own forward drifts further over
# its three layers (1.4e-5 seen at the third)
SELF_CHECK_TOL["gemma3"] = SELF_CHECK_TOL["gemma2"] = SELF_CHECK_TOL["embeddinggemma"] = 5e-5
SIDES = ("right", "left")

OBSERVED: dict[str, float] = {}


def _note(key: str, value: float) -> None:
    OBSERVED[key] = max(OBSERVED.get(key, 0.0), value)
    print(f"{key}: {value:.3g}")


# ---------------------------------------------------------------- helpers

_REFS: dict = {}


def _ids(tok, doc) -> list[int]:
    return tok(*((doc,) if isinstance(doc, str) else doc))["input_ids"]


def _reference(tiny, family: str, doc, own_forward: bool = False):
    """The float64 reference of one document (cached per family and text).

    By default each block starts from the float64 model's real layer input (see
    ``reference_decoder.reference``); ``own_forward`` chains the reference's own blocks.
    """
    key = (family, doc, own_forward)
    if key not in _REFS:
        model, tok = tiny(family, torch.float64)
        ids = _ids(tok, doc)
        inputs = None if own_forward else RD.capture(model, ids).x
        _REFS[key] = RD.reference(model, ids, layer_inputs=inputs)
    return _REFS[key]


def _per_sequence(table, layers: int) -> dict[int, np.ndarray]:
    """doc_id → measures [layer, measure, n] (documents are single-segment here)."""
    cols = {c: table[c].to_numpy() for c in ("doc_id", "segment", "position", "layer")}
    assert (cols["segment"] == 0).all()
    out = {}
    for doc in np.unique(cols["doc_id"]):
        sel = cols["doc_id"] == doc
        n = int(sel.sum()) // layers
        assert np.array_equal(cols["position"][sel].reshape(n, layers)[:, 0], np.arange(n))
        assert (cols["layer"][sel].reshape(n, layers) == np.arange(1, layers + 1)).all()
        m = np.stack([table[k].to_numpy()[sel].reshape(n, layers) for k in RD.MEASURES])
        out[int(doc)] = m.transpose(2, 0, 1).astype(np.float64)  # [layer, measure, n]
    return out


def _analyze(model, tok, texts, dtype: str, side: str, **kw):
    return mixscope.analyze((model, tok), texts, dtype=dtype, padding_side=side, **kw)


# ---------------------------------------------------------------- the reference itself


@pytest.mark.parametrize("family", PRE_LN)
def test_reference_matches_model(tiny, family):
    """The reference's own forward rebuilds the model: layer inputs, α, z, norm outputs."""
    model, tok = tiny(family, torch.float64)
    tol = SELF_CHECK_TOL.get(family, 1e-5)
    for doc in (TEXTS[0], TEXTS[2]):
        ids = _ids(tok, doc)
        ref, real = _reference(tiny, family, doc, own_forward=True), RD.capture(model, ids)
        n = len(ids)
        for li, b in enumerate(ref.layers):
            for name, mine, theirs in (
                ("x", b.x, real.x[li]),
                ("alpha", b.alpha, real.alpha[li]),
                ("z", b.z, real.z[li]),
                ("norm output", b.y, real.y[li]),
                ("rebuilt vs real norm output", b.rebuilt, real.y[li]),
            ):
                err = float(np.abs(mine - theirs).max())
                assert err <= tol, f"layer {li + 1} {name}: {err:.3g}"
            # the identity in the reference's own float64 arithmetic
            assert np.abs(b.rebuilt - b.y).max() <= 1e-10
            # rows sum to 1, or to 1 − π with a learned sink (gpt-oss), 0 < π < 1
            rows = b.alpha.sum(axis=-1)
            if family == "gpt-oss":
                assert (rows < 1 - 1e-6).all() and (rows > 0).all()
                assert np.allclose((1 - rows).mean(axis=0), b.measures["lsink_w"])
            else:
                assert np.allclose(rows, 1.0)
            if family in CAUSAL:
                future = np.triu(np.ones((n, n), dtype=bool), 1)
                assert (b.alpha[:, future] == 0).all()  # causal: exactly 0 for j > i
                assert np.array_equal(b.measures["attn_n"][:1], [0.0])  # first: no context
            _note(f"reference-vs-model/{family}", float(np.abs(b.rebuilt - real.y[li]).max()))
        i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        if family == "mistral":  # sliding window of 6: key j visible to i only if j > i - 6
            assert (ref.layers[0].alpha[:, j <= i - 6] == 0).all()
        if family == "modernbert":  # the local layer: |i − j| <= 2 both ways; global: all
            assert (ref.layers[1].alpha[:, np.abs(i - j) > 2] == 0).all()
            assert (ref.layers[0].alpha > 0).all()
        if family == "embeddinggemma":  # sliding layers |i − j| < 5 both ways; global: all
            assert (ref.layers[0].alpha[:, np.abs(i - j) >= 5] == 0).all()
            assert (ref.layers[1].alpha > 0).all()


def test_parallel_residual_needs_the_mlp_in_the_own_part(tiny):
    """Negative control: leaving m_i out of F_i(x_i) breaks the identity on Pythia's block."""
    model, tok = tiny("gpt-neox", torch.float64)
    ids = _ids(tok, TEXTS[0])
    right = RD.reference(model, ids)
    wrong = RD.reference(model, ids, mlp_in_self=False)
    for good, bad in zip(right.layers, wrong.layers, strict=True):
        assert np.abs(good.rebuilt - good.y).max() <= 1e-10
        assert np.abs(bad.rebuilt - bad.y).max() > 1e-2
    # and the engine's attnresln_n is the right one
    table = _analyze(model, tok, [TEXTS[0]], "float64", "right")
    got = _per_sequence(table, len(right.layers))[0]
    k = RD.MEASURES.index("attnresln_n")
    assert np.abs(got[:, k] - right.measures()[:, k]).max() <= TOL["float64"]
    assert np.abs(got[:, k] - wrong.measures()[:, k]).max() > 1e-3


# ---------------------------------------------------------------- engine vs reference


def _compare(tiny, family: str, dtype: str, side: str) -> float:
    model, tok = tiny(family, getattr(torch, dtype))
    table = _analyze(model, tok, TEXTS, dtype, side, batch_size=len(TEXTS))
    layers = len(RD.Reference(model).layers)
    got = _per_sequence(table, layers)
    assert sorted(got) == list(range(len(TEXTS)))
    worst = 0.0
    for doc_id, doc in enumerate(TEXTS):
        want = _reference(tiny, family, doc).measures()
        assert got[doc_id].shape == want.shape
        assert np.isfinite(got[doc_id]).all()
        diff = np.abs(got[doc_id] - want)
        bad = np.argwhere(diff > TOL[dtype])
        assert bad.size == 0, (
            f"doc {doc_id}: {len(bad)} values off by up to {diff.max():.3g}; first (layer, "
            f"measure, pos) = {bad[0].tolist()} measure {RD.MEASURES[bad[0][1]]}"
        )
        worst = max(worst, float(diff.max()))
    return worst


@pytest.mark.parametrize("family", PRE_LN)
def test_measures_float64(tiny, family):
    for side in SIDES:
        _note(f"measures/{family}/float64", _compare(tiny, family, "float64", side))


@pytest.mark.parametrize("family", PRE_LN)
def test_measures_float32(tiny, family):
    """The engine on the float32 copy (same parameter values) against the float64 reference."""
    for side in SIDES:
        _note(f"measures/{family}/float32", _compare(tiny, family, "float32", side))


@pytest.mark.parametrize("family", CAUSAL)
def test_first_token_is_exactly_zero(tiny, family):
    """No context for the first token: its five measures are 0, not float noise."""
    model, tok = tiny(family, torch.float32)
    for side in SIDES:
        table = _analyze(model, tok, TEXTS, "float32", side, batch_size=len(TEXTS))
        first = table["position"].to_numpy() == 0
        for name in RD.MEASURES:
            values = table[name].to_numpy()
            assert (values[first] == 0.0).all(), name
            assert (values[~first] > 0).any(), name  # the others do mix


@pytest.mark.parametrize("family", PRE_LN)
def test_padding_side_invariance(tiny, family):
    """Left or right padding in a batch gives the unpadded sequence's numbers (float32)."""
    model, tok = tiny(family, torch.float32)
    layers = len(RD.Reference(model).layers)
    alone = {
        d: _per_sequence(_analyze(model, tok, [doc], "float32", "right"), layers)[0]
        for d, doc in enumerate(TEXTS)
    }
    worst = 0.0
    for side in SIDES:
        batched = _per_sequence(
            _analyze(model, tok, TEXTS, "float32", side, batch_size=len(TEXTS)), layers
        )
        for d in alone:
            worst = max(worst, float(np.abs(batched[d] - alone[d]).max()))
    assert worst <= 1e-5
    _note(f"padding/{family}/float32", worst)


@pytest.mark.parametrize("family", PRE_LN)
def test_contribution_maps(tiny, family):
    model, tok = tiny(family, torch.float64)
    worst = 0.0
    for side in SIDES:
        maps = mixscope.contribution_maps(
            (model, tok), TEXTS[:3], batch_size=3, dtype="float64", padding_side=side
        )
        for cm in maps:
            doc = TEXTS[cm.doc_id]
            ref = _reference(tiny, family, doc)
            assert cm.token_ids == _ids(tok, doc)
            n = len(cm.token_ids)
            for name in ("attn_n", "attnres_n", "attnresln_n"):
                got = getattr(cm, name).astype(np.float64)
                want = ref.pairs(name)
                assert got.shape == want.shape == (len(ref.layers), n, n)
                if family in CAUSAL:  # no source after the query
                    assert (got[:, np.triu(np.ones((n, n), dtype=bool), 1)] == 0).all()
                # the maps come out in float32: 1e-5 relative to the largest norm
                diff = float(np.abs(got - want).max()) / max(1.0, float(want.max()))
                assert diff <= TOL["float64"], f"{name}: {diff:.3g}"
                worst = max(worst, diff)
    _note(f"maps/{family}/float64", worst)


# ---------------------------------------------------------------- exactness identity


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("family", PRE_LN)
def test_verify_passes(tiny, family, dtype):
    model, tok = tiny(family, getattr(torch, dtype))
    engine = MixingEngine(load((model, tok)), verify=True)
    for side in SIDES:
        table = _analyze(model, tok, TEXTS, dtype, side, batch_size=len(TEXTS), verify=True)
        assert table.num_rows > 0
    ids = torch.tensor([_ids(tok, TEXTS[1])])
    out = engine.run(ids, torch.ones_like(ids))
    assert out.max_exactness_error is not None
    _note(f"identity/{family}/{dtype}", out.max_exactness_error)


def test_verify_catches_a_wrong_value_slice(tiny):
    """Negative control: GPT-2's keys taken for its values fail the identity."""
    import dataclasses

    from mixscope.errors import ExactnessError

    model, tok = tiny("gpt2", torch.float64)
    loaded = load((model, tok))
    wrong = dataclasses.replace(loaded.adapter, value="attn.c_attn", value_layout="plain")
    engine = MixingEngine(dataclasses.replace(loaded, adapter=wrong), verify=True)
    ids = torch.tensor([_ids(tok, TEXTS[0])])
    with pytest.raises((ExactnessError, RuntimeError)):
        engine.run(ids, torch.ones_like(ids))


@pytest.mark.parametrize(
    ("family", "wrong"),
    [
        # the obvious shortcut: post_attention_layernorm read as the FF's input norm, as in
        # Llama, while Gemma's sits inside the attention branch (and scales by 1 + w)
        ("gemma3", dict(norm_after="post_attention_layernorm", attn_branch_norm=None)),
        # Gemma's 1 + w dropped: every norm scales by w alone
        ("gemma3", dict(gamma_offset=0.0)),
        # OLMo-2 read as Llama: its branch norm taken for a norm after the residual sum
        ("olmo2", dict(norm_after="post_attention_layernorm", attn_branch_norm=None)),
        # OLMo-2 without its branch norm: the residual sums the raw attention output
        ("olmo2", dict(attn_branch_norm=None)),
        # Granite's residual multiplier dropped: the branch added at full size
        ("granite", dict(branch_multiplier_attr=None)),
        # GPT-J read as a sequential block: its ln_1 taken for a norm after x + attention
        ("gptj", dict(parallel_residual=False)),
    ],
)
def test_verify_catches_a_misread_block_layout(tiny, family, wrong):
    """Negative controls of the chain's steps: a norm at the wrong place, or a γ offset
    dropped, fails the exactness identity (``pytest -s`` shows the message)."""
    import dataclasses

    from mixscope.errors import ExactnessError

    model, tok = tiny(family, torch.float64)
    loaded = load((model, tok))
    misread = dataclasses.replace(loaded.adapter, **wrong)
    engine = MixingEngine(dataclasses.replace(loaded, adapter=misread), verify=True)
    ids = torch.tensor([_ids(tok, TEXTS[1])])
    with pytest.raises(ExactnessError, match="exactness identity fails") as err:
        engine.run(ids, torch.ones_like(ids))
    print(family, wrong, err.value)


def test_sandwich_and_missing_norms_are_chain_steps(tiny):
    """Gemma-3 and OLMo-2 are adapter data: the chain's steps, not branches on a family."""
    gemma = MixingEngine(load(tiny("gemma3", torch.float32)), measures="all")
    olmo = MixingEngine(load(tiny("olmo2", torch.float32)), measures="all")
    for engine in (gemma, olmo):
        assert all(p.attn_branch_norm is not None for p in engine.params)
        assert all(p.ff_branch_norm is not None for p in engine.params)
    assert all(p.norm is not None for p in gemma.params)  # pre_feedforward_layernorm
    assert all(p.norm is None for p in olmo.params)  # the FF reads the sum raw
    # after the FF: Gemma's next input norm (the final norm last); OLMo-2's none but last
    assert all(p.ff_norm is not None for p in gemma.params)
    assert [p.ff_norm is None for p in olmo.params] == [True, False]
    # γ = 1 + w for Gemma's norms
    w = gemma.points.blocks[0].post_attention_layernorm.weight.detach()
    assert torch.allclose(gemma.params[0].attn_branch_norm.gamma, 1 + w)


# ---------------------------------------------------------------- adapters as data


def test_grouped_query_heads(tiny):
    for family, kv in (("llama", 4), ("llama-gqa2", 2), ("llama-mqa", 1), ("mistral", 2)):
        model, tok = tiny(family, torch.float32)
        engine = MixingEngine(load((model, tok)))
        assert {(p.heads, p.kv_heads) for p in engine.params} == {(4, kv)}


def test_config_variants(tiny):
    parallel = adapter_for_config(tiny("gpt-neox", torch.float32)[0].config)
    sequential = adapter_for_config(tiny("gpt-neox-sequential", torch.float32)[0].config)
    assert parallel.parallel_residual and not sequential.parallel_residual
    opt_pre = adapter_for_config(tiny("opt", torch.float32)[0].config)
    opt_post = adapter_for_config(tiny("opt-post", torch.float32)[0].config)
    assert (opt_pre.placement, opt_pre.norm_after) == ("pre", "final_layer_norm")
    assert (opt_post.placement, opt_post.norm_after) == ("post", "self_attn_layer_norm")


def test_load_decoder_from_directory(tiny, tmp_path):
    """Through the path loader (eager attention, dtype cast) with the parallel residual."""
    model, tok = tiny("gpt-neox", torch.float64)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    table = mixscope.analyze(str(tmp_path), TEXTS, dtype="float32", batch_size=2, verify=True)
    got = _per_sequence(table, 2)
    for d, doc in enumerate(TEXTS):
        assert np.abs(got[d] - _reference(tiny, "gpt-neox", doc).measures()).max() <= 1e-4


@pytest.mark.parametrize("family", ["bert", "distilbert", "roberta"])
def test_encoders_accept_left_padding(tiny, family):
    model, tok = tiny(family, torch.float64)
    right = mixscope.analyze((model, tok), TEXTS, batch_size=4, dtype="float64")
    left = mixscope.analyze((model, tok), TEXTS, batch_size=4, dtype="float64", padding_side="left")
    for name in RD.MEASURES:
        assert np.abs(right[name].to_numpy() - left[name].to_numpy()).max() <= 1e-6


def test_bad_padding_side(tiny):
    model, tok = tiny("gpt2", torch.float32)
    with pytest.raises(MixscopeError, match="padding_side must be"):
        mixscope.analyze((model, tok), TEXTS, padding_side="middle")


# ---------------------------------------------------------------- GPT-2's tokenizer: no pad


@pytest.fixture(scope="module")
def bpe_tokenizer():
    """A byte-level BPE tokenizer like GPT-2's (no pad token, no special tokens added)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2TokenizerFast

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    flat = [t for doc in TEXTS for t in ((doc,) if isinstance(doc, str) else doc)]
    tk.train_from_iterator(flat, trainer)
    special = "<|endoftext|>"
    return GPT2TokenizerFast(
        tokenizer_object=tk, bos_token=special, eos_token=special, unk_token=special
    )


def test_gpt2_without_pad_token(tiny, bpe_tokenizer):
    tok = bpe_tokenizer
    assert tok.pad_token_id is None and tok.eos_token_id is not None
    model, _ = tiny("gpt2", torch.float64)
    n_tokens = sum(len(_ids(tok, d)) for d in TEXTS)
    for side in SIDES:
        table = _analyze(model, tok, TEXTS, "float64", side, batch_size=len(TEXTS), verify=True)
        assert table.num_rows == n_tokens * 2  # padding (eos ids) never appears
        assert not table["is_special"].to_numpy().any()
        got = _per_sequence(table, 2)
        for d, doc in enumerate(TEXTS):
            want = RD.reference(model, _ids(tok, doc)).measures()
            assert np.abs(got[d] - want).max() <= TOL["float64"]


# ---------------------------------------------------------------- out of memory


class _OOMOnce:
    """Wraps engine.run: raises CUDA out-of-memory when batch · width exceeds a budget."""

    def __init__(self, engine: MixingEngine, budget: int) -> None:
        self.engine, self.budget, self.calls = engine, budget, []
        self._run = engine.run

    def __call__(self, ids, mask, types=None, *, pairs=False):
        self.calls.append(tuple(ids.shape))
        if ids.shape[0] * ids.shape[1] > self.budget:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return self._run(ids, mask, types, pairs=pairs)


def test_out_of_memory_halves_the_batch(tiny):
    from mixscope.corpus.encode import encode_documents

    model, tok = tiny("llama-gqa2", torch.float32)
    loaded = load((model, tok))
    seqs = encode_documents(tok, TEXTS * 2, max_length=64)
    plain = run_batches(MixingEngine(loaded), seqs, 8, pairs=False)

    engine = MixingEngine(loaded)
    width = max(len(s) for s in seqs)
    engine.run = fake = _OOMOnce(engine, budget=2 * width)  # fits 2 of the longest
    got = run_batches(engine, seqs, 8, pairs=False)
    assert [b for b, _ in fake.calls[:3]] == [8, 4, 2]  # halved twice, then it fits
    assert engine.oom_token_limit is not None and engine.oom_token_limit <= 4 * width
    for (a, _), (b, _) in zip(plain, got, strict=True):
        assert np.abs(a - b).max() <= 1e-5

    engine = MixingEngine(loaded)
    engine.run = _OOMOnce(engine, budget=1)
    with pytest.raises(MixscopeError, match="single sequence"):
        run_batches(engine, seqs, 4, pairs=False)


# ---------------------------------------------------------------- bf16 weights


def test_bfloat16_weights_float32_statistics(tiny):
    model32, tok = tiny("llama-gqa2", torch.float32)
    import copy

    model16 = copy.deepcopy(model32).to(torch.bfloat16)
    low = mixscope.analyze((model16, tok), TEXTS, batch_size=4, verify=True)
    full = mixscope.analyze((model32, tok), TEXTS, batch_size=4)
    for name in RD.MEASURES:
        a, b = low[name].to_numpy(), full[name].to_numpy()
        assert a.dtype == np.float32 and (a >= 0).all() and (a <= 1).all()
        assert np.abs(a - b).mean() <= 0.05, name


def test_a_multimodal_gemma3_checkpoint_runs_on_its_language_model(tiny, tmp_path):
    """A ``gemma3`` (image and text) checkpoint: its text config picks the adapter, its
    language model runs (the vision tower never does), from a loaded model and from a
    directory, with the numbers of the same text model loaded alone."""
    from transformers import AutoModel, Gemma3Config, SiglipVisionConfig

    from mixscope.models.resolve import resolved_max_length
    from tiny_models import _config

    text, tok = tiny("gemma3", torch.float64)
    vision = SiglipVisionConfig(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=28,
        patch_size=14,
    )
    config = Gemma3Config(
        text_config=_config("gemma3").to_dict(),
        vision_config=vision.to_dict(),
        mm_tokens_per_image=4,
    )
    both = AutoModel.from_config(config).to(torch.float64).eval()
    both.language_model.load_state_dict(text.state_dict())
    kwargs = dict(measures="all", dtype="float64", attention="eager")
    alone = mixscope.analyze((text, tok), TEXTS, **kwargs)
    multimodal = mixscope.analyze((both, tok), TEXTS, verify=True, **kwargs)
    for c in alone.column_names:
        assert alone[c].equals(multimodal[c]), c
    both.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    assert resolved_max_length(str(tmp_path), None) == 80  # the text config's positions
    from_dir = mixscope.analyze(str(tmp_path), TEXTS[:1], measures="paper", dtype="float64")
    assert from_dir.num_rows > 0
