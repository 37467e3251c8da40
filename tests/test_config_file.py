"""The driver's torch-free reading of a model directory (models/config_file.py) gives what
transformers gives: the same adapter, position limit and tokenizer limit on every family,
with the attributes config.json leaves out taken from the class defaults; and
preparing a run on a local model imports neither torch nor transformers."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from transformers import AutoConfig, AutoTokenizer

from mixscope.mixing.measures import resolved_measures
from mixscope.models.adapters import adapter_for, adapter_for_config, supported_model_types
from mixscope.models.config_file import DEFAULTS, STORED_AS, read_config, read_tokenizer_limit
from mixscope.models.resolve import (
    config_facts,
    position_limit,
    resolved_max_length,
)
from run_helpers import DEMO
from tiny_models import (
    DECODER_FAMILIES,
    FAMILIES,
    PRE_LN_ENCODERS,
    _config,
    minilm_dir,
    tokenizer,
)


def read_attributes(model_type: str) -> set[str]:
    """What mixscope reads of a config before the weights: the position limit and every
    adapter variant's attribute."""
    variants = {attr for attr, _, _ in adapter_for(model_type).variants}
    return {"max_position_embeddings", *variants}


@pytest.mark.parametrize("model_type", supported_model_types())
def test_defaults_are_the_config_class_defaults(model_type):
    assert set(DEFAULTS[model_type]) == read_attributes(model_type)
    config = AutoConfig.for_model(model_type)  # the class defaults
    for attr, default in DEFAULTS[model_type].items():
        assert getattr(config, attr) == default, (model_type, attr)
    stored_as = {a: k for a, k in type(config).attribute_map.items() if a in DEFAULTS[model_type]}
    assert STORED_AS.get(model_type, {}) == stored_as


def test_every_supported_model_type_has_defaults():
    assert set(DEFAULTS) == set(supported_model_types())


def save(config, path, *, limit: object = "keep"):
    """``config`` and the MiniLM tokenizer saved as a model directory (no weights needed);
    ``limit``: what tokenizer_config.json's model_max_length becomes (None: removed)."""
    config.save_pretrained(path)
    tokenizer().save_pretrained(path)
    if limit != "keep":
        tok_file = path / "tokenizer_config.json"
        data = json.loads(tok_file.read_text())
        data.pop("model_max_length", None)
        if limit is not None:
            data["model_max_length"] = limit
        tok_file.write_text(json.dumps(data))
    return path


def assert_as_transformers(path, model_type: str) -> None:
    light = read_config(path)
    full = AutoConfig.from_pretrained(path)
    assert light is not None and light.model_type == full.model_type == model_type
    for attr in DEFAULTS[model_type]:
        assert getattr(light, attr) == getattr(full, attr), attr
    assert adapter_for_config(light) == adapter_for_config(full)
    light_tok = read_tokenizer_limit(path)
    full_tok = AutoTokenizer.from_pretrained(path)
    if light_tok is not None:  # a limit stated: read here, as transformers reads it
        assert light_tok.model_max_length == full_tok.model_max_length
        assert position_limit(light, light_tok) == position_limit(full, full_tok)
    assert resolved_max_length(str(path), None) == position_limit(full, full_tok)


@pytest.mark.parametrize("family", FAMILIES + DECODER_FAMILIES + PRE_LN_ENCODERS)
def test_a_saved_family_reads_as_transformers_reads_it(family, tmp_path):
    config = _config(family)
    path = save(config, tmp_path)
    assert_as_transformers(path, config.model_type)


@pytest.mark.parametrize("model_type", supported_model_types())
@pytest.mark.parametrize("limit", [None, 64, 10**30])
def test_class_defaults_and_tokenizer_limits(model_type, limit, tmp_path):
    """A config.json that leaves out every attribute read (older ``save_pretrained`` wrote
    only what differs from the class default; hand-written ones omit what they like), so
    each comes from DEFAULTS; the tokenizer's limit absent, below and far above."""
    path = save(AutoConfig.for_model(model_type), tmp_path, limit=limit)
    assert (read_tokenizer_limit(path) is None) == (limit is None)  # none stated: transformers
    config_file = path / "config.json"
    stored = json.loads(config_file.read_text())
    for attr in DEFAULTS[model_type]:
        stored.pop(STORED_AS.get(model_type, {}).get(attr, attr))
    config_file.write_text(json.dumps(stored))
    assert_as_transformers(path, model_type)


