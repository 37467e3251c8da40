"""Loading a model and its tokenizer from a local directory, a hub id, or loaded objects."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from mixscope.errors import MixscopeError, first_line
from mixscope.models.adapters import Adapter, adapter_for_config
from mixscope.models.resolve import (
    check_max_length,
    hub_kwargs,
    load_config,
    position_limit,
    resolve_source,
)

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float64": torch.float64,
    "fp64": torch.float64,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


@dataclass
class LoadedModel:
    """A base (headless) transformer, its tokenizer and its adapter, ready for the engine."""

    model: Any  # transformers.PreTrainedModel (the base model, no task head)
    tokenizer: Any
    adapter: Adapter
    name: str  # path or hub id, for the record

    @property
    def pad_token_id(self) -> int:
        """The id used for padding: the tokenizer's pad token, else its end-of-sequence token
        (GPT-2 has no pad token), else 0. Padding never reaches the output."""
        for attr in ("pad_token_id", "eos_token_id"):
            value = getattr(self.tokenizer, attr, None)
            if value is not None:
                return int(value)
        return 0

    @property
    def padding_side(self) -> str:
        """The tokenizer's padding side ("right" when it does not say)."""
        side = getattr(self.tokenizer, "padding_side", None)
        return side if side in ("left", "right") else "right"

    @property
    def max_positions(self) -> int:
        """The longest sequence (special tokens included) the model accepts."""
        return position_limit(self.model.config, self.tokenizer)

    def resolve_max_length(self, wanted: int | None) -> int:
        """The sequence length to use: ``wanted``, or the model's limit when None."""
        return check_max_length(wanted, self.max_positions)


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    """A torch dtype from a name (``float32``, ``bf16``, …); None stays None."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    try:
        return DTYPES[str(dtype).lower()]
    except KeyError:
        raise MixscopeError(
            f"unknown dtype {dtype!r}; choose one of: float32, float64, bfloat16, float16"
        ) from None


def resolve_device(device: str | torch.device | None) -> torch.device:
    """CUDA when present, else CPU; an explicit device must exist."""
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise MixscopeError(f"device {device!r} requested but CUDA is not available here")
    return dev


def _base_model(model: Any, adapter: Adapter) -> Any:
    """The headless model that holds ``adapter.layers``: task models wrap it, and a
    multimodal model's language model holds it (``language_model``: its vision tower and
    projector never run)."""
    base = getattr(model, "base_model", None)
    candidates = (model, base, getattr(model, "language_model", None))
    for candidate in (*candidates, getattr(base, "language_model", None)):
        if candidate is None:
            continue
        try:
            candidate.get_submodule(adapter.layers)
        except AttributeError:
            continue
        return candidate
    raise MixscopeError(
        f"model of type {type(model).__name__} has no '{adapter.layers}' blocks "
        f"(expected for the {adapter.family} family)"
    )


def experts_for_dtype(model: Any) -> None:
    """A float64 model runs its experts eagerly: transformers' default grouped kernel for
    mixtures of experts refuses float64 (which ``verify`` and the checks use); any other
    dtype keeps the model's own choice."""
    if next(model.parameters()).dtype != torch.float64:
        return
    if getattr(model.config, "_experts_implementation", None) in (None, "eager"):
        return
    if any(type(m).__name__.endswith("Experts") for m in model.modules()):
        model.set_experts_implementation("eager")


@contextlib.contextmanager
def progress_bars(enabled: bool) -> Iterator[None]:
    """transformers' progress bars on or off inside, as they were outside."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    (hf_logging.enable_progress_bar if enabled else hf_logging.disable_progress_bar)()
    try:
        yield
    finally:
        (hf_logging.enable_progress_bar if was else hf_logging.disable_progress_bar)()


def load(
    model: Any,
    *,
    revision: str | None = None,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device | None = None,
    tokenizer: Any = None,
    progress: bool = False,
) -> LoadedModel:
    """Load ``model`` (directory, hub id, or ``(model, tokenizer)``) onto ``device``.

    Loaded objects are used as they are (moved to ``device``; cast only if ``dtype`` is
    given); a path or hub id is loaded with eager attention, which the decomposition
    needs because it reads the attention weights. ``tokenizer``: the path's tokenizer,
    already loaded (``load_tokenizer``), so only the weights load here. ``progress``:
    transformers' weight-loading bars, off unless asked (they would print into a notebook's
    output and an actor's log).
    """
    torch_dtype = resolve_dtype(dtype)
    dev = resolve_device(device)
    if isinstance(model, tuple | list):
        if len(model) != 2:
            raise MixscopeError("model must be a path, a hub id, or a (model, tokenizer) pair")
        hf_model, tokenizer = model  # the pair's own tokenizer
        config = getattr(hf_model, "config", None)
        if config is None or not hasattr(config, "model_type"):
            raise MixscopeError(f"{type(hf_model).__name__} is not a transformers model")
        adapter = adapter_for_config(config)
        name = getattr(config, "name_or_path", "") or type(hf_model).__name__
        base = _base_model(hf_model, adapter)
        if torch_dtype is not None:
            base.to(torch_dtype)
        base.to(dev)
        experts_for_dtype(base)
        return LoadedModel(base, tokenizer, adapter, name)

    if not isinstance(model, str | os.PathLike):
        raise MixscopeError("model must be a path, a hub id, or a (model, tokenizer) pair")
    spec = os.fspath(model)
    source = resolve_source(spec)
    config = load_config(spec, revision=revision)  # a family newer than transformers: refused

    from transformers import AutoModel, AutoTokenizer

    adapter = adapter_for_config(config)
    hub = hub_kwargs(source, revision)  # the model's cache where the hub is unreachable
    try:
        if tokenizer is None:
            tokenizer = AutoTokenizer.from_pretrained(source, revision=revision, **hub)
        with progress_bars(progress):
            hf_model = AutoModel.from_pretrained(
                source, revision=revision, attn_implementation="eager", dtype=torch_dtype, **hub
            )
    except (OSError, ValueError) as exc:
        first = first_line(exc) or type(exc).__name__
        raise MixscopeError(f"could not load model {spec!r}: {first}") from exc
    base = _base_model(hf_model, adapter)
    base.to(dev)
    base.eval()
    experts_for_dtype(base)
    return LoadedModel(base, tokenizer, adapter, spec)
