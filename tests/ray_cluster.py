"""A real multi-node Ray cluster on this one machine, for the elastic tests and benchmark.

Each node is a ``ray start --block`` process of its own (a head, then workers that join
with ``--address``), with every port chosen free and its own ``--temp-dir``, so it never
touches another Ray instance on the machine (other test sessions, the session Ray of
``tests/conftest.py``). ``ray stop`` is never used: it stops every Ray on the machine.
A node is stopped by signalling its own ``ray start`` process, or lost at once
(``lose_node``: every process of it killed) the way a preempted machine is lost.

``default_head`` is the other kind: a head as a user starts it, in Ray's own temp dir and
with its token defaults. Such a head writes Ray's machine-wide record of "the cluster here"
(``AddressFile``), which it puts back as it was when it stops.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(count: int) -> list[int]:
    """``count`` free ports, all different: each socket stays bound until every port is
    chosen (one free_port() after another may be handed the port just released, and Ray
    refuses a node whose components share one)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _ports() -> list[str]:
    """Every port a node opens on its own, chosen free (defaults clash between instances)."""
    names = ("--node-manager-port", "--object-manager-port", "--metrics-export-port",
             "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port",
             "--runtime-env-agent-port")  # fmt: skip
    return [x for name, port in zip(names, free_ports(len(names)), strict=True)
            for x in (name, str(port))]  # fmt: skip


def driver_env() -> dict[str, str]:
    """The environment of a driver of these clusters: token auth as the nodes chose it (Ray
    enables it when this shell has a token; a plain driver must then say so itself)."""
    from mixscope.runtime.auth import token_source

    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    if "RAY_AUTH_MODE" not in env and token_source(env) is not None:
        env["RAY_AUTH_MODE"] = "token"
    return env


class AddressFile:
    """Ray's machine-wide ``ray_current_cluster`` (``/tmp/ray``), as a test found it.

    ``ray start`` writes its cluster's address there and nothing removes it when the cluster
    stops; a plain ``ray.init(num_cpus=…)`` anywhere on the machine then tries to join that
    dead cluster and fails. A test that starts Ray records the file before and ``restore``s
    it after stopping: put back as it was (or removed), but only while it still names the
    test's own cluster, so another session's cluster started meanwhile is left alone.
    """

    def __init__(self) -> None:
        from ray._common.utils import get_ray_address_file

        self.path = Path(get_ray_address_file(None))
        self.before = self.read()

    def read(self) -> str | None:
        try:
            return self.path.read_text().strip()
        except FileNotFoundError:
            return None

    def names(self, port: int) -> bool:
        """Whether the file now names the cluster whose GCS listens on ``port``."""
        now = self.read()
        return now is not None and now.rsplit(":", 1)[-1] == str(port)

    def restore(self, port: int) -> None:
        if not self.names(port) or self.read() == self.before:
            return
        if self.before is None:
            self.path.unlink(missing_ok=True)
        else:
            self.path.write_text(self.before)


