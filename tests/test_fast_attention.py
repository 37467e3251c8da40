"""The fast attention path (mixing/fast_attention.py): α_ii from a fused kernel's log-sum-exp.

Checked three ways: the kernels' output and LSE against a brute-force float64 softmax for
every mask shape transformers hands over (none, causal, padding left and right, fully
masked rows, a sliding window, grouped-query heads); the engine's five measures on every
supported family, fast against eager, with padding left and right; and the engine's
plumbing (which implementation a batch runs with, that no [seq, seq] tensor reaches the
hooks, the model's own implementation restored, token-sized batches, long inputs).
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
import torch

import mixscope
from mixscope.corpus.encode import encode_documents
from mixscope.errors import MixscopeError
from mixscope.mixing import attention_kernels as AK
from mixscope.mixing import fast_attention as FA
from mixscope.mixing.batches import batch_size_for, run_batches
from mixscope.mixing.engine import MixingEngine
from mixscope.models.loading import load
from tiny_models import DECODER_FAMILIES, FAMILIES, PRE_LN_ENCODERS

TEXTS = [
    "The cat sat on the mat.",
    "A somewhat longer sentence with quite a few more tokens in it, to pad the others.",
    ("A dog barked loudly at night.", "The neighbours were not amused."),
    "Short one.",
]

# ---------------------------------------------------------------- kernels vs brute force


def _brute(q, k, v, keep, scale):
    """float64 softmax attention: output [b, h, q, d], LSE [b, h, q], weights [b, h, q, k]."""
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, -1)
    w = torch.where(torch.isfinite(lse)[..., None], torch.exp(s - lse[..., None]), 0.0)
    return w @ v.double(), lse, w


def _keep(batch, seq, *, causal, lengths=None, side="right", window=None):
    """A boolean keep-mask [batch, 1, q, k] (True = attend), as transformers' SDPA mask."""
    i = torch.arange(seq)[:, None]
    j = torch.arange(seq)[None, :]
    keep = torch.ones(batch, 1, seq, seq, dtype=torch.bool)
    if causal:
        keep &= j <= i
    if window is not None:
        keep &= j > i - window
    if lengths is not None:
        for b, n in enumerate(lengths):
            real = torch.zeros(seq, dtype=torch.bool)
            real[:n] = True
            if side == "left":
                real = real.flip(0)
            keep[b] &= real[None, :]  # padded keys are never attended
    return keep


MASKS = {
    "none": dict(causal=False),
    "causal": dict(causal=True),
    "padding-right": dict(causal=False, lengths=[9, 5, 1]),
    # left padding, causal: the padded query rows see no key at all (fully masked rows)
    "causal-padding-left": dict(causal=True, lengths=[9, 5, 1], side="left"),
    "sliding-window": dict(causal=True, window=3, lengths=[9, 7, 9]),
}


