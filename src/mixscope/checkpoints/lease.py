"""Leases with expiry: at most one analysis of a checkpoint at a time, across processes
and machines sharing the results folder, and no lock that a crashed process leaves forever.

A lease is a file created with O_EXCL (atomic on local and NFSv3+ filesystems) holding its
owner and expiry; the holder renews it from a heartbeat thread. An expired lease is taken
over under a short-lived steal guard (itself an O_EXCL file), so two processes that both see
it expired cannot both end up holding it.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path

STEAL_GUARD_SECONDS = 30.0


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
    def __init__(self, folder: str | Path, name: str, ttl: float) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / f"{name}.lease"
        self.guard = self.folder / f"{name}.steal"
        self.ttl = ttl
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _record(self) -> dict:
        return {"owner": self.owner, "expires_at": time.time() + self.ttl}

    def holder(self) -> dict | None:
        """The current lease record, if any (expired or not)."""
        return _read(self.path)

    def acquire(self) -> bool:
        """Take the lease if it is free or expired; start renewing it."""
        taken = _write_excl(self.path, self._record()) or (
            self._steal_if_expired() and _write_excl(self.path, self._record())
        )
        if not taken:
            return False
        self._thread = threading.Thread(target=self._heartbeat, daemon=True, name="lease")
        self._thread.start()
        return True

    def _steal_if_expired(self) -> bool:
        current = _read(self.path)
        if current is not None and current.get("expires_at", 0) > time.time():
            return False
        guard = _read(self.guard)
        if guard is not None and guard.get("expires_at", 0) < time.time():
            self.guard.unlink(missing_ok=True)  # a crashed stealer's guard
        if not _write_excl(
            self.guard, {"owner": self.owner, "expires_at": time.time() + STEAL_GUARD_SECONDS}
        ):
            return False
        try:
            current = _read(self.path)  # re-read under the guard: nobody else can delete now
            if current is None or current.get("expires_at", 0) <= time.time():
                self.path.unlink(missing_ok=True)
                return True
            return False
        finally:
            self.guard.unlink(missing_ok=True)

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            current = _read(self.path)
            if current is None or current.get("owner") != self.owner:
                return  # lost (should not happen while renewing); the run's commits stay exact
            tmp = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex[:6]}.tmp")
            tmp.write_text(json.dumps(self._record()))
            os.replace(tmp, self.path)

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        current = _read(self.path)
        if current is not None and current.get("owner") == self.owner:
            self.path.unlink(missing_ok=True)
