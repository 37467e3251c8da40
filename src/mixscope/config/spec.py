"""The job spec: frozen dataclasses, each field declared with its default, help and choices.

A job spec names a model, a corpus, the analysis options, the runtime and an output root.
The sentence given to :func:`~mixscope.config.fields.setting` is the field's help text
everywhere (``mixscope run --help``, ``mixscope analyze --help``); ``choices`` are checked
by ``validate`` (config/validate.py) with no second list to keep in step.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass, field
from typing import Any

from mixscope.choices import (
    ATTENTION_MODES,
    DEFAULT_MEASURE_GROUPS,
    DETAIL_MODES,
    DISTANCE_BUCKETS,
    EXECUTOR_NAMES,
    MASK_COUNTS,
    MEASURE_GROUPS,
    PRECISIONS,
)
from mixscope.config.fields import FieldInfo, describe, setting
from mixscope.models.packaged import DEFAULT_MODEL

#: how consecutive documents become pairs (``corpus.pair_selection``, corpus/plan.py)
PAIR_SELECTIONS = ("split", "fit")

#: ``corpus.format``: auto (from the suffix), readers (corpus/readers.py), hf (corpus/hf.py)
CORPUS_FORMATS = ("auto", "text", "jsonl", "parquet", "hf")

#: ``analysis.dtype``: the dtype the model runs in
DTYPES = ("float32", "float64", "bfloat16", "float16")
#: the most shards an actor may hold (``runtime.shards_in_flight``): one on the model, the
#: rest writing their files; each holds its statistics' accumulators (``DEVICE_BUDGET``)
MAX_SHARDS_IN_FLIGHT = 8


@dataclass(frozen=True)
class CorpusSpec:
    """Where the documents are and how to read them."""

    paths: tuple[str, ...] = setting((), "Corpus file, directory or glob; repeatable.")
    format: str = setting(
        "auto",
        "auto (from the suffix), text, jsonl, parquet or hf (Hugging Face datasets).",
        choices=CORPUS_FORMATS,
    )
    split: str = setting(
        "line",
        "text: one document per line, or per paragraph (blank-line separated).",
        choices=("line", "paragraph"),
    )
    pairs: bool = setting(False, "Consecutive documents as (A, B) pairs, as in the paper's data.")
    pair_selection: str = setting(
        "split",
        "pairs: split (A, B), (C, D), …, a pair longer than max_length analysed as single "
        "segments; fit: only pairs that fit, the next pair tried from B (corpus/plan.py).",
        choices=PAIR_SELECTIONS,
    )
    text_field: str = setting("text", "jsonl / parquet: the column holding the text.")
    id_field: str | None = setting(None, "jsonl / parquet: an external id kept with each document.")
    skip_regex: str | None = setting(
        None, "Documents matching this are skipped by rule (e.g. headings)."
    )
    max_doc_bytes: int = setting(
        1_000_000, "Longer documents are counted as oversized, not analysed."
    )
    limit: int | None = setting(None, "Analyse only the first N documents (after skipping).")
    # format hf (corpus/hf.py): a hub dataset by name (instead of paths; paths name a local
    # save_to_disk directory or Arrow files), its config, split and revision
    dataset: str | None = setting(None, "format hf: a hub dataset by name (instead of paths).")
    dataset_config: str | None = setting(None, "format hf: the hub dataset's config.")
    dataset_split: str | None = setting(
        None, "format hf: the split (default train; also picks the split of a saved DatasetDict)."
    )
    dataset_revision: str | None = setting(
        None, "format hf: the dataset's revision (a commit pins the documents)."
    )


@dataclass(frozen=True)
class AnalysisSpec:
    """Options that change the numbers (part of the run identity)."""

    max_length: int | None = setting(None, "Tokens per sequence (default: the model's limit).")
    mask_rate: float = setting(0.0, "Share of non-special tokens replaced by the mask token.")
    # in the run identity when not "round" (store/runs.py)
    mask_count: str = setting(
        "round",
        "Masked tokens per sequence: max(1, round or floor of mask_rate · m) "
        "(corpus/masking.py); the authors' code floors.",
        choices=MASK_COUNTS,
    )
    seed: int = setting(0, "Seed of the masking positions.")
    dtype: str = setting("float32", "The dtype the model runs in.", choices=DTYPES)
    revision: str | None = setting(None, "Hub revision of the model (branch, tag or commit).")
    # in the run identity when not the default (store/runs.py): existing runs keep their ids
    measures: tuple[str, ...] = setting(
        DEFAULT_MEASURE_GROUPS,
        f"Measure groups ({', '.join(MEASURE_GROUPS)}; comma-separated), or all: every group that "
        "applies to the model (docs/method.md).",
    )
    # in the run identity when not the default (runtime/prepare.py)
    distance_buckets: int = setting(
        DISTANCE_BUCKETS,
        "The distance group's buckets: δ = 1, 2–3, 4–7, …, the last open-ended "
        f"(2 to {DISTANCE_BUCKETS}; fewer merge the far ones, docs/method.md §5e).",
    )
    # not in the run identity: fast and eager agree to float rounding (≤ 1e-5 in float32,
    # tested), like batch sizes
    attention: str = setting(
        "auto",
        "fast: α_ii from a fused kernel, O(n) memory; eager: full weights; auto: fast "
        "unless the exactness check runs.",
        choices=ATTENTION_MODES,
    )


@dataclass(frozen=True)
class RuntimeSpec:
    """How the work is executed (not part of the run identity)."""

    workers: int = setting(
        1, "Number of actors (exactly this many, unless min_workers / max_workers are given)."
    )
    # an elastic pool (runtime/ray_executor.py): starts what fits, asks the autoscaler for
    # up to max_workers, grows as nodes join
    min_workers: int | None = setting(
        None, "Elastic pool: actors to wait for before the first shard (default: workers)."
    )
    max_workers: int | None = setting(
        None, "Elastic pool: actors to ask the autoscaler for, at most (default: workers)."
    )
    min_workers_timeout: float = setting(
        300.0, "Seconds to wait for min_workers before starting with fewer."
    )
    node_max_failures: int = setting(
        3, "A node whose actors die this many times in a row gets no more actors."
    )
    node_backoff_seconds: float = setting(
        5.0, "After its k-th actor death a node is backed off this · 2^(k-1) seconds."
    )
    batch_size: int = setting(16, "Sequences per batch, at most.")
    batch_tokens: int = setting(16384, "Tokens per batch (padding included), at most.")
    docs_per_shard: int = setting(256, "Documents per shard (the unit of retry and commit).")
    address: str | None = setting(None, "Ray cluster address (else RAY_ADDRESS, else local).")
    gpus_per_worker: float = setting(1.0, "GPUs per actor, where the cluster has GPUs.")
    cpus_per_worker: float = setting(1.0, "CPUs per actor.")
    device: str = setting("auto", "cpu, cuda, cuda:1, … or auto.")
    max_retries: int = setting(2, "Attempts per shard after the first.")
    # runtime/ray_executor.py, runtime/worker.py: 2 keeps the device busy while the
    # previous shard's files are written; more write several shards' files at once, on
    # host cores a fast device leaves idle (benchmarks/finish_parallel.py, actor.py --in-flight)
    shards_in_flight: int = setting(
        2,
        f"Shards an actor holds at once (1 to {MAX_SHARDS_IN_FLIGHT}): with 2 the next shard "
        "runs on the model while the last one's statistics and files are written; with more, "
        "several shards' files are written at once (a GPU actor with spare host cores, "
        "docs/performance.md); 1 runs them one by one.",
    )
    verify: bool = setting(False, "Check the exactness identity on every block.")
    executor: str = setting(
        "ray", "ray, or local (in-process, no Ray; for debugging).", choices=EXECUTOR_NAMES
    )
    shard_order: str = setting(
        "largest_first",
        "The order Ray actors are handed shards in (runtime/scheduling.py); the local "
        "executor, one worker, always takes them in plan order.",
        choices=("largest_first", "plan"),
    )

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

    detail: str = setting(
        "sample",
        "Per-token rows besides the statistics: every document, a sample "
        "(output.sample_rate) or none.",
        choices=DETAIL_MODES,
    )
    sample_rate: float = setting(
        0.01,
        "detail sample: share of documents kept, a floor: the documents whose doc-id hash "
        "is under the rate, and in every shard at least one (its smallest hash).",
    )
    precision: str = setting(
        "float32", "The stored precision of the detail's measures.", choices=PRECISIONS
    )


@dataclass(frozen=True)
class CheckpointSpec:
    """Scheduled re-analysis of new checkpoints (``mixscope checkpoints sync|watch``)."""

    source: str | None = setting(
        None, "Trainer output dir, folder of model folders, or hub:ORG/NAME."
    )
    revisions: tuple[str, ...] = setting((), "For a hub source: branches such as step1000.")
    quiet_seconds: float = setting(
        60.0, "A checkpoint must be unchanged this long to count as complete."
    )
    max_attempts: int = setting(3, "Failed runs are retried on later passes up to this often.")
    backoff_seconds: float = setting(300.0, "Wait before retry k: backoff · 2^(k-1) seconds.")
    lease_seconds: float = setting(300.0, "A lease not renewed for this long is free again.")
    interval_seconds: float = setting(600.0, "watch: seconds between passes.")


@dataclass(frozen=True)
class JobSpec:
    name: str = setting(
        "",
        "The job's name, shown by status and the report; runs of one name and corpus form a "
        "checkpoint trend (default: the checkpoints source's last part, else the model's).",
    )
    model: str = setting(DEFAULT_MODEL, "Model directory or hub id.")
    corpus: CorpusSpec = field(default_factory=CorpusSpec)
    analysis: AnalysisSpec = field(default_factory=AnalysisSpec)
    runtime: RuntimeSpec = field(default_factory=RuntimeSpec)
    output: OutputSpec = field(default_factory=OutputSpec)
    checkpoints: CheckpointSpec = field(default_factory=CheckpointSpec)
    out: str = setting("results", "Output root (directory or object-store URI).")
    step: int | None = setting(None, "Training step of the checkpoint, when known.")

    def default_name(self) -> str:
        """The name of a job that gives none: the last part of its checkpoints source, or of
        its model (a directory or hub id), so runs of different models or checkpoint
        series never share one default name (``checkpoint_trend`` groups by name)."""
        source = self.checkpoints.source or self.model
        parts = [p for p in re.split(r"[/\\:@]", source.removeprefix("hub:")) if p]
        return parts[-1] if parts else "mixscope"

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
    "measures": "analysis.measures",
    "address": "runtime.address",
    "docs_per_shard": "runtime.docs_per_shard",
    "device": "runtime.device",
    "detail": "output.detail",
    "sample_rate": "output.sample_rate",
    "precision": "output.precision",
}


@functools.cache
def spec_fields() -> dict[str, FieldInfo]:
    """Every field of a job spec by its key (``model``, ``runtime.workers``, …)."""
    out = describe(JobSpec)
    for name, cls in SECTIONS.items():
        out.update(describe(cls, f"{name}."))
    return out


def field_info(key: str) -> FieldInfo:
    """One field by its key or alias (``workers`` → ``runtime.workers``)."""
    return spec_fields()[ALIASES.get(key, key)]
