"""analyze(): sanity on the real MiniLM, segmenting, masking, padding invariance, dtypes."""

from __future__ import annotations

import math

import numpy as np
import pyarrow.compute as pc
import pytest
import torch

import mixscope
from mixscope.store.schema import TOKENS_SCHEMA

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Context mixing measures how much a token's new representation comes from other tokens.",
    "Short one.",
    "Robert Boulter is an English film, television and theatre actor.",
]


@pytest.fixture(scope="module")
def minilm(minilm_path):
    from transformers import AutoModel, AutoTokenizer

    return (
        AutoModel.from_pretrained(minilm_path, attn_implementation="eager"),
        AutoTokenizer.from_pretrained(minilm_path),
    )


def _measures(table, doc_id=None):
    t = table if doc_id is None else table.filter(pc.equal(table["doc_id"], doc_id))
    return np.stack([t[m].to_numpy() for m in mixscope.MEASURES], axis=1)


def test_schema_and_row_count(minilm):
    model, tok = minilm
    table = mixscope.analyze(minilm, SENTENCES)
    assert table.schema.equals(TOKENS_SCHEMA, check_metadata=True)
    n_tokens = sum(len(tok(s)["input_ids"]) for s in SENTENCES)
    assert table.num_rows == n_tokens * model.config.num_hidden_layers
    # one row per (doc, segment, position, layer), in that order, layers 1-based
    keys = list(
        zip(
            *(table[c].to_pylist() for c in ("doc_id", "segment", "position", "layer")), strict=True
        )
    )
    assert keys == sorted(set(keys))
    assert set(table["layer"].to_pylist()) == set(range(1, 7))
    assert table["token"].to_pylist()[0] == "[CLS]"


def test_real_model_sanity(minilm):
    table = mixscope.analyze(minilm, SENTENCES, verify=True)
    for m in mixscope.MEASURES:
        values = table[m].to_numpy()
        assert values.min() >= 0 and values.max() <= 1, m
    mean = {m: float(pc.mean(table[m]).as_py()) for m in mixscope.MEASURES}
    assert mean["attn_w"] > mean["attn_n"] > mean["attnres_n"]
    # exactly half: dividing a float32 by 2 is exact
    assert np.array_equal(table["attnres_w"].to_numpy(), table["attn_w"].to_numpy() / 2)


def test_padding_invariance(minilm):
    batched = mixscope.analyze(minilm, SENTENCES, batch_size=4)
    for doc_id, text in enumerate(SENTENCES):
        alone = mixscope.analyze(minilm, [text], batch_size=1)
        np.testing.assert_allclose(_measures(batched, doc_id), _measures(alone), atol=1e-5)


def test_long_document_is_segmented_not_truncated(minilm):
    _, tok = minilm
    text = " ".join(SENTENCES * 3)
    table = mixscope.analyze(minilm, [text], max_length=16)
    body = tok(text, add_special_tokens=False)["input_ids"]
    segments = math.ceil(len(body) / 14)
    assert sorted(set(table["segment"].to_pylist())) == list(range(segments))
    first_layer = table.filter(pc.equal(table["layer"], 1))
    ids = first_layer["token_id"].to_pylist()
    special = first_layer["is_special"].to_pylist()
    assert [i for i, s in zip(ids, special, strict=True) if not s] == body
    assert sum(special) == 2 * segments
    for seg in range(segments):
        seg_rows = first_layer.filter(pc.equal(first_layer["segment"], seg))
        tokens = seg_rows["token"].to_pylist()
        assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and len(tokens) <= 16
        assert seg_rows["position"].to_pylist() == list(range(len(tokens)))


def test_pair_gets_token_types(minilm):
    table = mixscope.analyze(minilm, [("A first paragraph.", "And a second one.")])
    first = table.filter(pc.equal(table["layer"], 1))
    tokens = first["token"].to_pylist()
    types = first["token_type"].to_pylist()
    sep = tokens.index("[SEP]")
    assert set(types[: sep + 1]) == {0} and set(types[sep + 1 :]) == {1}
    assert tokens.count("[SEP]") == 2


def test_masking_protocol(minilm):
    _, tok = minilm
    texts = [" ".join(SENTENCES)] * 2 + SENTENCES
    a = mixscope.analyze(minilm, texts, mask_rate=0.12, seed=7)
    b = mixscope.analyze(minilm, texts, mask_rate=0.12, seed=7)
    c = mixscope.analyze(minilm, texts, mask_rate=0.12, seed=8)
    first = lambda t: t.filter(pc.equal(t["layer"], 1))  # noqa: E731
    fa, fb, fc = first(a), first(b), first(c)
    assert fa["is_masked"].to_pylist() == fb["is_masked"].to_pylist()
    assert fa["is_masked"].to_pylist() != fc["is_masked"].to_pylist()
    for doc_id, text in enumerate(texts):
        rows = fa.filter(pc.equal(fa["doc_id"], doc_id))
        masked = np.array(rows["is_masked"].to_pylist())
        special = np.array(rows["is_special"].to_pylist())
        ids = np.array(rows["token_id"].to_pylist())
        n_normal = int((~special).sum())
        assert masked.sum() == max(1, math.floor(0.12 * n_normal + 0.5))
        assert not (masked & special).any()
        assert (ids[masked] == tok.mask_token_id).all()
        original = np.array(tok(text)["input_ids"])
        assert (ids[~masked] == original[~masked]).all()
    # positions depend on the document, not its index: docs 0 and 1 are the same text
    d0 = fa.filter(pc.equal(fa["doc_id"], 0))["is_masked"].to_pylist()
    d1 = fa.filter(pc.equal(fa["doc_id"], 1))["is_masked"].to_pylist()
    assert d0 == d1


