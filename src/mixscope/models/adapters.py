"""Architecture adapters: everything family-specific, as data, one ``Adapter`` per family.

The engine (``mixing/``) never branches on the model family. An adapter says where a
block keeps its input, its values (a plain or fused projection), its attention weights,
its output projection, its norms (after the residual sum, inside a branch, or none: the
steps of the block's chain, mixing/chain.py) and its feed-forward. Module paths are
relative to one block, except ``layers`` and ``final_norm`` (relative to the base model).
The record itself is models/adapter.py; the families' data, models/families.py (dense)
and models/families_moe.py (mixtures of experts).
"""

from __future__ import annotations

from typing import Any

from mixscope.errors import UnsupportedArchitectureError
from mixscope.models.adapter import Adapter, ValueLayout
from mixscope.models.families import (
    BERT,
    DISTILBERT,
    ELECTRA,
    GEMMA,
    GEMMA2,
    GPT2,
    GPT_NEOX,
    GPTJ,
    GRANITE,
    LLAMA,
    MODERNBERT,
    OLMO2,
    OPT,
    PHI3,
    ROBERTA,
    STABLELM,
)
from mixscope.models.families_moe import GPT_OSS, MIXTRAL, OLMOE, QWEN3_MOE

__all__ = [
    "ADAPTERS",
    "Adapter",
    "ValueLayout",
    "adapter_for",
    "adapter_for_config",
    "language_config",
    "supported_model_types",
]

ADAPTERS: tuple[Adapter, ...] = (
    BERT,
    ROBERTA,
    ELECTRA,
    DISTILBERT,
    GPT2,
    GPT_NEOX,
    LLAMA,
    OPT,
    GEMMA2,
    GEMMA,
    OLMO2,
    PHI3,
    GPTJ,
    STABLELM,
    GRANITE,
    MODERNBERT,
    QWEN3_MOE,
    OLMOE,
    MIXTRAL,
    GPT_OSS,
)


def supported_model_types() -> list[str]:
    """All ``config.model_type`` values with an adapter, sorted."""
    return sorted(t for a in ADAPTERS for t in a.model_types)


def adapter_for(model_type: str) -> Adapter:
    """The adapter for a ``config.model_type``; a clear error naming the supported ones."""
    for adapter in ADAPTERS:
        if model_type in adapter.model_types:
            return adapter
    raise UnsupportedArchitectureError(
        f"unsupported architecture {model_type!r}; supported: {', '.join(supported_model_types())}"
    )


def language_config(config: Any) -> Any:
    """The config of the language model: ``config`` itself, or, for a multimodal checkpoint
    whose own type has no adapter (``gemma3``), the ``text_config`` it carries."""
    text = getattr(config, "text_config", None)
    supported = supported_model_types()
    if config.model_type not in supported and getattr(text, "model_type", None) in supported:
        return text
    return config


def adapter_for_config(config: Any) -> Adapter:
    """The adapter for a model configuration (a multimodal one's language model: its
    ``text_config``), its configuration-dependent variant applied."""
    config = language_config(config)
    return adapter_for(config.model_type).for_config(config)
