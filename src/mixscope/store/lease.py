"""Leases with expiry: at most one analysis of a checkpoint at a time, across processes
and machines sharing the results folder, and no lock that a crashed process leaves forever.

A lease is a file created with O_EXCL (atomic on local and NFSv3+ filesystems) holding its
owner and expiry; the holder renews it from a heartbeat thread. Steals of an expired lease,
renewals and releases all run under a short-lived guard (itself an O_EXCL file) and re-read
the record under it, so two processes can never both believe they hold a lease.

On an S3 results root (``folder`` an ``s3://`` URI) the same guarantees come from
conditional requests instead of files: creation is a PUT with ``If-None-Match: *``, and
every steal, renewal and release is a compare-and-swap on the ETag just read (``If-Match``),
so no guard object is needed: of two writers that read the same record, one wins and the
other is told so (412). Endpoints that ignore these headers cannot give this guarantee
(docs/storage.md).

The record itself is :class:`LeaseRecord` (owner, expiry, ``format``), written and read only
here with store/records.py's conventions: a record that is not JSON, or lacks its owner or
expiry, is damage, and a damaged lease is treated as expired (replaced under the guard or by
compare-and-swap) rather than failing with a ``KeyError``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from mixscope.errors import CorruptRecordError
from mixscope.store.records import need

#: a guard older than this was left by a crashed process
GUARD_SECONDS = 30.0
#: version of the lease record (0: records written before it was stored)
LEASE_FORMAT = 1
#: the clock leases expire by (epoch seconds): tests advance a fake one instead of
#: sleeping past a TTL
now: Callable[[], float] = time.time


@dataclass(frozen=True)
class LeaseRecord:
    """Who holds a lease (``host:pid:token``) and until when (epoch seconds)."""

    owner: str
    expires_at: float
    format: int = LEASE_FORMAT

    @classmethod
    def new(cls, owner: str, ttl: float) -> LeaseRecord:
        return cls(owner=owner, expires_at=now() + ttl)

    @classmethod
    def from_json(cls, d: Mapping[str, Any], where: str) -> LeaseRecord:
        return cls(
            owner=str(need(d, "owner", where)),
            expires_at=float(need(d, "expires_at", where)),
            format=int(d.get("format", 0)),
        )

    @classmethod
    def parse(cls, data: str | bytes, where: str) -> LeaseRecord | None:
        """The record in ``data``; None (treated as expired) if it is damaged."""
        try:
            return cls.from_json(json.loads(data), where)
        except (ValueError, TypeError, CorruptRecordError):
            return None

    @property
    def expired(self) -> bool:
        return self.expires_at <= now()

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def dumps(self) -> str:
        return json.dumps(self.to_json())


def _write_excl(path: Path, record: LeaseRecord) -> bool:
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(record.dumps())
    return True


def _read(path: Path) -> LeaseRecord | None:
    try:
        data = path.read_text()
    except FileNotFoundError:
        return None
    return LeaseRecord.parse(data, str(path))


class Lease:
    """One holder at a time: :meth:`acquire`, then renewed by a heartbeat, :meth:`release`.

    Every change to an existing lease file (steal, renewal, release) happens under the guard
    file and re-reads the record first, so a renewal can never overwrite a lease another
    process has just taken over: the renewer sees the new owner and knows it lost (``held``
    turns False). Creating a lease where none exists needs no guard (O_EXCL).
    """

    def __init__(self, folder: str | Path, name: str, ttl: float) -> None:
        self._remote: _RemoteLease | None = None
        if isinstance(folder, str) and "://" in folder:
            self._remote = _RemoteLease(folder, name)
        else:
            self.folder = Path(folder)
            self.folder.mkdir(parents=True, exist_ok=True)
            self.path = self.folder / f"{name}.lease"
            self.guard = self.folder / f"{name}.steal"
        self.ttl = ttl
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.held = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _record(self) -> LeaseRecord:
        return LeaseRecord.new(self.owner, self.ttl)

    def holder_record(self) -> LeaseRecord | None:
        """The current lease record, if any (expired or not); None if damaged."""
        if self._remote is not None:
            got = self._remote.read()
            return None if got is None else got[0]
        return _read(self.path)

    def holder(self) -> dict[str, Any] | None:
        """:meth:`holder_record` as JSON (its keys: owner, expires_at, format)."""
        record = self.holder_record()
        return None if record is None else record.to_json()

    @contextlib.contextmanager
    def _guarded(self, wait: float) -> Iterator[bool]:
        """Hold the guard file (O_EXCL) for a read-check-write of the lease; yields False if
        it could not be had within ``wait`` seconds. A crashed process's guard expires."""
        deadline = time.monotonic() + wait
        while True:
            guard = _read(self.guard)
            if guard is not None and guard.expired:
                self.guard.unlink(missing_ok=True)  # left by a crashed process
            if _write_excl(self.guard, LeaseRecord.new(self.owner, GUARD_SECONDS)):
                break
            if time.monotonic() >= deadline:
                yield False
                return
            time.sleep(0.01)
        try:
            yield True
        finally:
            self.guard.unlink(missing_ok=True)

    def acquire(self) -> bool:
        """Take the lease if it is free or expired; start renewing it."""
        if self._remote is not None:
            if not self._remote.acquire(self._record()):
                return False
        elif not (_write_excl(self.path, self._record()) or self._steal_if_expired()):
            return False
        self.held = True
        self._thread = threading.Thread(target=self._heartbeat, daemon=True, name="lease")
        self._thread.start()
        return True

    def _steal_if_expired(self) -> bool:
        current = _read(self.path)
        if current is not None and not current.expired:
            return False
        with self._guarded(wait=0) as guarded:
            if not guarded:
                return False  # someone else is stealing or renewing right now
            current = _read(self.path)  # re-read under the guard
            if current is not None and not current.expired:
                return False
            self.path.unlink(missing_ok=True)
            return _write_excl(self.path, self._record())

    def renew(self) -> bool:
        """Push the expiry forward if this lease is still ours; False (and ``held`` False)
        once another holder has it."""
        if self._remote is not None:
            if not self._remote.renew(self.owner, self._record()):
                self.held = False
            return self.held
        with self._guarded(wait=self.ttl / 3) as guarded:
            if not guarded:
                return self.held  # the guard is busy: try again at the next beat
            current = _read(self.path)
            if current is None or current.owner != self.owner:
                self.held = False
                return False
            tmp = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex[:6]}.tmp")
            tmp.write_text(self._record().dumps())
            os.replace(tmp, self.path)
            return True

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                renewed = self.renew()
            except Exception:  # the store unreachable (an outage past the client's retries)
                continue  # try again at the next beat: a dead heartbeat never renews again
            if not renewed:
                return  # lost: the run's commits stay exact, the new holder redoes nothing

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._remote is not None:
            if self.held:
                self._remote.release(self.owner)
            self.held = False
            return
        with self._guarded(wait=5.0) as guarded:
            current = _read(self.path)
            if guarded and current is not None and current.owner == self.owner:
                self.path.unlink(missing_ok=True)
        self.held = False


