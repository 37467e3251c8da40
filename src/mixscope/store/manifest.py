"""The commit protocol: a shard's files become visible only when its commit record exists.

Workers write each file to a temporary name and rename it; the driver then writes one
commit record per shard (atomically). Readers list commit records, never data folders, so
a crash leaves no visible partial data, and a rerun that recomputes a shard overwrites the
same file names and the same record: results never duplicate.
"""

from __future__ import annotations

from typing import Any

from mixscope.store.layout import CorruptRecordError, Layout


def commit_shard(layout: Layout, run_id: str, result: dict[str, Any]) -> None:
    """Record a finished shard (its files were already written and renamed)."""
    layout.write_json(layout.commit_file(run_id, result["shard_id"]), result)
    layout.delete(layout.failure_file(run_id, result["shard_id"]))


def record_failure(layout: Layout, run_id: str, shard_id: int, error: str, attempts: int) -> None:
    layout.write_json(
        layout.failure_file(run_id, shard_id),
        {"shard_id": shard_id, "error": error, "attempts": attempts},
    )


def _records(layout: Layout, folder: str) -> dict[int, dict[str, Any]]:
    """shard_id → record of every readable record in ``folder``; one that no longer parses
    is left out here and reported as damage by ``store/verify.py``."""
    out: dict[int, dict[str, Any]] = {}
    for path in layout.list_files(folder, ".json"):
        try:
            rec = layout.read_json(path)
        except CorruptRecordError:
            continue
        if rec is not None:
            out[int(rec["shard_id"])] = rec
    return out


def commits(layout: Layout, run_id: str) -> dict[int, dict[str, Any]]:
    """shard_id → commit record, for every committed shard of the run."""
    return _records(layout, f"{layout.run_dir(run_id)}/commits")


def failures(layout: Layout, run_id: str) -> dict[int, dict[str, Any]]:
    return _records(layout, f"{layout.run_dir(run_id)}/failures")


def committed_files_by_kind(
    layout: Layout, kinds: tuple[str, ...], run_ids: list[str] | None = None
) -> dict[str, list[str]]:
    """kind → paths of the committed files of the given runs, reading each record once."""
    runs = run_ids if run_ids is not None else layout.list_dirs(layout.runs_dir())
    files: dict[str, list[str]] = {kind: [] for kind in kinds}
    for run_id in runs:
        for rec in commits(layout, run_id).values():
            for kind in kinds:
                path = rec.get("files", {}).get(kind, {}).get("path")
                if path:
                    files[kind].append(layout.absolute(path))
    return {kind: sorted(paths) for kind, paths in files.items()}


def committed_files(layout: Layout, kind: str, run_ids: list[str] | None = None) -> list[str]:
    """Paths of the committed ``kind`` files of the given runs (all runs by default)."""
    return committed_files_by_kind(layout, (kind,), run_ids)[kind]
