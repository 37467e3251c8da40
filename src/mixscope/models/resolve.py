"""What a job on a model resolves to before any weight loads: where the model is, its
config, its sequence length and its measure groups.

The driver needs these to identify a run (``runtime/prepare.py``), so nothing here
imports torch: a local model directory is read from its JSON files
(``models/config_file.py``); a hub id, or a directory that reader cannot answer for, goes
through transformers' ``AutoConfig``/``AutoTokenizer`` (imported only then). Loading the
weights is ``models/loading.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mixscope.errors import MixscopeError, first_line
from mixscope.models.adapters import adapter_for_config, language_config, supported_model_types
from mixscope.models.config_file import model_type_of, read_config, read_tokenizer_limit
from mixscope.models.packaged import packaged_path
from mixscope.models.transformers_needed import needed


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


def _local_directory(spec: str) -> Path | None:
    """The model's directory when it is on this machine, else None (a hub id)."""
    source = Path(resolve_source(spec))
    return source if source.is_dir() else None


def _looks_like_path(spec: str) -> bool:
    return spec.startswith(("/", "./", "../", "~", ".\\")) or spec.count("/") >= 2 or "\\" in spec


def hub_kwargs(source: str, revision: str | None = None) -> dict[str, Any]:
    """``from_pretrained``'s keyword arguments for ``source``: none for a local directory;
    for a hub id, a quick refusal where the hub cannot be reached and the model is not
    cached (models/hub.py)."""
    if Path(source).is_dir():
        return {}
    from mixscope.models.hub import hub_options

    return hub_options(source, revision)


def check_transformers_knows(spec: str) -> None:
    """A local model whose ``model_type`` mixscope supports but the installed transformers
    does not know (a family newer than it): one line naming the type, the release it needs
    and the one installed, before transformers words it as an unknown checkpoint."""
    local = _local_directory(spec)
    model_type = model_type_of(local) if local is not None else None
    if model_type is None or model_type not in supported_model_types():
        return
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if model_type not in CONFIG_MAPPING_NAMES:
        version = needed(model_type)
        raise MixscopeError(
            f"model type {model_type!r} of {spec!r} needs transformers >= {version} (installed: "
            f"{transformers.__version__}, which does not know it): "
            f"pip install -U 'transformers>={version}'"
        )


def load_config(spec: str, *, revision: str | None = None) -> Any:
    """The model's transformers config (cheap: no weights), or a one-line error."""
    from transformers import AutoConfig

    source = resolve_source(spec)
    check_transformers_knows(spec)
    try:
        return AutoConfig.from_pretrained(source, revision=revision, **hub_kwargs(source, revision))
    except (OSError, ValueError) as exc:
        first = first_line(exc) or type(exc).__name__
        raise MixscopeError(
            f"could not load model {spec!r}: not a local model directory and not loadable "
            f"from the Hugging Face Hub ({first})"
        ) from exc


def load_tokenizer(spec: str, *, revision: str | None = None) -> Any:
    """The tokenizer of the model ``spec`` names, without its weights (a shard worker
    tokenizes its first shard with it while the weights load), or a one-line error."""
    from transformers import AutoTokenizer

    try:
        source = resolve_source(spec)
        return AutoTokenizer.from_pretrained(
            source, revision=revision, **hub_kwargs(source, revision)
        )
    except (OSError, ValueError) as exc:
        first = first_line(exc) or type(exc).__name__
        raise MixscopeError(f"could not load the tokenizer of {spec!r}: {first}") from exc


def config_facts(spec: str, *, revision: str | None = None) -> Any:
    """What the config says that a run's identity depends on (``model_type``, the adapter
    variant's attribute, ``max_position_embeddings``): from config.json for a local
    directory, else the transformers config."""
    local = _local_directory(spec)
    facts = read_config(local) if local is not None else None
    return facts if facts is not None else load_config(spec, revision=revision)


def position_limit(config: Any, tokenizer: Any) -> int:
    """The longest sequence (special tokens included) a model and its tokenizer accept."""
    config = language_config(config)  # a multimodal checkpoint: its language model's
    limit = getattr(config, "max_position_embeddings", None) or 10**9
    limit -= adapter_for_config(config).position_offset
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


def resolved_max_length(spec: str, wanted: int | None, *, revision: str | None = None) -> int:
    """The sequence length a job on ``spec`` will use, without loading weights (config and
    tokenizer limit only): what the run identity hashes, so ``None`` and the model's own
    limit name the same run."""
    config = config_facts(spec, revision=revision)
    local = _local_directory(spec)
    tokenizer = read_tokenizer_limit(local) if local is not None else None
    if tokenizer is None:
        tokenizer = load_tokenizer(spec, revision=revision)
    return check_max_length(wanted, position_limit(config, tokenizer))
