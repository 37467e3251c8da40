"""One driver per run at a time: the run lock.

Two drivers of the same run (two identical ``mixscope run`` commands, a scheduler that
starts a job twice) would both analyse every pending shard and consolidate statistics
under each other's feet. The driver holds this lock from before it reads the commit
records until its last commit; a second driver gets ``RunBusyError``, a one-line message
naming the holder, and exits non-zero without touching anything.

Local roots use an advisory ``flock`` on ``_mixscope/runs/<run>/driver.lock``: the
operating system releases it when the holder exits, however it exits (SIGKILL included),
so a killed driver never blocks the rerun that resumes it. Object-store roots have no
locks: there the lock is a lease with expiry (``store/lease.py``: conditional
writes, renewed by a heartbeat), so a killed driver's lock frees itself after ``TTL``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator

from mixscope.errors import MixscopeError
from mixscope.runtime import faults
from mixscope.store.layout import Layout

#: seconds a remote run lease lives without a heartbeat (renewed every TTL / 3): how long
#: a killed driver's run stays busy; ``MIXSCOPE_RUN_LEASE_SECONDS`` sets it (the chaos run
#: kills drivers by the dozen and shortens it)
TTL = 60.0
TTL_ENV = "MIXSCOPE_RUN_LEASE_SECONDS"


def lease_seconds() -> float:
    """The run lease's lifetime: ``MIXSCOPE_RUN_LEASE_SECONDS``, else :data:`TTL`."""
    raw = os.environ.get(TTL_ENV)
    if not raw:
        return TTL
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if value <= 0:
        raise MixscopeError(f"{TTL_ENV}={raw}: expected a positive number of seconds")
    return value


class RunBusyError(MixscopeError):
    """Another driver holds the run (exit 3: try again later)."""

    exit_code = 3


def _clock(seconds: float) -> str:
    return time.strftime("%H:%M:%S UTC", time.gmtime(seconds))


def _holder_text(info: dict) -> str:
    """Who holds the run: a local lock records since when, a remote lease until when (a
    killed driver's lease is free once it expires: the rerun then resumes)."""
    owner = info.get("owner", "?")
    if info.get("expires_at"):
        return f"{owner} (its lease expires at {_clock(info['expires_at'])} unless renewed)"
    since = info.get("since")
    return f"{owner} since {_clock(since) if since else '?'}"


@contextlib.contextmanager
def run_lock(layout: Layout, run_id: str) -> Iterator[None]:
    """Hold the run's lock for the body; ``RunBusyError`` if another driver holds it."""
    me = {"owner": f"{socket.gethostname()}:{os.getpid()}", "since": time.time()}
    busy = (
        f"run {run_id} is being run by {{}}; wait for it to finish "
        "(mixscope status shows its progress) or stop it first"
    )
    if faults.disabled("run_lock"):  # only the reliability test that proves the lock matters
        yield
        return
    if not layout.is_local:
        from mixscope.store.lease import Lease

        lease = Lease(layout.run_lease_folder(run_id), "driver", lease_seconds())
        if not lease.acquire():
            raise RunBusyError(busy.format(_holder_text(lease.holder() or {})))
        try:
            yield
        finally:
            lease.release()
        return

    import fcntl

    path = layout.lock_path(run_id)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                info = json.loads(os.pread(fd, 4096, 0) or b"{}")
            except ValueError:
                info = {}
            raise RunBusyError(busy.format(_holder_text(info))) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)  # who holds it, for the message above
        yield
    finally:
        os.close(fd)  # closing releases the lock