def test_any_attention_implementation_and_restored(tiny):
    from tiny_models import build

    eager = mixscope.analyze(tiny("bert"), SENTENCES[:2])
    model, tok = build("bert", torch.float64, attn="sdpa")
    table = mixscope.analyze((model, tok), SENTENCES[:2])
    np.testing.assert_allclose(_measures(table), _measures(eager), atol=1e-10)
    assert model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_weights_float32_statistics(dtype):
    from tiny_models import build

    model, tok = build("bert", torch.float32)
    ref = mixscope.analyze((model, tok), SENTENCES, dtype="float32")
    low = mixscope.analyze((model, tok), SENTENCES, dtype=dtype, verify=True)
    assert low.schema.field("attn_n").type == "float"
    assert np.abs(_measures(low) - _measures(ref)).mean() < 0.02


def test_contribution_maps_shapes(minilm):
    maps = mixscope.contribution_maps(
        minilm, ["A short sentence.", "Another, longer sentence here."]
    )
    assert [m.doc_id for m in maps] == [0, 1]
    for m in maps:
        n = len(m.tokens)
        assert m.attn_n.shape == m.attnres_n.shape == m.attnresln_n.shape == (6, n, n)
        # off the diagonal, the residual adds nothing
        off = ~np.eye(n, dtype=bool)
        assert np.array_equal(m.attn_n[:, off], m.attnres_n[:, off])
        assert (m.attnresln_n >= 0).all()


# ---------------------------------------------------------------- a first hour's API


def test_dir_lists_the_public_api():
    """``dir(mixscope)`` (and a notebook's completion) shows the lazily loaded names."""
    names = dir(mixscope)
    assert {"analyze", "open", "contribution_maps", "to_pandas", "Results"} <= set(names)
    assert names == sorted(mixscope.__all__)


def test_analyze_defaults_to_the_cli_s_model(minilm):
    """``analyze(texts=[...])`` and ``analyze([...])`` take the packaged MiniLM, as the CLI
    does: the same rows as the loaded MiniLM's; no texts at all is one clear error."""
    from mixscope.errors import MixscopeError

    texts = ["The cat sat on the mat.", "A dog barked."]
    want = mixscope.analyze(minilm, texts)
    for got in (mixscope.analyze(texts=texts), mixscope.analyze(texts)):
        assert (
            got.num_rows
            == want.num_rows
            == 6
            * sum(  # 6 layers, tokens with CLS/SEP
                len(minilm[1](t)["input_ids"]) for t in texts
            )
        )
        assert np.allclose(got["attn_n"].to_numpy(), want["attn_n"].to_numpy(), atol=1e-6)
    with pytest.raises(MixscopeError, match="no texts"):
        mixscope.analyze()


def test_weight_loading_bars_stay_off_unless_asked(minilm_path, capfd):
    """transformers' weight-loading bar would print into a notebook: off by default,
    there with ``progress=True``, and the global setting restored either way."""
    from transformers.utils import logging as hf_logging

    before = hf_logging.is_progress_bar_enabled()  # a CLI test in this process may turn it off
    mixscope.analyze(str(minilm_path), ["A sentence."])
    quiet = capfd.readouterr().err
    mixscope.analyze(str(minilm_path), ["A sentence."], progress=True)
    shown = capfd.readouterr().err
    assert "Loading weights" not in quiet and "Loading weights" in shown
    assert hf_logging.is_progress_bar_enabled() == before


def test_all_reports_the_groups_it_skipped(tiny):
    """``measures="all"`` on OLMo-2 (no norm after the attention's residual sum: no
    ``globenc``) says so in one warning and in the table's metadata, with why."""
    import json

    model, tok = tiny("olmo2", torch.float32)
    with pytest.warns(UserWarning, match="skipped groups that do not apply: globenc") as rec:
        table = mixscope.analyze((model, tok), ["A short text."], measures="all")
    assert len(rec) == 1
    meta = table.schema.metadata
    skipped = json.loads(meta[b"mixscope.skipped"])
    assert list(skipped) == ["globenc", "learned_sink"] and skipped["globenc"]
    assert "ffresln_n" in table.column_names and "globenc_n" not in table.column_names