class _RemoteLease:
    """The lease record as one object, changed only by conditional requests on S3.

    Other filesystems behind a URI (gs://, fsspec's memory://, …) get the same steps with
    a content hash for the ETag and check-then-write for the conditions: best effort, as
    their exclusive creates are (docs/storage.md)."""

    def __init__(self, folder: str, name: str) -> None:
        from mixscope.store import objectstore
        from mixscope.store.layout import Layout

        layout = Layout.open(folder)
        self.store = objectstore if layout.is_s3 else _BestEffortStore(layout)
        self.uri = folder
        self.path = f"{layout.base}/{name}.lease"

    def read(self) -> tuple[LeaseRecord | None, str] | None:
        """The record and its ETag; a damaged record reads as None (treated as expired,
        replaced by compare-and-swap)."""
        got = self.store.get(self.uri, self.path)
        if got is None:
            return None
        data, etag = got
        return LeaseRecord.parse(data, self.path), etag

    def acquire(self, record: LeaseRecord) -> bool:
        data = record.dumps().encode()
        if self.store.put_if_absent(self.uri, self.path, data):
            return True
        got = self.read()
        if got is None:  # released between the two requests: try once more
            return self.store.put_if_absent(self.uri, self.path, data)
        current, etag = got
        if current is not None and not current.expired:
            return False
        return self.store.put_if_match(self.uri, self.path, data, etag)

    def renew(self, owner: str, record: LeaseRecord) -> bool:
        got = self.read()
        if got is None or got[0] is None or got[0].owner != owner:
            return False
        return self.store.put_if_match(self.uri, self.path, record.dumps().encode(), got[1])

    def release(self, owner: str) -> None:
        got = self.read()
        if got is None or got[0] is None or got[0].owner != owner:
            return
        try:
            self.store.delete_if_match(self.uri, self.path, got[1])
        except NotImplementedError:  # no conditional delete: leave an expired record
            expired = LeaseRecord(owner=owner, expires_at=0).dumps().encode()
            self.store.put_if_match(self.uri, self.path, expired, got[1])


class _BestEffortStore:
    """``objectstore``'s conditional operations, emulated (not atomically) on a Layout."""

    def __init__(self, layout: Any) -> None:
        self.layout = layout

    def get(self, uri: str, path: str) -> tuple[bytes, str] | None:  # noqa: ARG002 - objectstore's
        import hashlib

        try:
            with self.layout.fs.open_input_stream(path) as f:
                data = f.read()
        except (FileNotFoundError, OSError):
            return None
        return data, hashlib.sha256(data).hexdigest()

    def put_if_absent(self, uri: str, path: str, data: bytes) -> bool:
        if self.get(uri, path) is not None:
            return False
        self.layout.write_bytes_atomic(path, data)
        return True

    def put_if_match(self, uri: str, path: str, data: bytes, etag: str) -> bool:
        got = self.get(uri, path)
        if got is None or got[1] != etag:
            return False
        self.layout.write_bytes_atomic(path, data)
        return True

    def delete_if_match(self, uri: str, path: str, etag: str) -> bool:
        got = self.get(uri, path)
        if got is None or got[1] != etag:
            return False
        self.layout.delete(path)
        return True
