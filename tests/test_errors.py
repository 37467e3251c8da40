"""Bad input: one clear line, a MixscopeError (the CLI turns it into a non-zero exit)."""

from __future__ import annotations

import pytest

import mixscope
from mixscope.errors import MixscopeError, UnsupportedArchitectureError


@pytest.fixture(scope="module")
def t5_dir(tmp_path_factory):
    """An encoder-decoder (T5): not supported."""
    from transformers import T5Config, T5Model

    path = tmp_path_factory.mktemp("t5")
    config = T5Config(
        vocab_size=64,
        d_model=16,
        d_kv=8,
        d_ff=32,
        num_layers=1,
        num_heads=2,
        decoder_start_token_id=0,
    )
    T5Model(config).save_pretrained(path)
    return str(path)


@pytest.mark.parametrize(
    ("texts", "message"),
    [
        ([], "no texts given"),
        (["ok", ""], "text 1 is empty"),
        (["   "], "text 0 is empty"),
        ([("a", "")], "text 0 is a pair with an empty side"),
        ([3], "text 0 is a int"),
    ],
)
def test_bad_texts(minilm_path, texts, message):
    with pytest.raises(MixscopeError, match=message):
        mixscope.analyze(minilm_path, texts)


def test_missing_path(tmp_path):
    with pytest.raises(MixscopeError, match="does not exist"):
        mixscope.analyze(str(tmp_path / "nope"), ["x"])


def test_not_a_model_directory(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(MixscopeError, match="not a model directory"):
        mixscope.analyze(str(tmp_path), ["x"])


def test_unsupported_architecture(t5_dir):
    with pytest.raises(UnsupportedArchitectureError) as info:
        mixscope.analyze(t5_dir, ["x"])
    msg = str(info.value)
    assert "'t5'" in msg and "bert" in msg and "distilbert" in msg and "\n" not in msg
    assert "gpt2" in msg and "llama" in msg  # the decoders are listed among the supported


def test_max_length_beyond_model(minilm_path):
    with pytest.raises(MixscopeError, match="max_length 1024 exceeds this model's limit of 512"):
        mixscope.analyze(minilm_path, ["x"], max_length=1024)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"batch_size": 0}, "batch_size must be at least 1"),
        ({"mask_rate": 1.5}, "mask_rate must be in"),
        ({"dtype": "int8"}, "unknown dtype"),
        ({"device": "cuda:7"}, "CUDA is not available")
        if not __import__("torch").cuda.is_available()
        else ({"max_length": 2}, "at least 4"),
    ],
)
def test_bad_options(minilm_path, options, message):
    with pytest.raises(MixscopeError, match=message):
        mixscope.analyze(minilm_path, ["some text"], **options)
