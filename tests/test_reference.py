"""The engine against the brute-force float64 reference (tests/reference.py).

Every family's tiny random model (all biases non-zero, LayerNorm gains away from 1) and the
real MiniLM; single texts, a (text, text_pair) pair, a padded batch and masked inputs; the
engine in float64 (1e-5) and float32 (1e-4). The reference itself is validated first: its
exactness identity must rebuild the model's real LN1 output.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import mixscope
import reference as R
from tiny_models import FAMILIES

TOL = {"float64": 1e-5, "float32": 1e-4}

SINGLE = ["The cat sat on the mat.", "Colorless green ideas sleep furiously tonight."]
PAIR = [("A dog barked loudly at night.", "The neighbours were not amused at all.")]
PADDED = [
    "Short one.",
    "A somewhat longer sentence with quite a few more tokens in it.",
    "Medium length text here, okay?",
    ("Then a pair:", "with a second part."),
]
MASKED = [
    "Masking replaces some of the ordinary tokens by the mask token.",
    "Only non-special tokens are ever masked.",
    ("The first side of a pair", "and its second side."),
]
CASES = {
    "single": dict(texts=SINGLE, batch_size=1),
    "pair": dict(texts=PAIR, batch_size=1),
    "padded": dict(texts=PADDED, batch_size=4),
    "masked": dict(texts=MASKED, batch_size=3, mask_rate=0.3, seed=11),
}

# largest |engine − reference| seen, for the record (printed with -s)
OBSERVED: dict[str, float] = {}


def _note(key: str, value: float) -> None:
    OBSERVED[key] = max(OBSERVED.get(key, 0.0), value)
    print(f"{key}: {value:.3g}")


# ---------------------------------------------------------------- helpers


def _encode(tok, doc):
    enc = tok(*((doc,) if isinstance(doc, str) else doc), return_special_tokens_mask=True)
    types = enc.get("token_type_ids") or [0] * len(enc["input_ids"])
    return enc["input_ids"], types, enc["special_tokens_mask"]


def _engine_rows(table, layers: int) -> dict:
    """(doc_id, segment) → per-sequence columns and measures [layer, measure, n]."""
    cols = {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.schema.names}
    keys = np.stack([cols["doc_id"], cols["segment"], cols["position"], cols["layer"]])
    order = np.lexsort(keys[::-1])
    assert np.array_equal(order, np.arange(len(order))), "rows not ordered by doc/seg/pos/layer"
    out = {}
    for doc, seg in sorted(
        set(zip(cols["doc_id"].tolist(), cols["segment"].tolist(), strict=True))
    ):
        sel = (cols["doc_id"] == doc) & (cols["segment"] == seg)
        n = int(sel.sum()) // layers
        assert n * layers == int(sel.sum())
        layer = cols["layer"][sel].reshape(n, layers)
        assert (layer == np.arange(1, layers + 1)).all(), "layers are not 1..L per position"
        pos = cols["position"][sel].reshape(n, layers)[:, 0]
        assert np.array_equal(pos, np.arange(n))
        per_tok = lambda c, sel=sel, n=n: cols[c][sel].reshape(n, layers)[:, 0]  # noqa: E731
        measures = np.stack([cols[m][sel].reshape(n, layers) for m in R.MEASURES])
        out[(doc, seg)] = {
            "token_id": per_tok("token_id"),
            "token_type": per_tok("token_type"),
            "is_special": per_tok("is_special"),
            "is_masked": per_tok("is_masked"),
            "measures": measures.transpose(2, 0, 1).astype(np.float64),  # [layer, measure, n]
        }
    return out


def _reference_inputs(tok, doc, row, mask_rate: float):
    """Input ids/types the model must have seen; checks the table's token columns."""
    ids, types, special = _encode(tok, doc)
    ids, types, special = np.array(ids), np.array(types), np.array(special, dtype=bool)
    assert np.array_equal(row["token_type"], types)
    assert np.array_equal(row["is_special"], special)
    seen = row["token_id"].astype(np.int64)
    masked = row["is_masked"]
    if mask_rate:
        expected = max(1, int(np.floor(mask_rate * (~special).sum() + 0.5)))
        assert masked.sum() == expected
        assert not (masked & special).any()
        assert (seen[masked] == tok.mask_token_id).all()
    else:
        assert not masked.any()
    assert np.array_equal(seen[~masked], ids[~masked])
    return seen.tolist(), types.tolist()


