"""What the chaos run breaks: a restartable S3 endpoint, a cluster whose nodes and actors can
be killed, and the seeded schedule of faults (benchmarks/chaos.py drives them).

Every fault is real: SIGKILL of a process found in /proc, a whole Ray node killed (every
process of it at once, ``LocalCluster.lose_node``) and started again, moto's HTTP server
stopped and started on the same port (its buckets live in this process, so they survive,
as a real endpoint's objects survive its outage). Nothing is mocked.
"""

from __future__ import annotations

import logging
import os
import random
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import tests_module

#: the kinds of fault, in the order the report lists them
KINDS = ("actor_kill", "node_kill", "driver_kill", "consolidation_kill", "store_outage")
#: what each kind does, for the report
WHAT = {
    "actor_kill": "an actor process SIGKILLed in the middle of a shard",
    "node_kill": "a worker node lost (all its processes SIGKILLed), restarted later",
    "driver_kill": "the driver SIGKILLed, then the job resumed by a new driver",
    "consolidation_kill": "the driver dies at a random step of a statistics consolidation",
    "store_outage": "the S3 endpoint stopped, then started again on the same port",
}


class Store:
    """moto's S3 server on one fixed loopback port, stopped and started at will."""

    def __init__(self) -> None:
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self.port = tests_module("s3_server").free_port()
        self.server: Any = None
        self.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def up(self) -> bool:
        return self.server is not None

    def start(self) -> None:
        from moto.server import ThreadedMotoServer

        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class Cluster:
    """A head (which is never killed: it holds the GCS) and ``workers`` worker nodes, each
    with one CPU, on loopback with free ports (tests/ray_cluster.py)."""

    def __init__(self, workers: int) -> None:
        ray_cluster = tests_module("ray_cluster")
        self.c = ray_cluster.LocalCluster()
        self.c.start_head(num_cpus=1)
        self.names = [f"w{k}" for k in range(1, workers + 1)]
        for name in self.names:
            self.c.add_node(name, num_cpus=1)
        self.c.wait_for_nodes(1 + workers)
        self.restarts = 0

    @property
    def address(self) -> str:
        return str(self.c.address)

    def node(self, name: str) -> Any:
        return next((n for n in self.c.nodes if n.name == name), None)

    def live_workers(self) -> list[str]:
        """The worker nodes up with their raylet (one just restarted may not have it yet)."""
        return [
            n
            for n in self.names
            if (node := self.node(n))
            and node.process.poll() is None
            and "raylet" in node.processes().values()
        ]

    def actor_pids(self, busy: bool = False) -> list[int]:
        """The shard actors' processes (``ray::RayShardWorker``) on every live node; with
        ``busy``, those in a shard now (Ray titles such a process ``…RayShardWorker.process``)."""
        mark = "RayShardWorker.process" if busy else "RayShardWorker"
        pids = []
        for node in self.c.nodes:
            if node.process.poll() is None:
                pids += [p for p in node.processes() if mark in _cmdline(p)]
        return sorted(pids)

    def kill_actor(self, rng: random.Random) -> str | None:
        """SIGKILL an actor in the middle of a shard (None: none is in one now)."""
        pids = self.actor_pids(busy=True)
        if not pids:
            return None
        pid = rng.choice(pids)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return None
        return f"pid {pid}"

    def lose(self, name: str) -> None:
        node = self.node(name)
        self.c.lose_node(node)
        node.process.wait(30)
        self.c.nodes.remove(node)  # gone: wait_for_nodes would call its exit an error

    def restart(self, name: str) -> None:
        self.c.add_node(name, num_cpus=1)
        self.restarts += 1

    def shutdown(self) -> None:
        self.c.shutdown()


@dataclass
class Fault:
    """One fault of the schedule: its kind, when it is due (seconds from the job's start),
    and, once injected, when and on what; ``note`` says why it could not be (yet)."""

    kind: str
    due: float
    param: float = 0.0  # the outage's or node's down time; the consolidation step
    injected_at: float | None = None
    target: str = ""
    survived: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def schedule(
    seed: int,
    per_kind: int,
    gap: tuple[float, float] | None,
    start: float,
    within: tuple[float, float] = (0.0, 0.0),
) -> list[Fault]:
    """``per_kind`` faults of every kind in a seeded random order, ``gap`` seconds apart
    (uniform) from ``start`` seconds into the job, or (``gap`` None) at uniform random
    moments ``within`` these seconds of it; each with its own random parameter: the down
    time of a node or the store (1–6 s), the consolidation step at which the driver dies
    (1–12: among the statistics files, at the record, or after it among the deletions)."""
    rng = random.Random(seed)
    kinds = [k for k in KINDS for _ in range(per_kind)]
    rng.shuffle(kinds)
    times = sorted(rng.uniform(*within) for _ in kinds) if gap is None else None
    out, t = [], start
    for k, kind in enumerate(kinds):
        param = {
            "node_kill": rng.uniform(1.0, 6.0),
            "store_outage": rng.uniform(1.0, 6.0),
            "consolidation_kill": float(rng.randint(1, 12)),
        }.get(kind, 0.0)
        out.append(Fault(kind, round(t if times is None else times[k], 2), round(param, 2)))
        if gap is not None:
            t += rng.uniform(*gap)
    return out
