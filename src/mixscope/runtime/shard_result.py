"""What a worker hands the driver for one finished shard: a typed, frozen value.

Why typed and not a dict: it crosses a process boundary (a Ray actor's return value) and
becomes a commit record on the other side; a misspelt or missing key would otherwise
surface only when the driver commits, far from the worker that made it. The driver adds
what only it knows (the attempt, the commit time) in :meth:`ShardResult.commit_record`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mixscope.store.records import CommitRecord, FileEntry


@dataclass(frozen=True)
class ShardResult:
    """One shard's files (written, renamed, not yet committed) and its counts."""

    run_id: str
    shard_id: int
    docs: int
    sequences: int
    tokens: int
    rows: int  # token-layer observations the statistics count
    detail_rows: int  # per-token rows written (output.detail)
    files: Mapping[str, FileEntry] = field(default_factory=dict)  # kind → file
    seconds: float = 0.0  # wall time of the shard on its worker
    host: str = ""
    pid: int = 0
    device: str = ""
    #: CPU seconds of the shard's result path on the worker's host (statistics, detail,
    #: files): not committed, read by benchmarks/actor.py
    result_cpu_seconds: float = 0.0
    #: when (``time.time()`` on the worker) its device phase and its ``finish`` began and
    #: ended (``device_start``, ``device_end``, ``finish_start``, ``finish_end``): not
    #: committed; shows the overlap of shards on one worker (tests, benchmarks)
    phases: Mapping[str, float] = field(default_factory=dict)

    @staticmethod
    def entries(files: Mapping[str, Mapping[str, Any]]) -> dict[str, FileEntry]:
        """The typed entries of what ``ShardAccumulator.finish`` wrote (path, bytes, sha256,
        rows per kind)."""
        return {k: FileEntry.from_json(e, f"files.{k}") for k, e in files.items()}

    def commit_record(self, attempt: int, committed_at: str) -> CommitRecord:
        """The commit record of this result, produced by its ``attempt``-th attempt."""
        return CommitRecord(
            run_id=self.run_id,
            shard_id=self.shard_id,
            docs=self.docs,
            tokens=self.tokens,
            rows=self.rows,
            files=dict(self.files),
            seconds=self.seconds,
            sequences=self.sequences,
            detail_rows=self.detail_rows,
            attempt=attempt,
            host=self.host,
            pid=self.pid,
            device=self.device,
            committed_at=committed_at,
        )