def _compare(ref_model, engine_model, tok, case: str, dtype: str, refs: dict | None = None):
    """Max |engine − reference| over all rows of one case; asserts the tolerance."""
    spec = CASES[case]
    layers = len(R.blocks(ref_model))
    table = mixscope.analyze(
        engine_model,
        spec["texts"],
        batch_size=spec["batch_size"],
        mask_rate=spec.get("mask_rate", 0.0),
        seed=spec.get("seed", 0),
        dtype=dtype,
    )
    rows = _engine_rows(table, layers)
    assert sorted(rows) == [(d, 0) for d in range(len(spec["texts"]))]
    worst = 0.0
    for (doc_id, _), row in rows.items():
        ids, types = _reference_inputs(tok, spec["texts"][doc_id], row, spec.get("mask_rate", 0))
        key = (case, doc_id)
        if refs is not None and key in refs:
            ref = refs[key]
        else:
            ref = R.reference(ref_model, ids, types).measures()
            if refs is not None:
                refs[key] = ref
        diff = np.abs(row["measures"] - ref)
        assert np.isfinite(row["measures"]).all()
        worst = max(worst, float(diff.max()))
        bad = np.argwhere(diff > TOL[dtype])
        assert bad.size == 0, (
            f"{case} doc {doc_id}: {len(bad)} values off by up to {diff.max():.3g}; first "
            f"(layer, measure, pos) = {bad[0].tolist()} measure {R.MEASURES[bad[0][1]]}"
        )
    return worst


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def minilm(minilm_path):
    """The real MiniLM, loaded once: float64 for the reference, float32 for the engine."""
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(minilm_path)
    m64 = AutoModel.from_pretrained(minilm_path, attn_implementation="eager", dtype=torch.float64)
    m32 = AutoModel.from_pretrained(minilm_path, attn_implementation="eager", dtype=torch.float32)
    return {"tok": tok, "float64": m64.eval(), "float32": m32.eval(), "refs": {}}


# ---------------------------------------------------------------- the reference itself


@pytest.mark.parametrize("family", FAMILIES)
def test_reference_exactness_tiny(tiny, family):
    model, tok = tiny(family, torch.float64)
    for doc in [SINGLE[0], PAIR[0]]:
        ids, types, _ = _encode(tok, doc)
        ref = R.reference(model, ids, types)
        assert len(ref.layers) == 2
        for li, (b, z_real, y_real) in enumerate(
            zip(ref.layers, ref.run.ln_in, ref.run.ln_out, strict=True)
        ):
            assert np.abs(b.z - z_real).max() <= 1e-10  # z rebuilt from x, α, W, b
            assert np.abs(b.ln_of_z - y_real).max() <= 1e-10
            assert np.abs(b.rebuilt - y_real).max() <= 1e-10  # Σ_j F_i(x_j) + bias terms
            # sanity of the materialized parts
            assert np.allclose(b.alpha.sum(axis=2), 1.0)
            assert np.allclose(b.r.sum(axis=1), b.a.sum(axis=1) + ref.run.hidden[li])
            _note(f"identity/{family}", float(np.abs(b.rebuilt - y_real).max()))


def test_reference_exactness_minilm(minilm):
    model, tok = minilm["float64"], minilm["tok"]
    ids, types, _ = _encode(tok, PAIR[0])
    ref = R.reference(model, ids, types)
    assert len(ref.layers) == 6
    for b, z_real, y_real in zip(ref.layers, ref.run.ln_in, ref.run.ln_out, strict=True):
        assert np.abs(b.z - z_real).max() <= 1e-10
        assert np.abs(b.rebuilt - y_real).max() <= 1e-10
        _note("identity/minilm", float(np.abs(b.rebuilt - y_real).max()))


@pytest.mark.parametrize("family", ["bert", "distilbert"])
def test_reference_padding_mask(tiny, family):
    """The reference's own mask handling: right padding changes nothing on real tokens."""
    model, tok = tiny(family, torch.float64)
    ids, types, _ = _encode(tok, SINGLE[1])
    n = len(ids)
    plain = R.reference(model, ids, types)
    padded = R.reference(model, ids + [0] * 3, types + [0] * 3, [1] * n + [0] * 3)
    assert np.abs(plain.measures() - padded.measures()).max() <= 1e-10
    for name in ("attn_n", "attnres_n", "attnresln_n"):
        assert np.abs(plain.pairs(name) - padded.pairs(name)).max() <= 1e-10
    for b, y_real in zip(padded.layers, padded.run.ln_out, strict=True):
        assert np.abs(b.rebuilt[:n] - y_real[:n]).max() <= 1e-10
        assert np.abs(b.alpha[:, :, n:]).max() == 0.0


