"""``validate``: the only place that judges a spec's values.

Fields with ``choices`` (config/spec.py) are checked against them generically; the rules
below are the ones a closed set cannot say (ranges, fields that exclude each other).
"""

from __future__ import annotations

import os

from mixscope.choices import DISTANCE_BUCKETS, parse_measure_groups
from mixscope.config.spec import MAX_SHARDS_IN_FLIGHT, JobSpec, spec_fields
from mixscope.errors import SpecError


def _looks_local(model: str) -> bool:
    """A model named by a filesystem path (absolute, ./, ../, ~), not a hub id."""
    return model.startswith(("/", "./", "../", "~")) or model in (".", "..")


def _value(spec: JobSpec, key: str) -> object:
    section, _, name = key.rpartition(".")
    return getattr(getattr(spec, section) if section else spec, name)


def validate(spec: JobSpec) -> None:
    """Raise ``SpecError`` (one line, exit 2) for the first value the spec cannot run with."""
    for info in spec_fields().values():
        if info.choices is not None and _value(spec, info.key) not in info.choices:
            raise SpecError(f"invalid job spec: {info.key}: {'|'.join(info.choices)}")
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
        (c.max_doc_bytes > 0, "corpus.max_doc_bytes: must be positive"),
        (c.limit is None or c.limit > 0, "corpus.limit: must be positive"),
        (a.max_length is None or a.max_length >= 4, "analysis.max_length: at least 4"),
        (0 <= a.mask_rate < 1, "analysis.mask_rate: in [0, 1)"),
        (
            2 <= a.distance_buckets <= DISTANCE_BUCKETS,
            f"analysis.distance_buckets: from 2 to {DISTANCE_BUCKETS}",
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
            1 <= r.shards_in_flight <= MAX_SHARDS_IN_FLIGHT,
            f"runtime.shards_in_flight: 1 to {MAX_SHARDS_IN_FLIGHT}",
        ),
        (0 < spec.output.sample_rate <= 1, "output.sample_rate: in (0, 1]"),
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
    try:  # names only; whether a group applies to the model is checked with its config
        parse_measure_groups(a.measures)
    except SpecError as exc:
        raise SpecError(f"invalid job spec: analysis.{exc}") from None
    if c.skip_regex:
        import re

        try:
            re.compile(c.skip_regex)
        except re.error as exc:
            raise SpecError(f"invalid job spec: corpus.skip_regex: {exc}") from None
