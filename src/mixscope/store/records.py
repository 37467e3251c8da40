"""Typed records: what a shard's commit and failure records hold, written and read here only.

Every record carries ``format`` (``RECORD_FORMAT``) so a reader can tell an older writer's
record from a damaged one. Reading is strict about the keys the pipeline relies on: a
record without one raises ``CorruptRecordError`` naming the file and the key (the same
error a truncated record gives, so ``status`` and ``verify`` report it as damage) instead
of a ``KeyError`` far from the cause. Keys this version does not know (a newer writer's)
are kept in ``extra`` and written back unchanged, so an older reader never drops them.

Records written before ``format`` existed read as format 0 with the same keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from mixscope.errors import CorruptRecordError

#: version of the commit and failure records (0: records written before it was stored)
RECORD_FORMAT = 1


@dataclass(frozen=True)
class FileEntry:
    """One committed file: where it is (relative to the root), its size, digest and rows."""

    path: str
    bytes: int
    sha256: str
    rows: int

    @classmethod
    def from_json(cls, d: Mapping[str, Any], where: str) -> FileEntry:
        return cls(
            path=str(need(d, "path", where)),
            bytes=int(need(d, "bytes", where)),
            sha256=str(need(d, "sha256", where)),
            rows=int(need(d, "rows", where)),
        )

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "bytes": self.bytes, "sha256": self.sha256, "rows": self.rows}


@dataclass(frozen=True)
class CommitRecord:
    """A finished shard: its files become visible when this record exists (store/manifest.py)."""

    run_id: str
    shard_id: int
    docs: int
    tokens: int
    rows: int  # token-layer observations the statistics count
    files: Mapping[str, FileEntry]  # kind (tokens, documents, token_stats, …) → file
    seconds: float  # wall time of the shard on its worker
    sequences: int = 0
    detail_rows: int = 0  # per-token rows written (output.detail)
    attempt: int = 1
    host: str = ""
    pid: int = 0
    device: str = ""
    committed_at: str = ""
    format: int = RECORD_FORMAT
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def worker(self) -> str:
        return f"{self.host}:{self.pid}"

    @classmethod
    def from_json(cls, d: Mapping[str, Any], where: str) -> CommitRecord:
        files = need(d, "files", where)
        if not isinstance(files, Mapping):
            raise CorruptRecordError(f"{where}: files is not a mapping")
        known = known_keys(cls)
        return cls(
            run_id=str(d.get("run_id", "")),
            shard_id=int(need(d, "shard_id", where)),
            docs=int(need(d, "docs", where)),
            tokens=int(need(d, "tokens", where)),
            rows=int(need(d, "rows", where)),
            files={k: FileEntry.from_json(e, f"{where}: files.{k}") for k, e in files.items()},
            seconds=float(need(d, "seconds", where)),
            sequences=int(d.get("sequences", 0)),
            detail_rows=int(d.get("detail_rows", 0)),
            attempt=int(d.get("attempt", 1)),
            host=str(d.get("host", "")),
            pid=int(d.get("pid", 0)),
            device=str(d.get("device", "")),
            committed_at=str(d.get("committed_at", "")),
            format=int(d.get("format", 0)),
            extra={k: v for k, v in d.items() if k not in known},
        )

    def to_json(self) -> dict[str, Any]:
        out = {
            f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("files", "extra")
        }
        out["files"] = {k: e.to_json() for k, e in self.files.items()}
        return {**self.extra, **out}


@dataclass(frozen=True)
class FailureRecord:
    """A shard that failed every attempt the retry policy allowed (until a rerun commits it)."""

    shard_id: int
    error: str
    attempts: int
    format: int = RECORD_FORMAT

    @classmethod
    def from_json(cls, d: Mapping[str, Any], where: str) -> FailureRecord:
        return cls(
            shard_id=int(need(d, "shard_id", where)),
            error=str(d.get("error") or ""),  # an exception with no message leaves ""
            attempts=int(d.get("attempts", 0)),
            format=int(d.get("format", 0)),
        )

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def known_keys(cls: type) -> set[str]:
    return {f.name for f in fields(cls)} - {"extra"}


def need(d: Mapping[str, Any], key: str, where: str) -> Any:
    """``d[key]``, or ``CorruptRecordError`` naming ``where`` and the key (shared by every
    typed record: store/runs.py, store/lease.py)."""
    if not isinstance(d, Mapping):
        raise CorruptRecordError(f"{where}: not a JSON object")
    if key not in d or d[key] is None:
        raise CorruptRecordError(f"{where}: no {key!r}")
    return d[key]
