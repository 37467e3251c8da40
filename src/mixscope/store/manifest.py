"""The commit protocol: a shard's files become visible only when its commit record exists.

Workers write each file to a temporary name and rename it; the driver then writes one
commit record per shard (atomically). Readers list commit records, never data folders, so
a crash leaves no visible partial data, and a rerun that recomputes a shard overwrites the
same file names and the same record: results never duplicate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from mixscope.errors import CorruptRecordError
from mixscope.store.layout import Layout
from mixscope.store.records import CommitRecord, FailureRecord

R = TypeVar("R", CommitRecord, FailureRecord)


def commit_shard(layout: Layout, run_id: str, record: CommitRecord) -> None:
    """Record a finished shard (its files were already written and renamed)."""
    layout.write_json(layout.commit_file(run_id, record.shard_id), record.to_json())
    layout.delete(layout.failure_file(run_id, record.shard_id))


def record_failure(layout: Layout, run_id: str, shard_id: int, error: str, attempts: int) -> None:
    layout.write_json(
        layout.failure_file(run_id, shard_id), FailureRecord(shard_id, error, attempts).to_json()
    )


def read_records(
    layout: Layout, folder: str, parse: Callable[[dict[str, Any], str], R]
) -> tuple[dict[int, R], list[str]]:
    """(shard_id → record of every valid record in ``folder``, paths of the others): a record
    that no longer parses or lacks a key is left out and reported as damage by verify."""
    out: dict[int, R] = {}
    bad: list[str] = []
    for path in layout.list_files(folder, ".json"):
        try:
            rec = layout.read_json(path)
            if rec is not None:
                parsed = parse(rec, path)
                out[parsed.shard_id] = parsed
        except (CorruptRecordError, TypeError, ValueError):
            bad.append(path)
    return out, bad


def commits(layout: Layout, run_id: str) -> dict[int, CommitRecord]:
    """shard_id → commit record, for every committed shard of the run."""
    return read_records(layout, layout.commits_dir(run_id), CommitRecord.from_json)[0]


def failures(layout: Layout, run_id: str) -> dict[int, FailureRecord]:
    return read_records(layout, layout.failures_dir(run_id), FailureRecord.from_json)[0]


def committed_files_by_kind(
    layout: Layout, kinds: tuple[str, ...], run_ids: list[str] | None = None
) -> dict[str, list[str]]:
    """kind → paths of the committed files of the given runs, reading each record once."""
    runs = run_ids if run_ids is not None else layout.list_dirs(layout.runs_dir())
    files: dict[str, list[str]] = {kind: [] for kind in kinds}
    for run_id in runs:
        for rec in commits(layout, run_id).values():
            for kind in kinds:
                if kind in rec.files:
                    files[kind].append(layout.absolute(rec.files[kind].path))
    return {kind: sorted(paths) for kind, paths in files.items()}


def committed_files(layout: Layout, kind: str, run_ids: list[str] | None = None) -> list[str]:
    """Paths of the committed ``kind`` files of the given runs (all runs by default)."""
    return committed_files_by_kind(layout, (kind,), run_ids)[kind]