# ---------------------------------------------------------------- engine vs reference


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("family", FAMILIES)
def test_measures_tiny_float64(tiny, family, case):
    model, tok = tiny(family, torch.float64)
    _note(f"measures/{family}/float64", _compare(model, (model, tok), tok, case, "float64"))


@pytest.mark.parametrize("case", ["padded", "masked"])
@pytest.mark.parametrize("family", FAMILIES)
def test_measures_tiny_float32(tiny, family, case):
    """The engine on the float32 copy (same parameter values) against the float64 reference."""
    m64, tok = tiny(family, torch.float64)
    m32, _ = tiny(family, torch.float32)
    _note(f"measures/{family}/float32", _compare(m64, (m32, tok), tok, case, "float32"))


@pytest.mark.parametrize("case", ["pair", "padded", "masked"])
def test_measures_minilm_float64(minilm, case):
    m, tok = minilm["float64"], minilm["tok"]
    worst = _compare(m, (m, tok), tok, case, "float64", minilm["refs"])
    _note("measures/minilm/float64", worst)


@pytest.mark.parametrize("case", ["padded", "masked"])
def test_measures_minilm_float32(minilm, minilm_path, case):
    """Through the path loader with ``dtype="float32"``, against the float64 reference."""
    m, tok = minilm["float64"], minilm["tok"]
    worst = _compare(m, minilm_path, tok, case, "float32", minilm["refs"])
    _note("measures/minilm/float32", worst)


def _compare_maps(model, tok, texts, batch_size: int) -> float:
    maps = mixscope.contribution_maps((model, tok), texts, batch_size=batch_size, dtype="float64")
    assert [(m.doc_id, m.segment) for m in maps] == [(d, 0) for d in range(len(texts))]
    layers = len(R.blocks(model))
    worst = 0.0
    for cm in maps:
        ids, types, _ = _encode(tok, texts[cm.doc_id])
        assert cm.token_ids == ids
        ref = R.reference(model, ids, types)
        for name in ("attn_n", "attnres_n", "attnresln_n"):
            got = getattr(cm, name).astype(np.float64)
            want = ref.pairs(name)
            assert got.shape == want.shape == (layers, len(ids), len(ids))
            diff = np.abs(got - want)
            assert diff.max() <= TOL["float64"], f"{name}: max diff {diff.max():.3g}"
            worst = max(worst, float(diff.max()))
    return worst


@pytest.mark.parametrize("family", FAMILIES)
def test_contribution_maps_tiny(tiny, family):
    model, tok = tiny(family, torch.float64)
    texts = [SINGLE[0], PAIR[0], PADDED[1]]
    worst = max(_compare_maps(model, tok, texts, 1), _compare_maps(model, tok, texts, 3))
    _note(f"maps/{family}/float64", worst)


def test_contribution_maps_minilm(minilm):
    m, tok = minilm["float64"], minilm["tok"]
    _note("maps/minilm/float64", _compare_maps(m, tok, [PAIR[0], SINGLE[0]], 2))


# ---------------------------------------------------------------- verify, negative control


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("family", FAMILIES)
def test_verify_passes(tiny, family, dtype):
    model, tok = tiny(family, getattr(torch, dtype))
    table = mixscope.analyze((model, tok), PADDED, batch_size=4, verify=True, dtype=dtype)
    assert table.num_rows > 0


def test_verify_passes_minilm(minilm):
    m, tok = minilm["float32"], minilm["tok"]
    table = mixscope.analyze((m, tok), PADDED, batch_size=4, verify=True, dtype="float32")
    assert table.num_rows > 0


@pytest.mark.parametrize("family", FAMILIES)
def test_negative_control_bias_outside(tiny, family):
    """b_V moved outside f still rebuilds the LN output exactly, yet the comparison sees it."""
    model, tok = tiny(family, torch.float64)
    ids, types, _ = _encode(tok, PAIR[0])
    wrong = R.reference(model, ids, types, bias_v_inside=False)
    for b, y_real in zip(wrong.layers, wrong.run.ln_out, strict=True):
        assert np.abs(b.rebuilt - y_real).max() <= 1e-10  # the identity cannot tell
    table = mixscope.analyze((model, tok), PAIR, dtype="float64")
    row = _engine_rows(table, len(wrong.layers))[(0, 0)]
    k = R.MEASURES.index("attn_n")
    gap = np.abs(row["measures"][:, k] - wrong.measures()[:, k]).max()
    assert gap > 1e-3, f"the wrong variant is indistinguishable (gap {gap:.3g})"