@pytest.mark.parametrize("kernel", ["cpu", "fallback"])
@pytest.mark.parametrize("case", sorted(MASKS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_kernel_lse_and_self_weight_match_a_float64_softmax(kernel, case, dtype):
    torch.manual_seed(0)
    b, h, n, d = 3, 4, 9, 8
    q, k, v = (torch.randn(b, h, n, d, dtype=dtype) * 2 for _ in range(3))
    opts = MASKS[case]
    keep = _keep(b, n, **opts)
    scale = 1 / math.sqrt(d)
    # as transformers passes them: no mask when it can be skipped (is_causal instead)
    plain = case in ("none", "causal")
    mask = None if plain else keep
    out, lse = FA.attention_with_lse(q, k, v, mask, scale, opts["causal"] and plain, kernel=kernel)
    alpha = FA.self_weights(q, k, mask, lse, scale)  # [b, h, n]
    ref_out, ref_lse, ref_w = _brute(q, k, v, keep, scale)
    rows = keep.expand(b, h, n, n).any(-1)  # query rows with at least one key
    tol = 1e-12 if dtype == torch.float64 else 2e-6
    assert alpha.shape == (b, h, n)
    assert (alpha - torch.diagonal(ref_w, dim1=-2, dim2=-1)).abs().max() <= tol
    assert (lse.double() - ref_lse)[rows].abs().max() <= tol * 10
    assert (out.double() - ref_out)[rows].abs().max() <= tol * 10
    assert (alpha[~rows] == 0).all()  # fully masked rows: no weight, not NaN


@pytest.mark.parametrize("kernel", ["flex", "chunked"])
@pytest.mark.parametrize("case", sorted(MASKS))
@pytest.mark.parametrize("additive", [False, True])
def test_capped_kernels_match_a_float64_capped_softmax(kernel, case, additive):
    """Soft-capped attention (Gemma-2), both kernels — flex attention with the tanh score
    modification (what CUDA compiles; here its unfused reference) and the exact chunked
    path — against a float64 brute force of the capped scores, with grouped key/value
    heads, boolean and additive masks, and fully masked rows (left padding)."""
    torch.manual_seed(1)
    b, h, kv, n, d, cap = 3, 4, 2, 9, 8, 1.5
    q = torch.randn(b, h, n, d, dtype=torch.float64) * 3
    k, v = (torch.randn(b, kv, n, d, dtype=torch.float64) * 3 for _ in range(2))
    opts = MASKS[case]
    keep = _keep(b, n, **opts)
    plain = case in ("none", "causal")
    mask = None if plain else keep
    if additive and mask is not None:
        mask = torch.zeros(keep.shape, dtype=torch.float64).masked_fill(~keep, float("-inf"))
    scale = 1 / math.sqrt(d)
    out, lse = FA.capped_attention_with_lse(
        q, k, v, mask, scale, opts["causal"] and plain, cap, kernel=kernel
    )
    alpha = FA.self_weights(q, k, mask, lse, scale, cap)
    kk, vv = (t.repeat_interleave(h // kv, 1) for t in (k, v))
    s = torch.tanh(q @ kk.transpose(-1, -2) * scale / cap) * cap  # capped, then masked
    s = s.masked_fill(~keep, float("-inf"))
    ref_lse = torch.logsumexp(s, -1)
    w = torch.where(torch.isfinite(ref_lse)[..., None], torch.exp(s - ref_lse[..., None]), 0.0)
    rows = keep.expand(b, h, n, n).any(-1)
    assert (lse - ref_lse)[rows].abs().max() <= 1e-12
    assert (out - w @ vv)[rows].abs().max() <= 1e-12
    assert (alpha - torch.diagonal(w, dim1=-2, dim2=-1)).abs().max() <= 1e-12
    assert (alpha[~rows] == 0).all()
    # the negative control: the uncapped softmax is far from it
    assert (lse - _brute(q, kk, vv, keep, scale)[1])[rows].abs().max() > 0.1


def test_gemma2_through_flex_attention_equals_eager(tiny, monkeypatch):
    """The flex kernel inside a whole Gemma-2 forward (as CUDA runs it; here uncompiled):
    every group's measures equal eager's on a padded batch."""
    model, tok = tiny("gemma2", torch.float64)
    texts = ["The cat sat on the mat with a hat.", "A longer sentence, to pad the other one."]
    eager = mixscope.analyze((model, tok), texts, attention="eager", measures="all")
    real = FA.capped_attention_with_lse
    calls = []

    def flex(*args, **kwargs):
        calls.append(1)
        return real(*args, **{**kwargs, "kernel": "flex"})

    monkeypatch.setattr(FA, "capped_attention_with_lse", flex)
    fast = mixscope.analyze((model, tok), texts, attention="fast", measures="all")
    assert calls and fast.num_rows == eager.num_rows
    cols = [c for c in eager.column_names if c.endswith(("_n", "_w"))]
    assert max(np.abs(fast[c].to_numpy() - eager[c].to_numpy()).max() for c in cols) <= 1e-6


def test_chunked_logsumexp_is_chunk_independent(monkeypatch):
    torch.manual_seed(1)
    q, k = torch.randn(2, 3, 37, 8), torch.randn(2, 3, 37, 8)
    keep = _keep(2, 37, causal=True, lengths=[37, 20], side="left")
    whole = FA.chunked_logsumexp(q, k, FA.additive_mask(keep, q.dtype), 0.3, False)
    monkeypatch.setattr(AK, "CHUNK_SCORES", 2 * 3 * 37 * 5)  # 5 query rows per chunk
    chunked = FA.chunked_logsumexp(q, k, FA.additive_mask(keep, q.dtype), 0.3, False)
    assert (whole - chunked).abs().max() <= 1e-6  # the same up to matmul blocking
    causal = FA.chunked_logsumexp(q, k, None, 0.3, True)
    ref = FA.chunked_logsumexp(
        q, k, FA.additive_mask(_keep(2, 37, causal=True), q.dtype), 0.3, False
    )
    assert torch.allclose(causal, ref, atol=1e-6)


def test_grouped_query_heads_use_their_key_value_head():
    torch.manual_seed(2)
    b, h, kv, n, d = 2, 4, 2, 7, 8

    class Module(torch.nn.Module):
        is_causal = True

    q = torch.randn(b, h, n, d, dtype=torch.float64)
    k, v = (
        torch.randn(b, kv, n, d, dtype=torch.float64),
        torch.randn(b, kv, n, d, dtype=torch.float64),
    )
    with FA.first_positions(torch.zeros(b, dtype=torch.long)):
        out, alpha = FA.mixscope_attention_forward(Module(), q, k, v, None, scaling=0.5)
    rk, rv = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)  # head g·2 + r ← kv head g
    ref_out, _, ref_w = _brute(q, rk, rv, _keep(b, n, causal=True), 0.5)
    assert out.shape == (b, n, h, d)  # the layout attention modules expect back
    assert (out.transpose(1, 2) - ref_out).abs().max() < 1e-12
    assert (alpha.own - torch.diagonal(ref_w, dim1=-2, dim2=-1)).abs().max() < 1e-12
    assert (alpha.first - ref_w[..., 0]).abs().max() < 1e-12  # α_i0: the first key's column


def test_first_weights_follow_the_first_real_position():
    """Left padding: α_i0 is the weight on each sequence's first *real* key, given by the
    engine (``first_positions``), with a boolean padding mask, against the brute force."""
    torch.manual_seed(5)
    b, h, n, d = 3, 2, 6, 4
    q, k, v = (torch.randn(b, h, n, d, dtype=torch.float64) for _ in range(3))
    first = torch.tensor([0, 2, 4])
    keep = torch.arange(n)[None, :] >= first[:, None]  # [b, k] real keys
    mask = keep[:, None, None, :].expand(b, 1, n, n)  # bool keep-mask [b, 1, q, k]

    class Module(torch.nn.Module):
        is_causal = False

    with FA.first_positions(first):
        _, weights = FA.mixscope_attention_forward(Module(), q, k, v, mask, scaling=0.5)
    _, _, ref_w = _brute(q, k, v, mask, 0.5)
    expected = ref_w[torch.arange(b), :, :, first]  # [b, h, q]
    assert (weights.first - expected).abs().max() < 1e-12
    assert weights.first.sum() > 0  # not vacuous: the first real keys carry weight


def test_dropout_is_refused():
    q = torch.randn(1, 2, 3, 4)
    with pytest.raises(MixscopeError, match="dropout"):
        FA.mixscope_attention_forward(torch.nn.Module(), q, q, q, None, dropout=0.1)


def test_a_refusing_kernel_falls_back_with_one_warning(monkeypatch, caplog):
    def refuse(*args):
        raise RuntimeError("no kernel for this input\nsecond line")

    monkeypatch.setitem(AK.KERNELS, "cpu", refuse)
    monkeypatch.setattr(AK, "_warned", set())
    torch.manual_seed(3)
    q, k, v = (torch.randn(2, 2, 5, 4) for _ in range(3))
    with caplog.at_level(logging.WARNING, logger="mixscope"):
        out, lse = FA.attention_with_lse(q, k, v, None, 0.5, True)
        FA.attention_with_lse(q, k, v, None, 0.5, True)
    ref_out, ref_lse, _ = _brute(q, k, v, _keep(2, 5, causal=True), 0.5)
    assert (out.double() - ref_out).abs().max() < 1e-6
    assert (lse.double() - ref_lse).abs().max() < 1e-6
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [
        "fast attention: cpu kernel unavailable (no kernel for this input); fallback"
    ]


# ---------------------------------------------------------------- every family, fast vs eager

ALL = FAMILIES + DECODER_FAMILIES + PRE_LN_ENCODERS


def _measures(loaded, seqs, attention, side, **kw):
    engine = MixingEngine(loaded, attention=attention)
    return [m for m, _ in run_batches(engine, seqs, 4, padding_side=side, **kw)]


@pytest.mark.parametrize("family", ALL)
def test_fast_equals_eager_on_every_family(tiny, family):
    model, tok = tiny(family, torch.float32)
    loaded = load((model, tok))
    seqs = encode_documents(tok, TEXTS, max_length=loaded.resolve_max_length(None))
    worst = 0.0
    for side in ("left", "right"):
        eager = _measures(loaded, seqs, "eager", side)
        fast = _measures(loaded, seqs, "fast", side)
        for a, b in zip(eager, fast, strict=True):
            assert a.shape == b.shape
            worst = max(worst, float(np.abs(a - b).max()))
    print(f"{family}: max |fast − eager| = {worst:.2e}")
    assert worst <= 1e-5
    assert worst > 0  # the fast path really ran (eager twice would agree to the bit)


@pytest.mark.parametrize("family", ["bert", "gpt-neox", "llama-gqa2", "mistral", "opt-post"])
def test_auto_with_verify_checks_the_identity(tiny, family):
    model, tok = tiny(family, torch.float64)
    table = mixscope.analyze((model, tok), TEXTS, verify=True)  # eager for the check
    fast = mixscope.analyze((model, tok), TEXTS, attention="fast")
    assert table.num_rows == fast.num_rows
    for name in ("attn_w", "attn_n", "attnres_n", "attnresln_n"):
        diff = np.abs(table[name].to_numpy() - fast[name].to_numpy()).max()
        assert diff <= 1e-6, name  # float32 columns of a float64 run


# ---------------------------------------------------------------- plumbing


def _hook_shapes(loaded, attention, *, pairs=False, verify=False):
    """The ndim of the weights every attention module hands the engine, per forward."""
    engine = MixingEngine(loaded, attention=attention, verify=verify)
    seen: list[int] = []
    blocks = loaded.model.get_submodule(loaded.adapter.layers)
    handles = [
        b.get_submodule(loaded.adapter.attention).register_forward_hook(
            lambda _m, _i, out: seen.append(
                out[1].own.dim() if isinstance(out[1], FA.FastWeights) else out[1].dim()
            )
        )
        for b in blocks
    ]
    try:
        seqs = encode_documents(loaded.tokenizer, TEXTS, max_length=64)
        run_batches(engine, seqs, 4, pairs=pairs)
    finally:
        for h in handles:
            h.remove()
    return set(seen)


def test_which_implementation_a_batch_runs_with(tiny):
    model, tok = tiny("llama-gqa2", torch.float32)
    loaded = load((model, tok))
    assert _hook_shapes(loaded, "auto") == {3}  # α_ii only: [batch, heads, seq]
    assert _hook_shapes(loaded, "fast") == {3}
    assert _hook_shapes(loaded, "eager") == {4}  # [batch, heads, seq, seq]
    assert _hook_shapes(loaded, "auto", pairs=True) == {4}
    assert _hook_shapes(loaded, "auto", verify=True) == {4}
    assert model.config._attn_implementation == "eager"  # restored after every batch
    with pytest.raises(MixscopeError, match="exactness check"):
        MixingEngine(loaded, attention="fast", verify=True)
    with pytest.raises(MixscopeError, match="per-pair maps"):
        _hook_shapes(loaded, "fast", pairs=True)
    with pytest.raises(MixscopeError, match="attention must be one of auto, fast, eager"):
        MixingEngine(loaded, attention="flash")


def test_a_model_loaded_with_sdpa_runs_fast_and_keeps_sdpa(tiny):
    from tiny_models import build

    model, tok = build("llama", torch.float32, attn="sdpa")
    loaded = load((model, tok))
    assert _hook_shapes(loaded, "auto") == {3}
    assert model.config._attn_implementation == "sdpa"


def test_token_budget_sizes_batches():
    assert batch_size_for(128, 16, 16384, None) == 16  # the sequence count binds
    assert batch_size_for(4096, 16, 16384, None) == 4  # the token budget binds
    assert batch_size_for(32768, 16, 16384, None) == 1  # one sequence, whatever its length
    assert batch_size_for(4096, 16, None, None) == 16
    assert batch_size_for(128, 16, 16384, 1024) == 4  # under a size that ran out of memory


def test_batches_follow_the_token_budget(tiny):
    model, tok = tiny("gpt2", torch.float32)
    loaded = load((model, tok))
    seqs = encode_documents(tok, TEXTS * 3, max_length=64)
    engine = MixingEngine(loaded)
    shapes: list[tuple[int, int]] = []
    run = engine.run

    def recording(ids, mask, types=None, *, pairs=False):
        shapes.append(tuple(ids.shape))
        return run(ids, mask, types, pairs=pairs)

    engine.run = recording
    budget = 40
    got = run_batches(engine, seqs, 8, batch_tokens=budget)
    assert sum(b for b, _ in shapes) == len(seqs)
    assert all(b * w <= budget or b == 1 for b, w in shapes)
    assert max(b for b, _ in shapes) > 1  # short sequences still share a batch
    plain = run_batches(MixingEngine(loaded), seqs, 8, batch_tokens=None)
    for a, b in zip(plain, got, strict=True):
        assert np.abs(a[0] - b[0]).max() <= 1e-5


def test_long_inputs_fast_equals_eager():
    """A 2,048-token sequence through a Llama-family model with a 4k context."""
    from transformers import AutoModel, LlamaConfig

    from tiny_models import tokenizer

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=48,
        max_position_embeddings=4096,
        bos_token_id=101,
        eos_token_id=102,
        pad_token_id=0,
    )
    model = AutoModel.from_config(config, attn_implementation="eager")
    tok = tokenizer()
    tok.model_max_length = 4096  # the MiniLM tokenizer says 512; this model takes 4k
    text = " ".join(f"word{i % 97} and more" for i in range(900))
    table_fast = mixscope.analyze((model, tok), [text, "short"], max_length=2048, attention="fast")
    table_eager = mixscope.analyze(
        (model, tok), [text, "short"], max_length=2048, attention="eager"
    )
    positions = table_fast["position"].to_numpy()
    assert positions.max() == 2047  # one full-length segment
    for name in ("attn_w", "attn_n", "attnres_n", "attnresln_n"):
        diff = np.abs(table_fast[name].to_numpy() - table_eager[name].to_numpy()).max()
        assert diff <= 1e-5, name


def test_spec_attention_option_is_validated():
    from mixscope.config import load_spec

    base = {"model": "m", "corpus.paths": ["c.txt"], "out": "o"}
    assert load_spec(None, base).analysis.attention == "auto"
    assert load_spec(None, {**base, "attention": "eager"}).analysis.attention == "eager"
    with pytest.raises(MixscopeError, match=r"analysis\.attention: auto\|fast\|eager"):
        load_spec(None, {**base, "analysis.attention": "flash"})
    with pytest.raises(MixscopeError, match="exactness check"):
        load_spec(None, {**base, "analysis.attention": "fast", "runtime.verify": True})
    with pytest.raises(MixscopeError, match=r"runtime\.batch_tokens"):
        load_spec(None, {**base, "runtime.batch_tokens": 0})


@pytest.mark.parametrize("argument", ["position_bias", "head_mask", "encoder_hidden_states"])
def test_an_attention_argument_it_does_not_implement_is_refused(argument):
    """Position biases, cross-attention and the like change the attention: the fast path
    refuses them in one line instead of silently dropping them (gpt-oss's learned sinks,
    ``s_aux``, it implements)."""
    from mixscope.errors import MixscopeError
    from mixscope.mixing.fast_attention import mixscope_attention_forward

    q = torch.randn(1, 2, 5, 4)
    with pytest.raises(MixscopeError, match=f"'{argument}'") as err:
        mixscope_attention_forward(torch.nn.Linear(1, 1), q, q, q, None, **{argument: 1.0})
    assert "\n" not in str(err.value) and "attention='eager'" in str(err.value)
    # what it reads elsewhere (positions, the window in the mask, cache flags) is accepted
    out, weights = mixscope_attention_forward(
        torch.nn.Linear(1, 1), q, q, q, None, position_ids=None, sliding_window=3, use_cache=False
    )
    assert out.shape == (1, 5, 2, 4) and weights.own.shape == (1, 2, 5)


def test_soft_capped_scores_are_capped_on_the_fast_path(tiny, monkeypatch):
    """Gemma-2's soft-capping: the fast path's α_ii comes from the capped scores and their
    log-sum-exp (fast equals eager, tests/test_measure_groups.py); the negative control
    drops the cap on the fast path only, and the measures move far from eager's."""
    import mixscope
    import mixscope.mixing.fast_attention as FA

    model, tok = tiny("gemma2", torch.float64)
    texts = ["The cat sat on the mat with a hat.", "A longer sentence, to pad the other one."]

    def table(attention):
        return mixscope.analyze((model, tok), texts, attention=attention, measures="all")

    eager, fast = table("eager"), table("fast")
    cols = [c for c in eager.column_names if c.endswith(("_n", "_w"))]
    diff = max(np.abs(fast[c].to_numpy() - eager[c].to_numpy()).max() for c in cols)
    assert diff <= 1e-6
    real = FA.mixscope_attention_forward

    def uncapped(*args, **kwargs):
        kwargs.pop("softcap", None)
        return real(*args, **kwargs)

    monkeypatch.setattr(FA, "mixscope_attention_forward", uncapped)
    wrong = table("fast")
    diff = max(np.abs(wrong[c].to_numpy() - eager[c].to_numpy()).max() for c in cols)
    assert diff > 1e-2


def test_two_engines_in_two_threads_keep_their_own_forward_state(tiny):
    """The fast path's per-forward state (each sequence's first real position, the mask
    converted once) lives in a context variable, not module globals: two engines on two
    models running their forwards at the same time in two threads, with different left
    padding, each give exactly what they give alone."""
    import threading

    from mixscope.mixing.engine import MixingEngine
    from mixscope.models.loading import load

    def batch(tok, texts):
        tok.padding_side = "left"
        enc = tok(texts, padding=True, return_tensors="pt")
        return enc["input_ids"], enc["attention_mask"]

    runs = []
    for family, texts in (("llama-gqa2", TEXTS[:2]), ("mistral", [TEXTS[3], TEXTS[1], TEXTS[0]])):
        model, tok = tiny(family, torch.float32)
        engine = MixingEngine(load((model, tok)), measures=["paper", "sink"], attention="fast")
        ids, mask = batch(tok, texts)
        runs.append((engine, ids, mask, engine.run(ids, mask).measures))
    got: dict[int, list] = {0: [], 1: []}
    start = threading.Barrier(2)

    def work(k: int) -> None:
        engine, ids, mask, _ = runs[k]
        start.wait()
        for _ in range(8):
            got[k].append(engine.run(ids, mask).measures)

    threads = [threading.Thread(target=work, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in (0, 1):
        alone = runs[k][3]
        assert len(got[k]) == 8 and all(torch.equal(m, alone) for m in got[k])
