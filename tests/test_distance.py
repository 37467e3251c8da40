"""The ``distance`` group (docs/method.md §5e) against the float64 brute force.

Every family's tiny random model in float64, padded right and left, eager and fast, against
tests/reference_distance.py's textbook loop over materialised per-source vectors
(tests/reference.py for post-LN encoders, tests/reference_decoder.py for the rest): within
1e-5. The negative controls: weights in place of norms on the norm side are far from the
engine, and the exactness identity catches them. Hand-computed buckets and block edges, the
fast path's recomputed rows against the eager weights, and a bucket count below 12.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import mixscope
import reference as R
import reference_decoder as RD
from mixscope.errors import ExactnessError, MixscopeError
from mixscope.mixing import distance as D
from mixscope.mixing.alpha_rows import ScoreInputs
from reference_distance import distance_measures
from tiny_models import DECODER_FAMILIES, FAMILIES, PRE_LN_ENCODERS

NAMES = tuple(f"dist_{k}_{b}" for k in ("n", "w") for b in range(12))
TEXTS = [
    "The cat sat on the mat.",
    "A somewhat longer sentence with quite a few more tokens in it, to pad the others.",
    "Short one.",
]
TOL = 1e-5
OBSERVED: dict[str, float] = {}


def _reference(model, tok, text: str, post_ln: bool, **kw) -> np.ndarray:
    """[layer, measure (NAMES), n] of one unpadded sequence, float64 brute force."""
    enc = tok(text)
    ids = enc["input_ids"]
    if post_ln:
        types = enc.get("token_type_ids") or [0] * len(ids)
        run = R.reference(model, ids, types)
        layers = [(b.alpha, b.a) for b in run.layers]
    else:
        run = RD.reference(model, ids, layer_inputs=RD.capture(model, ids).x)
        layers = [(b.alpha, b.a) for b in run.layers]
    return np.stack(
        [np.stack([distance_measures(al, a, **kw)[k] for k in NAMES]) for al, a in layers]
    )


def _engine(table, doc: int, n: int, layers: int) -> np.ndarray:
    sel = table["doc_id"].to_numpy() == doc
    return np.stack([table[k].to_numpy()[sel].reshape(n, layers).T for k in NAMES], axis=1)


_REFS: dict = {}


@pytest.mark.parametrize("family", FAMILIES + DECODER_FAMILIES + PRE_LN_ENCODERS)
def test_engine_matches_the_float64_brute_force(tiny, family):
    model, tok = tiny(family, torch.float64)
    post_ln = family in FAMILIES
    worst = {"eager": 0.0, "fast": 0.0}
    refs = [_reference(model, tok, t, post_ln) for t in TEXTS]
    for attention in ("eager", "fast"):
        for side in ("right", "left"):
            table = mixscope.analyze(
                (model, tok), TEXTS, dtype="float64", measures="distance",
                attention=attention, padding_side=side, batch_size=len(TEXTS),
            )  # fmt: skip
            for d, want in enumerate(refs):
                got = _engine(table, d, want.shape[2], want.shape[0])
                worst[attention] = max(worst[attention], float(np.abs(got - want).max()))
    for attention, err in worst.items():
        OBSERVED[f"{family}/{attention}"] = err
        print(f"distance/{family}/{attention}: {err:.3g}")
        assert err <= TOL, (attention, err)
    # the profile is not trivial: some weight beyond the nearest bucket, shares sum to 1
    assert max(r[:, 1:12].sum(axis=1).max() for r in refs) > 0.1
    assert np.allclose(refs[0][:, :12].sum(axis=1)[:, 1:], 1.0)


@pytest.mark.parametrize("family", ["bert", "llama-gqa2", "gemma2"])
def test_weights_in_place_of_norms_are_far_from_the_engine(tiny, family):
    """Negative control: the same brute force with ᾱ_ij where ‖a_ij‖ belongs."""
    model, tok = tiny(family, torch.float64)
    table = mixscope.analyze((model, tok), TEXTS[:1], dtype="float64", measures="distance")
    right = _reference(model, tok, TEXTS[0], family in FAMILIES)
    wrong = _reference(model, tok, TEXTS[0], family in FAMILIES, use_weights=True)
    got = _engine(table, 0, right.shape[2], right.shape[0])
    assert np.abs(got - right).max() <= TOL
    assert np.abs(got[:, :12] - wrong[:, :12]).max() > 1e-2


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("family", ["bert", "gpt2", "llama-mqa", "gemma2", "gpt-oss", "mixtral"])
def test_verify_passes(tiny, family, dtype):
    model, tok = tiny(family, dtype)
    mixscope.analyze((model, tok), TEXTS, measures="distance", verify=True, padding_side="left")


def test_verify_catches_weights_in_place_of_norms(tiny, monkeypatch):
    # the check imports pair_values by name on first use: imported here first, it keeps the
    # real one (imported under the patch, every later verify in the session failed)
    import mixscope.mixing.distance_check

    model, tok = tiny("llama-gqa2", torch.float64)

    def weights_as_norms(alpha: torch.Tensor, mix: torch.Tensor) -> torch.Tensor:
        return alpha.mean(dim=2).expand(2, -1, -1, -1)

    monkeypatch.setattr(D, "pair_values", weights_as_norms)
    with pytest.raises(ExactnessError, match=r"‖a_ij‖"):
        mixscope.analyze((model, tok), TEXTS, measures="distance", verify=True)


def test_verify_catches_a_bucket_edge_that_counts_the_token_itself(tiny, monkeypatch):
    member = D._membership

    def counts_itself(lo, span, buckets, dtype, device):  # δ = 0 in the first bucket
        m = member(lo, span, buckets, dtype, device).clone()
        if 0 <= lo < span:
            m[lo, 0] = 1.0
        return m

    monkeypatch.setattr(D, "_membership", counts_itself)
    model, tok = tiny("bert", torch.float64)
    with pytest.raises(ExactnessError, match="Σ_b"):
        mixscope.analyze((model, tok), TEXTS, measures="distance", verify=True)


# ---------------------------------------------------------------- the pieces, by hand


def test_buckets_by_hand():
    assert [D.bucket_of(d) for d in (1, 2, 3, 4, 7, 8, 2047, 2048, 10**6)] == [
        0, 1, 1, 2, 2, 3, 10, 11, 11,
    ]  # fmt: skip
    assert D.bucket_of(5, buckets=2) == 1
    # one row, query i = 4 of 7 tokens, pair values 10^j: sources 3 (δ1), 5 (δ1), 2 and 6
    # (δ2), 1 and 0 (δ3, δ4)
    pairs = torch.tensor([[1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6]])
    got = D.bucket_sums(pairs.mT, start=4, buckets=3).mT  # buckets {1}, {2, 3}, {4, ...}
    assert got.tolist() == [[1e3 + 1e5, 100.0 + 10.0 + 1e6, 1.0]]
    # sources past the last one given (a causal block's later keys) add nothing
    assert torch.equal(D.bucket_sums(pairs[:, :5].mT, 4, 3), D.bucket_sums(
        torch.cat([pairs[:, :5], torch.zeros(1, 2)], 1).mT, 4, 3))  # fmt: skip
    # every row of an 8-token block split in two blocks of rows: the same sums
    full = torch.rand(2, 8, 8, dtype=torch.float64)
    whole = D.bucket_sums(full.mT, 0, 12).mT  # [2, rows, K]
    parts = torch.cat(
        [D.bucket_sums(full[:, :3].mT, 0, 12).mT, D.bucket_sums(full[:, 3:].mT, 3, 12).mT], 1
    )
    assert torch.equal(whole, parts)
    loop = torch.zeros(2, 8, 12, dtype=torch.float64)
    for i in range(8):
        for j in range(8):
            if i != j:
                loop[:, i, D.bucket_of(abs(i - j))] += full[:, i, j]
    assert torch.allclose(whole, loop, rtol=0, atol=1e-12)


def test_every_bucket_column_knows_its_bucket():
    """The registry's profile columns, by name → bucket: the 12 by norm then the 12 by
    weight, each near to far; no other column is a bucket."""
    from mixscope.registry import all_columns
    from mixscope.sql.summary import profile_buckets

    got = profile_buckets()
    want = {f"dist_{side}_{b}": b for side in "nw" for b in range(D.MAX_BUCKETS)}
    assert got == want
    assert not {c.name for c in all_columns() if c.profile is None} & set(got)


def test_shares_sum_to_one_or_zero():
    sums = torch.tensor([[[1.0, 0.0]], [[3.0, 0.0]]])  # [K=2, batch 1, seq 2]
    got = D.shares(sums)
    assert got[:, 0, 0].tolist() == [0.25, 0.75] and got[:, 0, 1].tolist() == [0.0, 0.0]


@pytest.mark.parametrize("softcap", [None, 2.0])
@pytest.mark.parametrize("masking", ["causal", "bool", "additive", "none"])
def test_recomputed_rows_equal_the_softmax(masking, softcap):
    """α's rows from q, k and LSE (grouped heads: 4 query, 2 key/value) against a float64
    softmax, in two blocks of rows: the kernel's is_causal, a boolean keep-mask and an
    additive one (the second sequence's first two keys padding), or no mask at all."""
    g = torch.Generator().manual_seed(0)
    b, h, kv, n, e, scale = 2, 4, 2, 9, 5, 0.3
    q = torch.randn(b, h, n, e, generator=g, dtype=torch.float64)
    k = torch.randn(b, kv, n, e, generator=g, dtype=torch.float64)
    keep = torch.ones(b, 1, n, n, dtype=torch.bool)
    if masking == "causal":
        keep = keep & torch.ones(n, n, dtype=torch.bool).tril()
    elif masking != "none":
        keep[1, :, :, :2] = False
    s = (q @ k.repeat_interleave(h // kv, 1).transpose(-1, -2)) * scale  # [b, h, n, n]
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    s = s.masked_fill(~keep, float("-inf"))
    want = torch.softmax(s, dim=-1)
    mask = {
        "bool": keep,
        "additive": torch.zeros(keep.shape, dtype=torch.float64).masked_fill(~keep, -torch.inf),
    }.get(masking)
    scores = ScoreInputs(q, k, mask, torch.logsumexp(s, -1), scale, masking == "causal", softcap)
    got = torch.cat([scores.rows(0, 4, torch.float64), scores.rows(4, n, torch.float64)], 2)
    assert torch.allclose(got, want, rtol=0, atol=1e-12)
    # source-major, the sources that can have a weight: the same numbers, transposed
    for start, stop in ((0, 4), (4, n), (3, 4)):
        src = scores.sources(start, stop, torch.float64)  # [b, sources, h, rows]
        cols = src.shape[1]
        assert cols == (stop if masking == "causal" else n)
        rows = want[:, :, start:stop].permute(0, 3, 1, 2)  # [b, n, h, rows]
        assert torch.allclose(src, rows[:, :cols], rtol=0, atol=1e-12)
        assert (rows[:, cols:] == 0).all()


def test_small_blocks_give_the_same_profile(tiny):
    """O(seq · block) memory: one row per block equals one block for the whole sequence."""
    from mixscope.mixing.block_tensors import BlockParams

    g = torch.Generator().manual_seed(1)
    b, h, n, e, d = 2, 4, 11, 3, 12
    alpha = torch.softmax(torch.randn(b, h, n, n, generator=g, dtype=torch.float64), -1)
    values = torch.randn(b, n, h * e, generator=g, dtype=torch.float64)
    p = BlockParams(
        w_out=torch.randn(d, h * e, generator=g, dtype=torch.float64),
        b_out=torch.zeros(d, dtype=torch.float64), norm=None, heads=h, kv_heads=h,
    )  # fmt: skip
    whole = D.distance_sums(alpha, None, values, p)
    rowwise = D.distance_sums(alpha, None, values, p, plan=(b * h * n, None))  # a row a block
    assert torch.allclose(whole, rowwise, rtol=1e-12, atol=1e-12)
    # the materialised per-pair norms, by hand
    f = torch.einsum("bjhe,dhe->bhjd", values.reshape(b, n, h, e), p.w_out.reshape(d, h, e))
    a = torch.einsum("bhij,bhjd->bijd", alpha, f)
    mix = D.head_mix(D.head_grams(values, p, budget=b * h * d), torch.float64)
    src = alpha.permute(0, 3, 1, 2)  # [b, sources, h, rows]
    norms, weights = D.pair_values(src, mix).mT  # [b, rows, sources]
    assert torch.allclose(norms, torch.linalg.vector_norm(a, dim=-1), rtol=1e-10, atol=1e-12)
    assert torch.allclose(weights, alpha.mean(dim=1), rtol=0, atol=1e-15)
    # a singular Gram matrix (two heads' vectors equal): the eigen factor, still exact
    values[..., e : 2 * e] = values[..., :e]
    p.w_out[:, e : 2 * e] = p.w_out[:, :e]
    mix = D.head_mix(D.head_grams(values, p), torch.float64)
    f = torch.einsum("bjhe,dhe->bhjd", values.reshape(b, n, h, e), p.w_out.reshape(d, h, e))
    a = torch.einsum("bhij,bhjd->bijd", alpha, f)
    norms = D.pair_values(alpha.permute(0, 3, 1, 2), mix)[0].mT
    assert torch.allclose(norms, torch.linalg.vector_norm(a, dim=-1), rtol=1e-7, atol=1e-10)


def test_the_gpu_block_plan_gives_the_cpus_sums(tiny):
    """The GPU's blocks (the shared score budget, no row cap) and the CPU's (48-row blocks
    of a causal sequence) give the same sums, computed here on the CPU from recomputed rows
    (grouped heads) in float64; each device picks its own plan."""
    from mixscope.mixing.alpha_rows import BLOCK_SCORES
    from mixscope.mixing.block_tensors import BlockParams

    assert D.block_plan(torch.device("cpu")) == (D.BLOCK, D.ROWS)
    assert D.block_plan(torch.device("cuda", 0)) == (BLOCK_SCORES, None)
    g = torch.Generator().manual_seed(3)
    b, h, kv, n, e, d = 2, 4, 2, 3 * D.ROWS + 5, 6, 16
    q = torch.randn(b, h, n, e, generator=g, dtype=torch.float64)
    k = torch.randn(b, kv, n, e, generator=g, dtype=torch.float64)
    s = (q @ k.repeat_interleave(h // kv, 1).transpose(-1, -2)) * 0.4  # [b, h, n, n]
    s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    scores = ScoreInputs(q, k, None, torch.logsumexp(s, -1), 0.4, True)
    values = torch.randn(b, n, kv * e, generator=g, dtype=torch.float64)
    p = BlockParams(
        w_out=torch.randn(d, h * e, generator=g, dtype=torch.float64),
        b_out=torch.zeros(d, dtype=torch.float64), norm=None, heads=h, kv_heads=kv,
    )  # fmt: skip
    blocks = {}  # rows per block under each plan
    for name, (budget, cap) in (("cpu", (D.BLOCK, D.ROWS)), ("gpu", (BLOCK_SCORES, None))):
        walk = D.row_blocks(None, scores, (b, h, n), torch.float64, budget, cap=cap)
        blocks[name] = [alpha.shape[-1] for _, alpha in walk]
    assert len(blocks["cpu"]) == 4 and max(blocks["cpu"]) <= D.ROWS and blocks["gpu"] == [n]
    cpu = D.distance_sums(None, scores, values, p)  # the CPU's own plan
    gpu = D.distance_sums(None, scores, values, p, plan=(BLOCK_SCORES, None))
    assert torch.allclose(cpu, gpu, rtol=1e-12, atol=1e-12)
    # and both equal the sums of the softmax's rows, given whole
    whole = D.distance_sums(torch.softmax(s, -1), None, values, p, plan=(BLOCK_SCORES, None))
    assert torch.allclose(cpu, whole, rtol=1e-10, atol=1e-12)


def test_fewer_buckets_merge_the_far_ones(tiny):
    from mixscope.mixing.engine import MixingEngine
    from mixscope.models.loading import load

    model, tok = tiny("llama", torch.float64)
    ids = tok(TEXTS[1], return_tensors="pt")
    n = ids["input_ids"].shape[1]
    loaded = load((model, tok))
    out = {}
    for k in (12, 3):
        engine = MixingEngine(loaded, measures="distance", distance_buckets=k)
        out[k] = engine.run(ids["input_ids"], ids["attention_mask"]).measures[0]
    twelve, three = out[12][:, :12], out[3][:, :12]  # [layer, bucket, seq] (norms)
    assert torch.allclose(three[:, :2], twelve[:, :2], atol=1e-12)
    assert torch.allclose(three[:, 2], twelve[:, 2:].sum(dim=1), atol=1e-12)
    assert (three[:, 3:] == 0).all() and n > 8
    with pytest.raises(MixscopeError, match="distance_buckets"):
        MixingEngine(loaded, measures="distance", distance_buckets=13)


def test_bucket_count_is_validated_and_in_the_identity_only_when_not_the_default(tmp_path):
    from mixscope.config import load_spec
    from mixscope.errors import SpecError
    from mixscope.runtime.prepare import identity_options

    corpus = tmp_path / "c.txt"
    corpus.write_text("one\ntwo\n")
    base = {"corpus.paths": [str(corpus)], "out": str(tmp_path / "out")}
    with pytest.raises(SpecError, match="distance_buckets: from 2 to 12"):
        load_spec(None, {**base, "analysis.distance_buckets": 13})
    default = load_spec(None, base)
    eight = load_spec(None, {**base, "analysis.distance_buckets": 8})
    groups = ("paper", "distance")
    assert "distance_buckets" not in identity_options(default, 128, groups)["analysis"]
    assert identity_options(eight, 128, groups)["analysis"]["distance_buckets"] == 8
    # without the group the count changes no number: the same run as the default's
    assert identity_options(eight, 128, ("paper",)) == identity_options(default, 128, ("paper",))