def test_the_packaged_model_reads_as_transformers_reads_it():
    assert_as_transformers(minilm_dir(), "bert")
    assert resolved_max_length("minilm", None) == 512
    assert resolved_max_length("minilm", 128) == 128


def test_what_this_reader_cannot_answer_goes_to_transformers(tmp_path):
    """No tokenizer_config.json: transformers decides (and loads the tokenizer); a model type
    without defaults here: transformers' config, and the adapter's one-line refusal."""
    path = save(_config("gpt2"), tmp_path / "gpt2")
    (path / "tokenizer_config.json").unlink()
    assert read_tokenizer_limit(path) is None
    expected = position_limit(AutoConfig.from_pretrained(path), AutoTokenizer.from_pretrained(path))
    assert resolved_max_length(str(path), None) == expected == 80

    other = tmp_path / "t5"
    AutoConfig.for_model("t5").save_pretrained(other)
    assert read_config(other) is None
    assert config_facts(str(other)).model_type == "t5"  # transformers' config
    from mixscope.errors import UnsupportedArchitectureError

    with pytest.raises(UnsupportedArchitectureError, match="unsupported architecture 't5'"):
        resolved_measures(str(other), None)


def test_variants_follow_the_saved_value(tmp_path):
    """The attribute that picks an adapter variant, saved away from its default, is read."""
    sequential = save(_config("gpt-neox-sequential"), tmp_path / "neox")
    post = save(_config("opt-post"), tmp_path / "opt")
    assert json.loads((sequential / "config.json").read_text())["use_parallel_residual"] is False
    assert adapter_for_config(read_config(sequential)).parallel_residual is False
    assert adapter_for_config(read_config(post)) == adapter_for_config(_config("opt-post"))
    assert adapter_for_config(read_config(post)) != adapter_for_config(_config("opt"))


def test_preparing_a_run_on_a_local_model_imports_no_torch(tmp_path):
    code = (
        "import sys\n"
        "from mixscope.config import load_spec\n"
        "from mixscope.runtime.prepare import prepare\n"
        f"spec = load_spec(None, {{'model': 'minilm', 'corpus.paths': [{str(DEMO)!r}], "
        f"'out': {str(tmp_path / 'out')!r}}})\n"
        "prep = prepare(spec, write=False)\n"
        "print(prep.max_length, ','.join(m for m in ('torch', 'transformers') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["512"]


def test_a_family_newer_than_the_installed_transformers_is_refused_in_one_line(
    tmp_path, monkeypatch
):
    """OLMo-3 on a transformers that does not know it: one line naming the model type, the
    release that added it and the installed version, before transformers words it as an
    unknown checkpoint."""
    import transformers
    from transformers.models.auto import configuration_auto

    from mixscope.errors import MixscopeError
    from mixscope.models.loading import load

    save(_config("olmo2"), tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**data, "model_type": "olmo3"}))
    names = {k: v for k, v in configuration_auto.CONFIG_MAPPING_NAMES.items() if k != "olmo3"}
    monkeypatch.setattr(configuration_auto, "CONFIG_MAPPING_NAMES", names)
    with pytest.raises(MixscopeError, match=r"'olmo3'.*needs transformers >= 4\.57") as err:
        load(str(tmp_path))
    assert transformers.__version__ in str(err.value) and "\n" not in str(err.value)


def test_the_transformers_floor_is_pyprojects():
    """models/transformers_needed.py's floor is the one pip enforces, and every type it
    lists as newer is a supported type added after that floor."""
    import re
    from pathlib import Path

    from packaging.version import Version

    from mixscope.models.adapters import supported_model_types
    from mixscope.models.transformers_needed import ADDED_AFTER_FLOOR, FLOOR, needed

    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert re.findall(r'"transformers>=([\d.]+)"', pyproject) == [FLOOR]
    for model_type, version in ADDED_AFTER_FLOOR.items():
        assert model_type in supported_model_types() and Version(version) > Version(FLOOR)
    assert needed("bert") == FLOOR and needed("olmo3") == "4.57"
