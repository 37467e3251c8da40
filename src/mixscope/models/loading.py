"""Loading a model and its tokenizer from a local directory, a hub id, or loaded objects."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mixscope.errors import MixscopeError, first_line
from mixscope.models.adapters import Adapter, adapter_for_config
from mixscope.models.packaged import packaged_path

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
        return position_limit(self.model.config, self.adapter, self.tokenizer)

    def resolve_max_length(self, wanted: int | None) -> int:
        """The sequence length to use: ``wanted``, or the model's limit when None."""
        return check_max_length(wanted, self.max_positions)


def position_limit(config: Any, adapter: Adapter, tokenizer: Any) -> int:
    """The longest sequence (special tokens included) a model and its tokenizer accept."""
    limit = getattr(config, "max_position_embeddings", None) or 10**9
    limit -= adapter.position_offset
    tok_limit = getattr(tokenizer, "model_max_length", None)
    if isinstance(tok_limit, int) and tok_limit < 10**6:
        limit = min(limit, tok_limit)
    return int(limit)


def check_max_length(wanted: int | None, limit: int) -> int:
    """``wanted`` checked against ``limit``; the limit itself when ``wanted`` is None."""
    if wanted is None:
        return limit
    if wanted > limit:
        raise MixscopeError(f"max_length {wanted} exceeds this model's limit of {limit} positions")
    if wanted < 4:
        raise MixscopeError(f"max_length must be at least 4, got {wanted}")
    return wanted


def load_tokenizer(spec: str, *, revision: str | None = None) -> Any:
    """The tokenizer of the model ``spec`` names, without its weights (a shard worker
    tokenizes its first shard with it while the weights load), or a one-line error."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(resolve_source(spec), revision=revision)
    except (OSError, ValueError) as exc:
        first = first_line(exc) or type(exc).__name__
        raise MixscopeError(f"could not load the tokenizer of {spec!r}: {first}") from exc


def resolved_max_length(
    spec: str, wanted: int | None, *, revision: str | None = None, tokenizer: Any = None
) -> int:
    """The sequence length a job on ``spec`` will use, without loading weights (config and
    tokenizer only): what the run identity hashes, so ``None`` and the model's own limit
    name the same run. ``tokenizer``: one already loaded (else it is loaded here)."""
    config = load_config(spec, revision=revision)
    if tokenizer is None:
        tokenizer = load_tokenizer(spec, revision=revision)
    return check_max_length(wanted, position_limit(config, adapter_for_config(config), tokenizer))


def resolved_measures(spec: str, names: Any, *, revision: str | None = None) -> Any:
    """The measure groups a job on ``spec`` computes (``all`` expanded, a group that does
    not apply refused), from the model's config alone: a
    :class:`~mixscope.mixing.measures.Selection`."""
    from mixscope.mixing.measures import select

    return select(names, adapter_for_config(load_config(spec, revision=revision)))


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


def _looks_like_path(spec: str) -> bool:
    return spec.startswith(("/", "./", "../", "~", ".\\")) or spec.count("/") >= 2 or "\\" in spec


def _base_model(model: Any, adapter: Adapter) -> Any:
    """The headless model that holds ``adapter.layers`` (task models wrap it)."""
    for candidate in (model, getattr(model, "base_model", None)):
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


def resolve_source(spec: str) -> str:
    """A local directory (packaged models included) or a hub id; clear errors for bad paths."""
    path = Path(packaged_path(spec) or spec).expanduser()
    if path.exists():
        if not path.is_dir():
            raise MixscopeError(f"model path {spec} is a file, not a model directory")
        if not (path / "config.json").is_file():
            raise MixscopeError(f"{spec} is not a model directory (no config.json)")
        return str(path)
    if _looks_like_path(spec):
        raise MixscopeError(f"model path {spec} does not exist")
    return spec  # a hub id


def load_config(spec: str, *, revision: str | None = None) -> Any:
    """The model's transformers config (cheap: no weights), or a one-line error."""
    from transformers import AutoConfig

    source = resolve_source(spec)
    try:
        return AutoConfig.from_pretrained(source, revision=revision)
    except (OSError, ValueError) as exc:
        first = first_line(exc) or type(exc).__name__
        raise MixscopeError(
            f"could not load model {spec!r}: not a local model directory and not loadable "
            f"from the Hugging Face Hub ({first})"
        ) from exc


def load(
    model: Any,
    *,
    revision: str | None = None,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device | None = None,
    tokenizer: Any = None,
) -> LoadedModel:
    """Load ``model`` (directory, hub id, or ``(model, tokenizer)``) onto ``device``.

    Loaded objects are used as they are (moved to ``device``; cast only if ``dtype`` is
    given); a path or hub id is loaded with eager attention, which the decomposition
    needs because it reads the attention weights. ``tokenizer``: the path's tokenizer,
    already loaded (``load_tokenizer``), so only the weights load here.
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
        return LoadedModel(base, tokenizer, adapter, name)

    if not isinstance(model, str | os.PathLike):
        raise MixscopeError("model must be a path, a hub id, or a (model, tokenizer) pair")
    spec = os.fspath(model)
    source = resolve_source(spec)
    config = load_config(spec, revision=revision)

    from transformers import AutoModel, AutoTokenizer

    adapter = adapter_for_config(config)
    try:
        if tokenizer is None:
            tokenizer = AutoTokenizer.from_pretrained(source, revision=revision)
        hf_model = AutoModel.from_pretrained(
            source, revision=revision, attn_implementation="eager", dtype=torch_dtype
        )
    except (OSError, ValueError) as exc:
        first = first_line(exc) or type(exc).__name__
        raise MixscopeError(f"could not load model {spec!r}: {first}") from exc
    base = _base_model(hf_model, adapter)
    base.to(dev)
    base.eval()
    return LoadedModel(base, tokenizer, adapter, spec)
