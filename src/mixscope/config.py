"""Job specs: YAML → frozen dataclasses, CLI overrides, validated in one place.

A job spec names a model, a corpus, the analysis options, the runtime and an output root.
Every field can be set from YAML or overridden with ``--set section.field=value`` (or the
short flags of ``mixscope run``); ``validate`` is the only place that judges values.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from mixscope.corpus.masking import MASK_COUNTS
from mixscope.errors import SpecError
from mixscope.mixing import ATTENTION_MODES
from mixscope.models.packaged import DEFAULT_MODEL
from mixscope.runtime.executor import EXECUTORS
from mixscope.store.schema import DETAIL_MODES, PRECISIONS

#: how consecutive documents become pairs (``corpus.pair_selection``, corpus/plan.py)
PAIR_SELECTIONS = ("split", "fit")

#: ``corpus.format``: auto (from the suffix), readers (corpus/readers.py), hf (corpus/hf.py)
CORPUS_FORMATS = ("auto", "text", "jsonl", "parquet", "hf")


@dataclass(frozen=True)
class CorpusSpec:
    """Where the documents are and how to read them."""

    paths: tuple[str, ...] = ()  # files, directories or globs
    format: str = "auto"  # auto | text | jsonl | parquet | hf (Hugging Face datasets)
    split: str = "line"  # text: one document per line, or "paragraph" (blank-line separated)
    pairs: bool = False  # consecutive documents as (A, B) pairs, as in the paper's data
    # pairs: "split" (A, B), (C, D), …, a pair longer than max_length split into single
    # segments; "fit": only pairs that fit, the next pair tried from B (corpus/plan.py)
    pair_selection: str = "split"
    text_field: str = "text"  # jsonl / parquet
    id_field: str | None = None  # jsonl / parquet: an external id kept with each document
    skip_regex: str | None = None  # documents matching this are skipped by rule (e.g. headings)
    max_doc_bytes: int = 1_000_000  # longer documents are counted as "oversized", not analysed
    limit: int | None = None  # analyse only the first N documents (after skipping)
    # format hf (corpus/hf.py): a hub dataset by name (instead of paths; paths name a local
    # save_to_disk directory or Arrow files), its config, split (default train: also picks
    # the split of a saved DatasetDict) and revision (a commit pins the documents)
    dataset: str | None = None
    dataset_config: str | None = None
    dataset_split: str | None = None
    dataset_revision: str | None = None


@dataclass(frozen=True)
class AnalysisSpec:
    """Options that change the numbers (part of the run identity)."""

    max_length: int | None = None  # None: the model's limit
    mask_rate: float = 0.0
    # round | floor: masked tokens per sequence, max(1, round or floor of mask_rate · m)
    # (corpus/masking.py); the authors' code floors. In the run identity when not "round".
    mask_count: str = "round"
    seed: int = 0
    dtype: str = "float32"
    revision: str | None = None
    # auto | fast | eager: how α_ii is obtained (mixing/__init__.py). Not in the run identity:
    # fast and eager agree to float rounding (≤ 1e-5 in float32, tested), like batch sizes.
    attention: str = "auto"


@dataclass(frozen=True)
class RuntimeSpec:
    """How the work is executed (not part of the run identity)."""

    workers: int = 1  # exactly this many actors, unless min_workers / max_workers are given
    # an elastic pool (runtime/ray_executor.py): starts what fits, asks the autoscaler for up
    # to max_workers, grows as nodes join; waits for min_workers (at most
    # min_workers_timeout seconds) before the first shard; None: from ``workers``
    min_workers: int | None = None
    max_workers: int | None = None
    min_workers_timeout: float = 300.0
    # a node whose actors die this many times in a row gets no more actors (reported lost);
    # after each death it is backed off node_backoff_seconds · 2^(k-1)
    node_max_failures: int = 3
    node_backoff_seconds: float = 5.0
    batch_size: int = 16  # sequences per batch, at most
    batch_tokens: int = 16384  # tokens per batch (padding included), at most
    docs_per_shard: int = 256
    address: str | None = None  # None: RAY_ADDRESS, else an embedded local Ray
    gpus_per_worker: float = 1.0  # used only where the cluster has GPUs
    cpus_per_worker: float = 1.0
    device: str = "auto"
    max_retries: int = 2  # per shard, after the first attempt
    verify: bool = False
    executor: str = "ray"  # ray | local (in-process, no Ray; for debugging)
    # largest_first | plan: the order shards are handed out in (runtime/scheduling.py)
    shard_order: str = "largest_first"

    def worker_range(self) -> tuple[int, int]:
        """(min, max) actors: ``workers`` alone means exactly that many; ``max_workers``
        alone means 1 to max; ``min_workers`` alone means min to max(min, workers)."""
        if self.min_workers is None and self.max_workers is None:
            return self.workers, self.workers
        lo = self.min_workers if self.min_workers is not None else 1
        hi = self.max_workers if self.max_workers is not None else max(lo, self.workers)
        return lo, hi


@dataclass(frozen=True)
class OutputSpec:
    """What a run writes besides its statistics (always written). Part of the run identity."""

    detail: str = "sample"  # full | sample | none: per-token rows of every, some or no document
    sample_rate: float = 0.01  # detail "sample": share of documents kept (a hash of the doc id)
    precision: str = "float32"  # float32 | float16: the detail's stored measures


@dataclass(frozen=True)
class CheckpointSpec:
    """Scheduled re-analysis of new checkpoints (``mixscope checkpoints sync|watch``)."""

    source: str | None = None  # Trainer output dir, folder of model folders, or hub:ORG/NAME
    revisions: tuple[str, ...] = ()  # for a hub source: branches such as step1000
    quiet_seconds: float = 60.0  # a checkpoint must be unchanged this long to count as complete
    max_attempts: int = 3  # failed runs are retried on later passes up to this many times
    backoff_seconds: float = 300.0  # wait before retry k: backoff * 2^(k-1)
    lease_seconds: float = 300.0  # a lease not renewed for this long is free again
    interval_seconds: float = 600.0  # watch: time between passes


@dataclass(frozen=True)
class JobSpec:
    name: str = "mixscope"
    model: str = DEFAULT_MODEL
    corpus: CorpusSpec = field(default_factory=CorpusSpec)
    analysis: AnalysisSpec = field(default_factory=AnalysisSpec)
    runtime: RuntimeSpec = field(default_factory=RuntimeSpec)
    output: OutputSpec = field(default_factory=OutputSpec)
    checkpoints: CheckpointSpec = field(default_factory=CheckpointSpec)
    out: str = "results"
    step: int | None = None  # training step of the checkpoint, when known

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["corpus"]["paths"] = list(self.corpus.paths)
        d["checkpoints"]["revisions"] = list(self.checkpoints.revisions)
        return d


SECTIONS = {
    "corpus": CorpusSpec,
    "analysis": AnalysisSpec,
    "runtime": RuntimeSpec,
    "output": OutputSpec,
    "checkpoints": CheckpointSpec,
}

#: short keys accepted by --set and the flags of `mixscope run`
ALIASES = {
    "corpus": "corpus.paths",
    "workers": "runtime.workers",
    "min_workers": "runtime.min_workers",
    "max_workers": "runtime.max_workers",
    "batch_size": "runtime.batch_size",
    "batch_tokens": "runtime.batch_tokens",
    "attention": "analysis.attention",
    "max_length": "analysis.max_length",
    "mask_rate": "analysis.mask_rate",
    "seed": "analysis.seed",
    "dtype": "analysis.dtype",
    "revision": "analysis.revision",
    "address": "runtime.address",
    "docs_per_shard": "runtime.docs_per_shard",
    "device": "runtime.device",
    "detail": "output.detail",
    "sample_rate": "output.sample_rate",
    "precision": "output.precision",
}


def _field_types(cls: type) -> dict[str, Any]:
    import typing

    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in fields(cls)}


def _coerce(value: Any, typ: Any, key: str) -> Any:
    """Turn YAML / command-line values into the field's type, or say what is wrong."""
    import types
    import typing

    origin = typing.get_origin(typ)
    args = typing.get_args(typ)
    if origin in (typing.Union, types.UnionType):
        is_null = value is None or (
            isinstance(value, str) and value.lower() in ("null", "none", "")
        )
        if is_null and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(value, inner[0], key)
    if origin is tuple:
        if isinstance(value, str):
            value = [v for v in value.split(",") if v]
        if not isinstance(value, list | tuple):
            raise SpecError(f"{key}: expected a list, got {value!r}")
        return tuple(str(v) for v in value)
    try:
        if typ is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("true", "yes", "1", "on"):
                return True
            if isinstance(value, str) and value.lower() in ("false", "no", "0", "off"):
                return False
            raise ValueError
        if typ is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if typ is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if typ is str:
            if isinstance(value, dict | list):
                raise ValueError
            return str(value)
    except (TypeError, ValueError):
        raise SpecError(f"{key}: expected {typ.__name__}, got {value!r}") from None
    return value


