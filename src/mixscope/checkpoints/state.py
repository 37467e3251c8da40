"""Per-checkpoint state kept under the results root: done, failed (with retries), running.

One record per checkpoint, ``_mixscope/checkpoints/<id>.json`` (``Layout.checkpoint_state_path``),
typed as :class:`CheckpointRecord`. Each write replaces the whole record (written atomically:
a temporary name, then a rename; one PUT on an object store). Records written before this
type existed read unchanged: every key but ``key`` is optional, and keys this version does
not know are kept in ``extra`` and written back.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from mixscope.errors import CorruptRecordError
from mixscope.store.layout import Layout


def checkpoint_id(key: str) -> str:
    return hashlib.blake2b(key.encode(), digest_size=8).hexdigest()


@dataclass(frozen=True)
class CheckpointRecord:
    """A checkpoint's last analysis: which run, how many attempts, what went wrong and when
    to try again (checkpoints/sync.py). ``status`` is "" for a checkpoint never tried."""

    key: str
    status: str = ""
    model: str = ""
    revision: str | None = None
    step: int | None = None
    run_id: str | None = None
    fingerprint: str = ""
    attempts: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    last_error: str = ""
    next_attempt_at: float = 0.0
    updated_at: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "checkpoint state") -> CheckpointRecord:
        if not isinstance(d, Mapping) or not isinstance(d.get("key"), str):
            raise CorruptRecordError(f"{where}: no 'key'")
        known = {f.name for f in fields(cls)} - {"extra"}
        values = {k: v for k, v in d.items() if k in known and v is not None}
        extra = {k: v for k, v in d.items() if k not in known}
        return cls(**values, extra=extra)

    def to_dict(self) -> dict[str, Any]:
        """The record as stored: the fields that are set (unset times and ids left out, as
        before this type), then the unknown keys read with it."""
        out: dict[str, Any] = dict(self.extra)
        defaults = CheckpointRecord(key=self.key)
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "extra" or (value is None or value == getattr(defaults, f.name)):
                continue
            out[f.name] = value
        out["key"] = self.key
        return out


class CheckpointState:
    """The records of every checkpoint under one results root (a local path or a URI)."""

    def __init__(self, root: str) -> None:
        self.layout = Layout.open(root)

    @property
    def lease_folder(self) -> str:
        """Where the per-checkpoint leases live (store/lease.py takes a folder or a URI)."""
        return self.layout.checkpoint_lease_folder()

    def path(self, key: str) -> str:
        return self.layout.checkpoint_state_path(checkpoint_id(key))

    def get(self, key: str) -> CheckpointRecord:
        """The checkpoint's record; an empty one (never tried) if none or unreadable."""
        try:
            found = self.layout.read_json(self.path(key))
            return CheckpointRecord.from_dict(found) if found is not None else CheckpointRecord(key)
        except CorruptRecordError:
            return CheckpointRecord(key)

    def put(self, record: CheckpointRecord) -> None:
        """Replace the checkpoint's record, stamped with the time of the write."""
        stamped = replace(record, updated_at=time.time())
        self.layout.write_json(self.path(record.key), stamped.to_dict())

    def all(self) -> list[CheckpointRecord]:
        """Every readable record, in file-name order."""
        out = []
        for p in self.layout.list_files(self.layout.checkpoints_dir(), ".json"):
            try:
                found = self.layout.read_json(p)
                if found is not None:
                    out.append(CheckpointRecord.from_dict(found, self.layout.relative(p)))
            except CorruptRecordError:
                continue
        return out
