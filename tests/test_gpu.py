"""The CUDA paths, on a lent GPU (``pytest -m gpu``; skipped without CUDA).

What CPU runs cannot check: the CUDA fused kernels (flash: no mask, half precision;
memory-efficient: additive masks) against exact attention on padded batches, every measure
group on the fast path against eager on the GPU, float64 on the GPU against the float64 CPU
engine (the same arithmetic, another device), bfloat16 against float32 on random models of
real shapes (BERT-base, a 1B Llama with grouped-query heads), and the exactness identities
under ``verify`` on the GPU. benchmarks/gpu_check.sh runs this file and the GPU benchmark
tables in one command.

``MIXSCOPE_GPU_TEST_DEVICE=cpu`` runs the same tests on the CPU with the small shapes: the
check's ``--dry-run``, which proves on a machine without a GPU that the file imports and
runs with only the lent machine's packages (tests/test_gpu_check.py).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import numpy as np
import pytest
import torch

import mixscope
import shaped_models
from mixscope.mixing.fast_attention import attention_with_lse, capped_attention_with_lse

#: where the tests run: the GPU, or the CPU for the check's dry run
DEVICE = torch.device(os.environ.get("MIXSCOPE_GPU_TEST_DEVICE", "cuda"))
#: the real shapes on a GPU, their small siblings (same family and layout) on the CPU
SHAPES = ("bert-base", "llama-1b") if DEVICE.type == "cuda" else ("bert-small", "llama-small")

pytestmark = [  # its tier, gpu: tests/conftest.py
    # the groups measures="all" leaves out on pre-LN families: expected here, not news
    pytest.mark.filterwarnings("ignore:measures='all' skipped groups"),
    pytest.mark.skipif(
        DEVICE.type == "cuda" and not torch.cuda.is_available(), reason="needs CUDA (a GPU)"
    ),
]

TEXTS = [
    "The cat sat on the mat.",
    "A somewhat longer sentence with quite a few more tokens in it, to pad the others.",
    ("A dog barked loudly at night.", "The neighbours were not amused."),
    "Short one.",
]
FAMILIES = ("bert", "distilbert", "gpt2", "gpt-neox", "llama-gqa2", "mistral", "opt-post")
# the 2024-26 layouts: Gemma-2's capped scores take compiled flex attention on CUDA
FAMILIES += ("gemma2", "gemma3", "olmo2")
MEASURES = lambda table: [c for c in table.column_names if c.endswith(("_n", "_w"))]  # noqa: E731


def _exact(q, k, v, keep, scale, causal):
    """Attention and its log-sum-exp by the textbook formula, float64."""
    q, k, v = (t.double() for t in (q, k, v))
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    scores = q @ k.transpose(-1, -2) * scale  # [batch, heads, q, k]
    n = q.shape[2]
    allowed = torch.ones(n, n, dtype=torch.bool, device=q.device)
    if causal:
        allowed = allowed.tril()
    if keep is not None:
        allowed = allowed & keep[:, None, None, :]
    scores = scores.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    return torch.softmax(scores, dim=-1) @ v, lse


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("padding", [None, "right", "left"])
def test_cuda_kernels_against_exact_attention(dtype, causal, padding):
    """flash (no mask, half precision) and memory-efficient (masks, every dtype): output
    and LSE — the LSE gives α_ii, so it is what the measures rest on."""
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    b, h, kv, n, d = 3, 8, 2, 77, 64  # grouped-query heads, a length no kernel tile divides
    q = torch.randn(b, h, n, d, device=DEVICE, generator=gen).to(dtype)
    k = torch.randn(b, kv, n, d, device=DEVICE, generator=gen).to(dtype)
    v = torch.randn(b, kv, n, d, device=DEVICE, generator=gen).to(dtype)
    keep = None
    if padding:
        lengths = torch.tensor([n, n // 2, 5], device=DEVICE)
        pos = torch.arange(n, device=DEVICE)
        keep = (
            pos[None] < lengths[:, None]
            if padding == "right"
            else pos[None] >= n - lengths[:, None]
        )
    mask = None if keep is None else keep[:, None, None, :]
    out, lse = attention_with_lse(q, k, v, mask, d**-0.5, causal, kernel=DEVICE.type)
    ref_out, ref_lse = _exact(q, k, v, keep, d**-0.5, causal)
    rows = torch.ones(b, n, dtype=torch.bool, device=DEVICE) if keep is None else keep
    if causal and padding == "left":  # a left-padded causal row sees no key before its first
        rows = rows & torch.isfinite(ref_lse).all(dim=1)
    tol = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 3e-2}[dtype]
    assert (lse.double() - ref_lse).abs().transpose(1, 2)[rows].max() <= tol * 10
    assert (out.double() - ref_out).abs().transpose(1, 2)[rows].max() <= tol * 10


def _table(model, tok, **kwargs):
    return mixscope.analyze((model, tok), TEXTS, measures="all", batch_size=4, **kwargs)


@contextlib.contextmanager
def on_gpu(model) -> Iterator[None]:
    """The (session-cached) tiny model on the GPU, back on the CPU afterwards."""
    model.to(DEVICE)
    try:
        yield
    finally:
        model.to("cpu")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_flex_attention_with_a_score_cap_against_exact_attention(dtype):
    """Gemma-2's capped scores through compiled flex attention (the CUDA path; uncompiled
    in the dry run): output and LSE of the capped scores against float64, padded rows."""
    torch.manual_seed(0)
    b, h, kv, n, d, cap = 2, 8, 2, 200, 64, 20.0
    q = torch.randn(b, h, n, d, device=DEVICE, dtype=dtype) * 4
    k, v = (torch.randn(b, kv, n, d, device=DEVICE, dtype=dtype) for _ in range(2))
    keep = torch.ones(b, 1, n, n, dtype=torch.bool, device=DEVICE).tril()
    keep[1, :, :, :37] = False  # left padding: fully masked rows in sequence 1
    out, lse = capped_attention_with_lse(q, k, v, keep, d**-0.5, False, cap, kernel="flex")
    kk, vv = (t.double().repeat_interleave(h // kv, 1) for t in (k, v))
    s = torch.tanh(q.double() @ kk.transpose(-1, -2) * d**-0.5 / cap) * cap
    s = s.masked_fill(~keep, float("-inf"))
    ref_lse = torch.logsumexp(s, -1)
    rows = keep.expand(b, h, n, n).any(-1)
    w = torch.exp(s - ref_lse[..., None]).nan_to_num()
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-4
    assert (lse.double() - ref_lse)[rows].abs().max() <= tol
    assert (out.double() - w @ vv)[rows].abs().max() <= tol


@pytest.mark.parametrize("family", FAMILIES)
def test_every_group_fast_against_eager_on_the_gpu(tiny, family):
    model, tok = tiny(family, torch.float32)
    with on_gpu(model):
        _fast_against_eager(model, tok, family)


def _fast_against_eager(model, tok, family: str) -> None:
    for side in ("right", "left"):
        fast = _table(model, tok, device=DEVICE.type, attention="fast", padding_side=side)
        eager = _table(model, tok, device=DEVICE.type, attention="eager", padding_side=side)
        for c in MEASURES(fast):
            diff = np.abs(fast[c].to_numpy() - eager[c].to_numpy()).max()
            assert diff <= 1e-4, f"{family}/{side} {c}: {diff:.2e}"


@pytest.mark.parametrize("family", FAMILIES)
def test_float64_on_the_gpu_equals_the_cpu(tiny, family):
    """The same float64 arithmetic on another device: the GPU changes no number."""
    model, tok = tiny(family, torch.float64)
    cpu = _table(model, tok, device="cpu", dtype="float64")
    with on_gpu(model):
        gpu = _table(model, tok, device=DEVICE.type, dtype="float64", verify=True)
    for c in MEASURES(cpu):
        assert np.abs(cpu[c].to_numpy() - gpu[c].to_numpy()).max() <= 1e-6, c


@pytest.mark.parametrize("family", ["bert", "llama-gqa2"])
def test_verify_on_the_gpu_in_float32(tiny, family):
    model, tok = tiny(family, torch.float32)
    with on_gpu(model):
        table = _table(model, tok, device=DEVICE.type, verify=True)
    assert table.num_rows > 0


@pytest.mark.parametrize("shape", SHAPES)
def test_bfloat16_stays_close_to_float32(shape):
    """A real-shaped model in bfloat16 on the fast path (flash / efficient kernels on a GPU)
    against float32 eager: the mean ratios agree to a few thousandths."""
    texts = [t if isinstance(t, str) else " ".join(t) for t in TEXTS] * 8
    means = {}
    for dtype, attention in ((torch.bfloat16, "fast"), (torch.float32, "eager")):
        model, tok = shaped_models.build(shape, dtype, DEVICE)
        table = mixscope.analyze(
            (model, tok), texts, device=DEVICE.type, attention=attention, measures="all"
        )
        means[dtype] = {c: float(table[c].to_numpy().mean()) for c in MEASURES(table)}
        del model
    for c, v in means[torch.float32].items():
        assert abs(means[torch.bfloat16][c] - v) <= 0.02, (c, means[torch.bfloat16][c], v)


def test_statistics_on_the_gpu_equal_the_cpu():
    """The shard statistics accumulated on the device (atomic adds in the device's order)
    equal the CPU's table by table: counts, bins and extremes exactly, float64 sums to the
    last bits (tests/stats_golden.py's fixed inputs: every group, several chunks)."""
    import stats_golden as sg
    from mixscope.registry import measure_set
    from mixscope.stats.accumulate import ShardStatistics
    from mixscope.stats.token_block import Vocabulary, chunk_values, token_block

    seqs, measures, groups = sg.golden_shard()
    vocab = Vocabulary(sg.GoldenTokenizer())
    columns = measure_set(groups)
    tables = {}
    for device in ("cpu", DEVICE):
        acc = ShardStatistics(vocab, columns)
        for lo, hi in sg.CHUNKS:
            values = chunk_values(measures[lo:hi]).to(device)  # as run_chunk leaves them
            acc.add(token_block(seqs[lo:hi], values, vocab, columns))
        assert acc.device is not None and acc.device.type == torch.device(device).type
        tables[str(device)] = acc.tables()
    cpu, gpu = tables["cpu"], tables[str(DEVICE)]
    assert set(cpu) == set(gpu)
    for name, want in cpu.items():
        got = gpu[name]
        assert got.schema == want.schema and got.num_rows == want.num_rows, name
        for column in want.column_names:
            a = got[column].to_numpy(zero_copy_only=False)
            b = want[column].to_numpy(zero_copy_only=False)
            if column.endswith(("_sum", "_sumsq")):
                np.testing.assert_allclose(a.astype(float), b.astype(float), rtol=1e-13)
            else:  # singleton rows' NULLs read as NaN
                assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), (name, column)