def _build(cls: type, data: dict[str, Any], prefix: str) -> Any:
    types_ = _field_types(cls)
    unknown = sorted(set(data) - set(types_))
    if unknown:
        raise SpecError(
            f"unknown field {prefix}{unknown[0]}; valid: {', '.join(prefix + k for k in types_)}"
        )
    kwargs = {}
    for name, value in data.items():
        if name in SECTIONS and cls is JobSpec:
            if not isinstance(value, dict):
                raise SpecError(f"{name}: expected a mapping of fields")
            kwargs[name] = _build(SECTIONS[name], value, f"{name}.")
        else:
            kwargs[name] = _coerce(value, types_[name], prefix + name)
    return cls(**kwargs)


def load_yaml(path: str | os.PathLike) -> dict[str, Any]:
    import yaml

    p = Path(path)
    if not p.is_file():
        raise SpecError(f"job spec {path} does not exist")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        raise SpecError(f"job spec {path} is not valid YAML{where}") from None
    if not isinstance(data, dict):
        raise SpecError(f"job spec {path} must be a mapping of fields")
    # corpus paths are relative to the spec file, so a spec runs from any directory
    corpus = data.get("corpus")
    if isinstance(corpus, dict) and "paths" in corpus:
        raw = corpus["paths"]
        raw = [raw] if isinstance(raw, str) else raw
        if isinstance(raw, list):
            corpus["paths"] = [_relative_to(p.parent, str(x)) for x in raw]
    return data