def stop_process_group(process: subprocess.Popen, timeout: float = 60.0) -> None:
    """SIGTERM to the group of a ``ray start`` started with ``start_new_session``, then
    SIGKILL to what is left of it: its GCS and raylet go with it."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(10)


@contextmanager
def default_head(
    log: Path,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 120.0,
) -> Iterator[str]:
    """``ray start --head --port PORT`` as a user runs it (Ray's temp dir, its token
    defaults; ``env`` as given, else this environment less ``RAY_ADDRESS`` and
    ``RAY_AUTH_MODE``), with the ports that clash between instances chosen free. Yields
    ``127.0.0.1:PORT`` once the runtime is up; stopped, and ``ray_current_cluster`` put
    back as it was, on exit."""
    port, listen, grpc, runtime_env, metrics, client = free_ports(6)  # all different
    if env is None:
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    address_file = AddressFile()
    command = [
        RAY, "start", "--head", "--block", "--port", str(port), "--disable-usage-stats",
        "--dashboard-agent-listen-port", str(listen),
        "--dashboard-agent-grpc-port", str(grpc),
        "--runtime-env-agent-port", str(runtime_env),
        "--metrics-export-port", str(metrics),
        "--ray-client-server-port", str(client),
        *args,
    ]  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**env, "RAY_USAGE_STATS_ENABLED": "0"},
            start_new_session=True,  # its own process group: signals stay ours
        )
    try:
        deadline = time.time() + timeout
        # printed after the runtime started and wrote ray_current_cluster
        while b"will now block forever" not in log.read_bytes():
            if process.poll() is not None:
                raise RuntimeError(f"ray start exited:\n{log.read_text()}")
            if time.time() > deadline:
                raise TimeoutError(f"ray start not up after {timeout}s:\n{log.read_text()}")
            time.sleep(0.5)
        yield f"127.0.0.1:{port}"
    finally:
        stop_process_group(process)
        address_file.restore(port)


@dataclass
class Node:
    name: str
    process: subprocess.Popen
    log: Path

    def processes(self) -> dict[int, str]:
        """pid → name of every process of this node: its own process group (the ``ray
        start`` process, raylet, agents) and their descendants (Ray starts its workers in
        sessions of their own), from /proc."""
        table = {}  # pid → (name, ppid, pgid)
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            ppid, pgid = (int(x) for x in stat[stat.rindex(")") + 2 :].split()[1:3])
            table[int(entry.name)] = (name, ppid, pgid)
        mine = {pid for pid, (_, _, pgid) in table.items() if pgid == self.process.pid}
        while True:
            more = {pid for pid, (_, ppid, _) in table.items() if ppid in mine} - mine
            if not more:
                return {pid: table[pid][0] for pid in mine}
            mine |= more


@dataclass
class LocalCluster:
    """``LocalCluster()`` starts nothing; ``start_head`` / ``add_node`` / ``shutdown``."""

    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="mxr", dir="/tmp")))
    port: int = field(default_factory=free_port)
    nodes: list[Node] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _start(self, name: str, args: list[str], env: dict[str, str] | None = None) -> Node:
        log = self.root / f"{name}.log"
        temp = self.root / name  # short: Ray's unix socket paths must stay < 108 bytes
        env = {**driver_env(), "RAY_USAGE_STATS_ENABLED": "0", **(env or {})}
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [
                    RAY,
                    "start",
                    "--block",
                    "--disable-usage-stats",
                    "--temp-dir",
                    str(temp),
                    "--node-ip-address",
                    "127.0.0.1",
                    *_ports(),
                    *args,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # its own process group: signals stay ours
            )
        node = Node(name, proc, log)
        self.nodes.append(node)
        return node

    def start_head(self, num_cpus: int = 1, env: dict[str, str] | None = None) -> Node:
        """The head node; ``env`` as for :meth:`add_node`."""
        dashboard, client = free_ports(2)
        node = self._start(
            "head",
            [
                "--head",
                "--port",
                str(self.port),
                "--num-cpus",
                str(num_cpus),
                "--include-dashboard",
                "false",
                "--dashboard-port",
                str(dashboard),
                "--ray-client-server-port",
                str(client),
                "--min-worker-port",
                "0",
                "--max-worker-port",
                "0",
            ],
            env,
        )
        self.wait_for_nodes(1)
        return node

    def add_node(
        self,
        name: str,
        num_cpus: int = 1,
        resources: str | None = None,
        env: dict[str, str] | None = None,
    ) -> Node:
        """A worker node; ``env`` is added to its raylet's environment, which the worker
        processes it starts inherit."""
        args = ["--address", self.address, "--num-cpus", str(num_cpus)]
        args += ["--min-worker-port", "0", "--max-worker-port", "0"]
        if resources:
            args += ["--resources", resources]
        return self._start(name, args, env)

    def alive_nodes(self) -> int:
        """Alive nodes as the cluster's GCS sees them (``ray list``-free: a tiny driver)."""
        code = (
            f"import ray; ray.init(address={self.address!r}, logging_level='ERROR', "
            "log_to_driver=False);"
            "print(sum(1 for n in ray.nodes() if n['Alive']))"
        )
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
            env=driver_env(),
        )
        if out.returncode != 0:
            raise RuntimeError(f"cannot reach {self.address}: {out.stderr[-2000:]}")
        return int(out.stdout.strip().splitlines()[-1])

    def wait_for_nodes(self, n: int, timeout: float = 90.0) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            for node in self.nodes:
                if node.process.poll() is not None:
                    raise RuntimeError(f"ray node {node.name} exited:\n{node.log.read_text()}")
            if self.alive_nodes() >= n:
                return
            time.sleep(0.5)
        raise TimeoutError(f"{n} Ray nodes not up after {timeout}s")

    def lose_node(self, node: Node) -> list[int]:
        """SIGKILL every process of the node at once (raylet, workers, agents), as on a
        preempted machine. Killing the raylet alone is not that: its workers notice only
        later, and one may still finish and report its shard in between."""
        procs = node.processes()
        if "raylet" not in procs.values():
            raise RuntimeError(f"no raylet under node {node.name}")
        for pid in procs:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return sorted(procs)

    def stop_node(self, node: Node, timeout: float = 10.0) -> None:
        """Stop one node: SIGTERM to its process group (ours: ``start_new_session``; the
        raylet stops its workers), then SIGKILL to every process of it that is left."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            targets = [-node.process.pid] + (
                list(node.processes()) if sig == signal.SIGKILL else []
            )
            for pid in targets:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.time() + timeout
            while node.process.poll() is None or node.processes():
                if time.time() > deadline:
                    break
                time.sleep(0.2)
            if not node.processes():
                break
        try:
            node.process.wait(5)
        except subprocess.TimeoutExpired:
            pass

    def shutdown(self) -> None:
        for node in reversed(self.nodes):
            self.stop_node(node)
        shutil.rmtree(self.root, ignore_errors=True)
