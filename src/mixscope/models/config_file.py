"""A local model directory's config and tokenizer limit, read from their JSON files.

Why not ``AutoConfig``: the driver needs four facts of a model to identify a run (its
``model_type``, the attributes that pick an adapter variant, its position limit and the
tokenizer's ``model_max_length``), and importing transformers' configuration module
imports torch: about 2 s of a driver's start-up on 2 cores, before any work is scheduled
(``benchmarks/efficiency.py``: "before the pool"). These facts are plain JSON values or,
where config.json leaves them out (older ``save_pretrained`` wrote only what differs from
the class default; hand-written files omit what they like), the config class's default,
kept here as data per ``model_type``.
``tests/test_config_file.py`` checks the defaults against transformers' config classes
and every supported family's saved directory against ``AutoConfig``/``AutoTokenizer``.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

#: model_type → the transformers class default of every config attribute mixscope reads
#: before loading weights: ``max_position_embeddings`` (``models.resolve.position_limit``)
#: and each adapter variant's attribute (``models.adapters``)
DEFAULTS: dict[str, dict[str, Any]] = {
    "bert": {"max_position_embeddings": 512},
    "roberta": {"max_position_embeddings": 512},
    "xlm-roberta": {"max_position_embeddings": 512},
    "camembert": {"max_position_embeddings": 512},
    "electra": {"max_position_embeddings": 512},
    "distilbert": {"max_position_embeddings": 512},
    "gpt2": {"max_position_embeddings": 1024},
    "gpt_neox": {"max_position_embeddings": 2048, "use_parallel_residual": True},
    "llama": {"max_position_embeddings": 2048},
    "mistral": {"max_position_embeddings": 131072},
    "qwen2": {"max_position_embeddings": 32768},
    "qwen3": {"max_position_embeddings": 32768},
    "gemma2": {"max_position_embeddings": 8192},
    "gemma3_text": {"max_position_embeddings": 131072, "use_bidirectional_attention": False},
    "olmo2": {"max_position_embeddings": 2048},
    "olmo3": {"max_position_embeddings": 2048},
    "smollm3": {"max_position_embeddings": 32768},
    "phi3": {"max_position_embeddings": 4096},
    "gptj": {"max_position_embeddings": 2048},
    "stablelm": {"max_position_embeddings": 4096, "use_parallel_residual": False},
    "granite": {"max_position_embeddings": 2048},
    "modernbert": {"max_position_embeddings": 8192},
    "opt": {"max_position_embeddings": 2048, "do_layer_norm_before": True},
    "qwen3_moe": {"max_position_embeddings": 32768},
    "olmoe": {"max_position_embeddings": 4096},
    "mixtral": {"max_position_embeddings": 131072},
    "gpt_oss": {"max_position_embeddings": 131072},
}

#: model_type → {attribute: the key config.json stores it under} (transformers'
#: ``attribute_map``)
STORED_AS: dict[str, dict[str, str]] = {
    "gpt2": {"max_position_embeddings": "n_positions"},
    "gptj": {"max_position_embeddings": "n_positions"},
}

#: where ``model_max_length`` may sit in tokenizer_config.json (``max_len``: its old name)
_LIMIT_KEYS = ("model_max_length", "max_len")


def read_config(directory: str | Path) -> SimpleNamespace | None:
    """The config facts of the model in ``directory`` (``model_type`` and the attributes
    of :data:`DEFAULTS`), or None where this reader does not know the answer for sure (no
    or unreadable config.json, a model type without defaults here): the caller asks
    transformers then, which also words the error."""
    raw = _read_json(Path(directory) / "config.json")
    model_type = raw.get("model_type") if raw is not None else None
    if raw is None or model_type not in DEFAULTS:
        return None
    stored_as = STORED_AS.get(model_type, {})
    facts = {
        attr: raw.get(stored_as.get(attr, attr), default)
        for attr, default in DEFAULTS[model_type].items()
    }
    return SimpleNamespace(model_type=model_type, **facts)


def model_type_of(directory: str | Path) -> str | None:
    """The ``model_type`` config.json states, or None (no or unreadable file)."""
    raw = _read_json(Path(directory) / "config.json")
    value = raw.get("model_type") if raw is not None else None
    return value if isinstance(value, str) else None


def read_tokenizer_limit(directory: str | Path) -> SimpleNamespace | None:
    """The ``model_max_length`` tokenizer_config.json states, as the one attribute of a
    namespace; None where it states none, or there is no such file: a few tokenizer
    classes have a default of their own (Marian's 512, Canine's 2048), and a directory
    may have no tokenizer at all, so transformers decides then (and words the error)."""
    raw = _read_json(Path(directory) / "tokenizer_config.json")
    limit = next((raw[k] for k in _LIMIT_KEYS if raw.get(k) is not None), None) if raw else None
    return SimpleNamespace(model_max_length=limit) if limit is not None else None


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