def _relative_to(base: Path, value: str) -> str:
    """Corpus paths in a spec are relative to the spec's folder (``out`` to the caller's)."""
    if "://" in value or os.path.isabs(value) or value.startswith("~"):
        return value
    return os.path.abspath(base / value)  # not resolve(): keep symlinked mounts as mounted


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``{"runtime.workers": 2, "model": "x"}`` on top of the YAML mapping."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    for key, value in overrides.items():
        key = ALIASES.get(key, key)
        if "." in key:
            section, name = key.split(".", 1)
            if section not in SECTIONS:
                raise SpecError(f"unknown section in {key!r}; valid: {', '.join(SECTIONS)}")
            out.setdefault(section, {})
            if not isinstance(out[section], dict):
                raise SpecError(f"{section}: expected a mapping of fields")
            out[section][name] = value
        else:
            out[key] = value
    return out


def parse_set(pairs: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """``key=value`` strings (values parsed as YAML scalars/lists) → a mapping."""
    import yaml

    out: dict[str, Any] = {}
    for item in pairs:
        if "=" not in item:
            raise SpecError(f"--set expects key=value, got {item!r}")
        key, raw = item.split("=", 1)
        try:
            out[key.strip()] = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            out[key.strip()] = raw
    return out


def build_spec(data: dict[str, Any]) -> JobSpec:
    """The one place that turns a mapping into a validated :class:`JobSpec`."""
    spec = _build(JobSpec, data, "")
    validate(spec)
    return spec


def _looks_local(model: str) -> bool:
    """A model named by a filesystem path (absolute, ./, ../, ~), not a hub id."""
    return model.startswith(("/", "./", "../", "~")) or model in (".", "..")


def validate(spec: JobSpec) -> None:
    c, a, r = spec.corpus, spec.analysis, spec.runtime
    checks = [
        (bool(spec.model), "model: required (a directory or hub id)"),
        (
            not _looks_local(spec.model) or os.path.isdir(os.path.expanduser(spec.model)),
            f"model: no such directory {spec.model!r} (a local path; hub ids look like org/name)",
        ),
        (
            bool(c.paths) or bool(c.dataset),
            "corpus.paths: required (files, directories or globs; or corpus.dataset)",
        ),
        (
            c.format in CORPUS_FORMATS,
            "corpus.format: " + "|".join(CORPUS_FORMATS),
        ),
        (
            c.format == "hf"
            or not (c.dataset or c.dataset_config or c.dataset_split or c.dataset_revision),
            "corpus.dataset: only with corpus.format: hf (also dataset_config, dataset_split, "
            "dataset_revision)",
        ),
        (
            not (c.dataset and c.paths),
            "corpus.dataset: a hub dataset replaces corpus.paths, give one of them "
            "(a local dataset directory goes in corpus.paths)",
        ),
        (
            bool(c.dataset) or not (c.dataset_config or c.dataset_revision),
            "corpus.dataset_config: only for a hub dataset (corpus.dataset; also dataset_revision)",
        ),
        (
            all(v is None or v.strip() for v in (c.dataset, c.dataset_config, c.dataset_split)),
            "corpus.dataset: empty name (also dataset_config, dataset_split)",
        ),
        (c.split in ("line", "paragraph"), "corpus.split: line|paragraph"),
        (c.pair_selection in PAIR_SELECTIONS, "corpus.pair_selection: split|fit"),
        (c.max_doc_bytes > 0, "corpus.max_doc_bytes: must be positive"),
        (c.limit is None or c.limit > 0, "corpus.limit: must be positive"),
        (a.max_length is None or a.max_length >= 4, "analysis.max_length: at least 4"),
        (0 <= a.mask_rate < 1, "analysis.mask_rate: in [0, 1)"),
        (a.mask_count in MASK_COUNTS, "analysis.mask_count: " + "|".join(MASK_COUNTS)),
        (
            a.dtype in ("float32", "float64", "bfloat16", "float16"),
            "analysis.dtype: float32|float64|bfloat16|float16",
        ),
        (r.workers >= 1, "runtime.workers: at least 1"),
        (r.min_workers is None or r.min_workers >= 1, "runtime.min_workers: at least 1"),
        (r.max_workers is None or r.max_workers >= 1, "runtime.max_workers: at least 1"),
        (
            r.min_workers is None or r.max_workers is None or r.min_workers <= r.max_workers,
            f"runtime.min_workers: {r.min_workers} is more than runtime.max_workers "
            f"{r.max_workers}",
        ),
        (r.min_workers_timeout >= 0, "runtime.min_workers_timeout: not negative"),
        (r.node_max_failures >= 1, "runtime.node_max_failures: at least 1"),
        (r.node_backoff_seconds >= 0, "runtime.node_backoff_seconds: not negative"),
        (
            a.attention in ATTENTION_MODES,
            "analysis.attention: " + "|".join(ATTENTION_MODES),
        ),
        (r.batch_size >= 1, "runtime.batch_size: at least 1"),
        (r.batch_tokens >= 1, "runtime.batch_tokens: at least 1"),
        (
            not (a.attention == "fast" and r.verify),
            "analysis.attention: 'fast' cannot run the exactness check (runtime.verify)",
        ),
        (r.docs_per_shard >= 1, "runtime.docs_per_shard: at least 1"),
        (r.gpus_per_worker >= 0, "runtime.gpus_per_worker: not negative"),
        (r.cpus_per_worker > 0, "runtime.cpus_per_worker: positive"),
        (r.max_retries >= 0, "runtime.max_retries: not negative"),
        (
            r.shard_order in ("largest_first", "plan"),
            "runtime.shard_order: largest_first|plan",
        ),
        (r.executor in EXECUTORS, f"runtime.executor: {'|'.join(EXECUTORS)}"),
        (spec.output.detail in DETAIL_MODES, "output.detail: " + "|".join(DETAIL_MODES)),
        (0 < spec.output.sample_rate <= 1, "output.sample_rate: in (0, 1]"),
        (spec.output.precision in PRECISIONS, "output.precision: " + "|".join(PRECISIONS)),
        (bool(spec.out), "out: required (a directory or object-store URI)"),
        (spec.checkpoints.quiet_seconds >= 0, "checkpoints.quiet_seconds: not negative"),
        (spec.checkpoints.max_attempts >= 1, "checkpoints.max_attempts: at least 1"),
        (spec.checkpoints.backoff_seconds >= 0, "checkpoints.backoff_seconds: not negative"),
        (spec.checkpoints.lease_seconds > 0, "checkpoints.lease_seconds: positive"),
        (spec.checkpoints.interval_seconds > 0, "checkpoints.interval_seconds: positive"),
    ]
    for ok, message in checks:
        if not ok:
            raise SpecError(f"invalid job spec: {message}")
    if c.skip_regex:
        import re

        try:
            re.compile(c.skip_regex)
        except re.error as exc:
            raise SpecError(f"invalid job spec: corpus.skip_regex: {exc}") from None


def load_spec(path: str | None, overrides: dict[str, Any] | None = None) -> JobSpec:
    """YAML (optional) + overrides → a validated spec."""
    data = load_yaml(path) if path else {}
    return build_spec(apply_overrides(data, overrides or {}))


def spec_from_flags(
    path: str | None, sets: tuple[str, ...] | list[str], flags: dict[str, Any]
) -> JobSpec:
    """YAML (optional), then ``--set key=value`` pairs, then the command's own flags
    (``{"runtime.workers": 2, …}``; None means the flag was not given)."""
    overrides = parse_set(sets)
    overrides.update({k: v for k, v in flags.items() if v is not None})
    return load_spec(path, overrides)
