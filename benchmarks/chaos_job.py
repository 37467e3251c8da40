"""One job of the chaos run, driven to completion through faults: a ``mixscope run``
driver process against the cluster, started again whenever it dies, while the due faults
of the schedule are injected (benchmarks/chaos.py).

A driver that ends is judged by why: exit 0, the job is complete; killed by us (a driver
kill, or ``os._exit`` in a consolidation where the armed trigger fired), it is started again
at once, as a user reruns a killed job; exit 3 (the run's lease still held by the killed
driver until it expires), it is tried again a second later; exit 1 saying it cannot reach
the object store while the store is down (a driver started in an outage longer than the
probe's wait: store/reach.py), likewise. Any other end is a failure the
job did not survive: logged with the driver's last lines, counted, and the job is resumed
anyway so that one run finds every such failure (and gives up after ``max_failures``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from chaos_faults import Cluster, Fault, Store

#: how often the supervisor looks at its driver and the schedule
TICK = 0.2


@dataclass
class Job:
    """What a job needs: its ``mixscope run`` arguments and environment, its work folder
    (driver logs, the trace of shard attempts, the consolidation trigger)."""

    args: list[str]
    env: dict[str, str]
    work: Path
    log: list[str] = field(default_factory=list)  # every event, timed: the chaos log

    @property
    def trace(self) -> Path:
        return self.work / "trace"

    @property
    def trigger(self) -> Path:
        return self.work / "consolidate.trigger"

    def faults_env(self, slow: float) -> str:
        return json.dumps(
            {
                "slow": {"seconds": slow},
                "trace": {"dir": str(self.trace)},
                "die_in_consolidation": {"trigger": str(self.trigger)},
            }
        )


@dataclass
class Outcome:
    seconds: float
    drivers: int  # driver processes started
    #: (when, what) of each driver end that was not ours to cause (with its last lines)
    failures: list[tuple[float, str]]
    busy_retries: int  # starts refused because the killed driver's lease had not expired
    unreachable: int  # starts refused in one line because the store was down


class Supervisor:
    def __init__(
        self,
        job: Job,
        cluster: Cluster,
        store: Store,
        faults: list[Fault],
        seed: int,
        max_failures: int = 10,
    ) -> None:
        self.job, self.cluster, self.store = job, cluster, store
        self.pending = sorted(faults, key=lambda f: f.due)
        self.done: list[Fault] = []
        self.rng = random.Random(seed + 1)
        self.max_failures = max_failures
        self.later: list[tuple[float, str, str]] = []  # (when, action, target): restarts
        self.proc: subprocess.Popen | None = None
        self.killed = False
        self.drivers = 0
        self.failures: list[tuple[float, str]] = []
        self.busy = 0
        self.unreachable = 0
        self.outages: list[list[float]] = []  # [start, end] of each store outage (end: inf)
        self.driver_started = 0.0
        self.t0 = 0.0
        self.next_start = 0.0

    # -- the log ---------------------------------------------------------------------

    def now(self) -> float:
        return time.time() - self.t0

    def say(self, text: str) -> None:
        line = f"[{self.now():7.1f} s] {text}"
        self.job.log.append(line)
        print(line, file=sys.stderr, flush=True)

    # -- the driver --------------------------------------------------------------------

    def _start_driver(self) -> None:
        self.drivers += 1
        self.killed = False
        log = self.job.work / f"driver-{self.drivers:03d}.log"
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mixscope.cli", "run", *self.job.args, "--no-progress"],
                env=self.job.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.driver_started = self.now()
        self.say(f"driver {self.drivers} started (pid {self.proc.pid})")

    def _driver_ended(self, rc: int) -> bool:
        """Judge an ended driver; True when the job is complete."""
        assert self.proc is not None
        log = self.job.work / f"driver-{self.drivers:03d}.log"
        fired = self.job.trigger.with_name(self.job.trigger.name + ".fired")
        self.proc = None
        if rc == 0:
            self.say(f"driver {self.drivers} finished: the job is complete")
            return True
        if self.killed:
            self.next_start = self.now()
        elif rc == 137 and fired.exists():
            fault = next(f for f in self.done if f.kind == "consolidation_kill" and not f.target)
            fault.injected_at = round(fired.stat().st_mtime - self.t0, 2)
            fault.target = fired.read_text().strip().rsplit("/", 1)[-1]
            fired.unlink()
            self.say(f"driver {self.drivers} died in a consolidation: before {fault.target}")
            self.next_start = self.now()
        elif rc == 3:
            self.busy += 1
            self.next_start = self.now() + 1.0
        elif rc == 1 and self._refused_in_outage(log):
            self.unreachable += 1
            self.say(f"driver {self.drivers}: the store is down, said so in one line")
            self.next_start = self.now() + 1.0
        else:
            tail = log.read_text(errors="replace").strip().splitlines()[-15:]
            what = f"driver {self.drivers} exit {rc}: " + " | ".join(tail)
            self.failures.append((round(self.now(), 2), what))
            self.say(f"driver {self.drivers} FAILED (exit {rc}): {tail[-1] if tail else ''}")
            self.next_start = self.now() + 2.0
        return False

    def _refused_in_outage(self, log: Path) -> bool:
        """The driver's last line is the store probe's, and the store was down meanwhile."""
        lines = log.read_text(errors="replace").strip().splitlines()
        said = bool(lines) and lines[-1].startswith("Error: cannot reach the object store at")
        return said and any(end >= self.driver_started for _, end in self.outages)

    # -- faults --------------------------------------------------------------------------

    def _inject(self, fault: Fault) -> bool:
        """Inject ``fault`` now if it can be; False to try again shortly."""
        kind = fault.kind
        if kind == "actor_kill":
            target = self.cluster.kill_actor(self.rng)
            if target is None:
                return False
        elif kind == "node_kill":
            live = self.cluster.live_workers()
            if not live or not self.cluster.actor_pids():
                return False
            target = self.rng.choice(live)
            self.cluster.lose(target)
            self.later.append((self.now() + fault.param, "node_up", target))
        elif kind == "driver_kill":
            if self.proc is None or self.proc.poll() is not None:
                return False
            target = f"pid {self.proc.pid}"
            self.killed = True
            os.kill(self.proc.pid, signal.SIGKILL)
        elif kind == "consolidation_kill":
            if self.job.trigger.exists():
                return False  # one armed at a time
            self.job.trigger.write_text(str(int(fault.param)))
            self.say(f"consolidation trigger armed (step {int(fault.param)})")
            self.done.append(fault)  # injected when it fires (_driver_ended)
            return True
        else:  # store_outage
            if not self.store.up:
                return False
            self.store.stop()
            self.outages.append([self.now(), float("inf")])
            target = self.store.endpoint
            self.later.append((self.now() + fault.param, "store_up", target))
        fault.injected_at, fault.target = round(self.now(), 2), target
        self.done.append(fault)
        self.say(f"{kind}: {target}" + (f" (down {fault.param:.1f} s)" if fault.param else ""))
        return True

    def _tick_faults(self) -> None:
        now = self.now()
        for when, action, target in [x for x in self.later if x[0] <= now]:
            self.later.remove((when, action, target))
            if action == "node_up":
                self.cluster.restart(target)
                self.say(f"node {target} restarted")
            else:
                self.store.start()
                self.outages[-1][1] = self.now()
                self.say(f"store {target} up again")
        for fault in [f for f in self.pending if f.due <= now]:
            if self._inject(fault):
                self.pending.remove(fault)
            else:
                fault.due = now + 0.5  # not possible right now: soon

    # -- the loop ----------------------------------------------------------------------

    def run(self, timeout: float) -> Outcome:
        self.t0 = time.time()
        try:
            while True:
                if self.proc is None and self.now() >= self.next_start:
                    self._start_driver()
                elif self.proc is not None and (rc := self.proc.poll()) is not None:
                    if self._driver_ended(rc):
                        break
                    if len(self.failures) >= self.max_failures:
                        self.say("too many failed drivers: giving up")
                        break
                self._tick_faults()
                if self.now() > timeout:
                    self.say(f"not complete after {timeout:.0f} s: giving up")
                    break
                time.sleep(TICK)
        finally:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            for _, action, target in self.later:  # leave the cluster and store whole
                if action == "node_up":
                    self.cluster.restart(target)
                else:
                    self.store.start()
            self.later.clear()
            self.job.trigger.unlink(missing_ok=True)
        return Outcome(
            round(self.now(), 2), self.drivers, self.failures, self.busy, self.unreachable
        )
