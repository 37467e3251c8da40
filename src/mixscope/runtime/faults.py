"""Fault injection for the exactly-once tests, driven by one environment variable.

``MIXSCOPE_FAULTS`` is a JSON object; absent (the normal case) nothing happens. Keys:

- ``{"kill": {"shard": 3, "once": "/tmp/m"}}``: the worker process dies (``os._exit``) in
  the middle of shard 3; with ``once``, only while the marker file does not exist yet.
- ``{"fail": {"shard": 2}}``: shard 2 raises every time.
- ``{"fail_once_each": {"dir": "/tmp/f"}}``: every shard raises on its first attempt (a
  retry storm); a marker file per shard in ``dir`` remembers which have failed.
- ``{"slow": {"seconds": 1.0}}``: every shard takes at least this long (a sleep; results
  unchanged), so a test can change the cluster while a job runs.
- ``{"slow_finish": {"seconds": 1.0}}``: every shard's ``finish`` (its files written, after
  the model is done with it) takes at least this long, so a test sees the next shard's
  model work overlap it.
- ``{"slow_load": {"seconds": 1.0}}``: a worker's model load takes at least this long (a
  sleep before the weights load: a slow disk or hub), so a test sees what overlaps it.
- ``{"crash_before_commit": {"shard": 0, "once": "/tmp/m"}}``: the driver dies after the
  shard's files are written and renamed but before its commit record.
- ``{"kill_where": {"env": "NODE_TAG", "value": "n2"}}``: every shard attempt dies in the
  processes whose environment has ``NODE_TAG=n2`` (a Ray node started with it: a node
  that keeps failing).
- ``{"hold": {"until": "/tmp/go", "env": "NODE_TAG", "value": "head"}}``: every shard
  attempt in the processes whose environment has ``NODE_TAG=head`` waits (10 minutes at
  most) until the file ``/tmp/go`` exists, so a test decides when that node's shards go on
  (another node must get work before this one can finish the job).
- ``{"trace": {"dir": "/tmp/t"}}``: every shard attempt that starts leaves one file in
  ``dir`` (``<pid>-<shard>-<n>``), so a test counts how many times shards were analysed.
- ``{"die_in_consolidation": {"trigger": "/tmp/c"}}``: once the file ``/tmp/c`` exists
  (holding a number k), the driver process dies (``os._exit``) just before the k-th write
  or delete of the next consolidation that merges anything (k = 1: before its first
  statistics file; after its record: among the deletions); the trigger is renamed
  ``/tmp/c.fired`` (holding what was about to happen) first, so a chaos run knows why its
  driver died (benchmarks/chaos.py).
- ``{"disable": ["run_lock"]}``: a guard switched off (``run_lock``: two drivers of one run
  both proceed), so a test can show that the guard is what its scenario relies on.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from mixscope.store.layout import Layout

ENV = "MIXSCOPE_FAULTS"


def _fault(kind: str, shard_id: int) -> bool:
    raw = os.environ.get(ENV)
    if not raw:
        return False
    spec = json.loads(raw).get(kind)
    if not spec or int(spec.get("shard", -1)) != shard_id:
        return False
    once = spec.get("once")
    if once:
        marker = Path(once)
        if marker.exists():
            return False
        marker.write_text("fired")
    return True


def maybe_kill(shard_id: int) -> None:
    if _fault("kill", shard_id):
        os._exit(137)
    where = _spec("kill_where")
    if isinstance(where, dict) and os.environ.get(where["env"]) == where["value"]:
        os._exit(137)  # a node whose every actor dies (its processes carry the variable)


def _spec(kind: str) -> object:
    raw = os.environ.get(ENV)
    return json.loads(raw).get(kind) if raw else None


def disabled(guard: str) -> bool:
    return guard in (_spec("disable") or [])  # type: ignore[operator]


def _trace(shard_id: int) -> None:
    trace = _spec("trace")
    if isinstance(trace, dict):
        folder = Path(trace["dir"])
        folder.mkdir(parents=True, exist_ok=True)
        for n in range(1_000_000):
            try:
                (folder / f"{os.getpid()}-{shard_id}-{n}").open("x").close()
                return
            except FileExistsError:
                continue


def maybe_fail(shard_id: int) -> None:
    _trace(shard_id)  # the first thing a shard attempt does
    if _fault("fail", shard_id):
        raise RuntimeError(f"injected failure in shard {shard_id}")
    raw = os.environ.get(ENV)
    storm = json.loads(raw).get("fail_once_each") if raw else None
    if storm:
        marker = Path(storm["dir"]) / f"{shard_id}"
        if not marker.exists():
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text("failed once")
            raise RuntimeError(f"injected first-attempt failure in shard {shard_id}")


def maybe_crash_before_commit(shard_id: int) -> None:
    if _fault("crash_before_commit", shard_id):
        os._exit(137)


def maybe_slow() -> None:
    raw = os.environ.get(ENV)
    slow = json.loads(raw).get("slow") if raw else None
    if slow:
        import time

        time.sleep(float(slow.get("seconds", 1.0)))


def maybe_hold() -> None:
    hold = _spec("hold")
    if isinstance(hold, dict) and os.environ.get(hold["env"]) == hold["value"]:
        import time

        gate, deadline = Path(hold["until"]), time.monotonic() + 600.0
        while not gate.exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # polls for the test's file: the event, not a duration


def maybe_slow_finish() -> None:
    slow = _spec("slow_finish")
    if isinstance(slow, dict):
        import time

        time.sleep(float(slow.get("seconds", 1.0)))


def maybe_slow_load() -> None:
    slow = _spec("slow_load")
    if isinstance(slow, dict):
        import time

        time.sleep(float(slow.get("seconds", 1.0)))


def consolidation_layout(layout: Layout) -> Layout:
    """The layout a consolidation writes through: ``layout`` itself, or one that dies at
    the step the armed ``die_in_consolidation`` trigger names (read when the consolidation
    starts: one armed after it waits for the next)."""
    spec = _spec("die_in_consolidation")
    if not isinstance(spec, dict):
        return layout
    trigger = Path(spec["trigger"])
    try:
        step = int(trigger.read_text())
    except (FileNotFoundError, ValueError):
        return layout
    from mixscope.store.layout import Layout

    class Dying(Layout):
        """Counts the writes and deletes of a merge (from its first statistics file on:
        a consolidation with nothing to merge deletes leftovers only) and dies at ``step``."""

        ops = 0

        def _step(self, what: str, path: str) -> None:
            if self.ops == 0 and not (what == "write" and "/gen-" in path):
                return
            self.ops += 1
            if self.ops >= step:
                trigger.rename(trigger.with_name(trigger.name + ".fired"))
                trigger.with_name(trigger.name + ".fired").write_text(f"{what} {path}\n")
                os._exit(137)

        def write_bytes_atomic(self, path: str, data) -> None:  # type: ignore[no-untyped-def]
            self._step("write", path)
            super().write_bytes_atomic(path, data)

        def write_json_exclusive(self, path: str, obj: object) -> bool:
            self._step("record", path)
            return super().write_json_exclusive(path, obj)

        def delete(self, path: str) -> None:
            self._step("delete", path)
            super().delete(path)

    return Dying(layout.root, layout.fs, layout.base)
