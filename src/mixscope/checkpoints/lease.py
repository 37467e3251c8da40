"""Leases with expiry: at most one analysis of a checkpoint at a time, across processes
and machines sharing the results folder, and no lock that a crashed process leaves forever.

A lease is a file created with O_EXCL (atomic on local and NFSv3+ filesystems) holding its
owner and expiry; the holder renews it from a heartbeat thread. Steals of an expired lease,
renewals and releases all run under a short-lived guard (itself an O_EXCL file) and re-read
the record under it, so two processes can never both believe they hold a lease.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

#: a guard older than this was left by a crashed process
GUARD_SECONDS = 30.0


def _write_excl(path: Path, data: dict) -> bool:
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    return True


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None


class Lease:
    """One holder at a time: :meth:`acquire`, then renewed by a heartbeat, :meth:`release`.

    Every change to an existing lease file (steal, renewal, release) happens under the guard
    file and re-reads the record first, so a renewal can never overwrite a lease another
    process has just taken over: the renewer sees the new owner and knows it lost (``held``
    turns False). Creating a lease where none exists needs no guard (O_EXCL).
    """

    def __init__(self, folder: str | Path, name: str, ttl: float) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / f"{name}.lease"
        self.guard = self.folder / f"{name}.steal"
        self.ttl = ttl
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.held = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _record(self) -> dict:
        return {"owner": self.owner, "expires_at": time.time() + self.ttl}

    def holder(self) -> dict | None:
        """The current lease record, if any (expired or not)."""
        return _read(self.path)

    @contextlib.contextmanager
    def _guarded(self, wait: float) -> Iterator[bool]:
        """Hold the guard file (O_EXCL) for a read-check-write of the lease; yields False if
        it could not be had within ``wait`` seconds. A crashed process's guard expires."""
        deadline = time.monotonic() + wait
        while True:
            guard = _read(self.guard)
            if guard is not None and guard.get("expires_at", 0) < time.time():
                self.guard.unlink(missing_ok=True)  # left by a crashed process
            record = {"owner": self.owner, "expires_at": time.time() + GUARD_SECONDS}
            if _write_excl(self.guard, record):
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
        if not (_write_excl(self.path, self._record()) or self._steal_if_expired()):
            return False
        self.held = True
        self._thread = threading.Thread(target=self._heartbeat, daemon=True, name="lease")
        self._thread.start()
        return True

    def _steal_if_expired(self) -> bool:
        current = _read(self.path)
        if current is not None and current.get("expires_at", 0) > time.time():
            return False
        with self._guarded(wait=0) as guarded:
            if not guarded:
                return False  # someone else is stealing or renewing right now
            current = _read(self.path)  # re-read under the guard
            if current is not None and current.get("expires_at", 0) > time.time():
                return False
            self.path.unlink(missing_ok=True)
            return _write_excl(self.path, self._record())

    def renew(self) -> bool:
        """Push the expiry forward if this lease is still ours; False (and ``held`` False)
        once another holder has it."""
        with self._guarded(wait=self.ttl / 3) as guarded:
            if not guarded:
                return self.held  # the guard is busy: try again at the next beat
            current = _read(self.path)
            if current is None or current.get("owner") != self.owner:
                self.held = False
                return False
            tmp = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex[:6]}.tmp")
            tmp.write_text(json.dumps(self._record()))
            os.replace(tmp, self.path)
            return True

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            if not self.renew():
                return  # lost: the run's commits stay exact, the new holder redoes nothing

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._guarded(wait=5.0) as guarded:
            current = _read(self.path)
            if guarded and current is not None and current.get("owner") == self.owner:
                self.path.unlink(missing_ok=True)
        self.held = False
