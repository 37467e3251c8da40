"""A real multi-node Ray cluster on this one machine, for the elastic tests and benchmark.

Each node is a ``ray start --block`` process of its own (a head, then workers that join
with ``--address``), with every port chosen free and its own ``--temp-dir``, so it never
touches another Ray instance on the machine (other test sessions, the session Ray of
``tests/conftest.py``). ``ray stop`` is never used: it stops every Ray on the machine.
A node is stopped by signalling its own ``ray start`` process; its raylet can be killed
alone (``kill_raylet``) to lose the node the way a preempted machine is lost.
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
from dataclasses import dataclass, field
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ports() -> list[str]:
    """Every port a node opens on its own, chosen free (defaults clash between instances)."""
    return [
        "--node-manager-port", str(free_port()),
        "--object-manager-port", str(free_port()),
        "--metrics-export-port", str(free_port()),
        "--dashboard-agent-listen-port", str(free_port()),
        "--dashboard-agent-grpc-port", str(free_port()),
        "--runtime-env-agent-port", str(free_port()),
    ]  # fmt: skip


def driver_env() -> dict[str, str]:
    """The environment of a driver of these clusters: token auth as the nodes chose it (Ray
    enables it when ``~/.ray/auth_token`` exists; a driver must then say so itself)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    if "RAY_AUTH_MODE" not in env and Path("~/.ray/auth_token").expanduser().is_file():
        env["RAY_AUTH_MODE"] = "token"
    return env


@dataclass
class Node:
    name: str
    process: subprocess.Popen
    log: Path

    def processes(self) -> dict[int, str]:
        """pid → name of every process of this node (its own process group, from /proc)."""
        out = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            pgid = int(stat[stat.rindex(")") + 2 :].split()[2])
            if pgid == self.process.pid:
                out[int(entry.name)] = name
        return out

    def raylet_pid(self) -> int | None:
        return next((pid for pid, name in self.processes().items() if name == "raylet"), None)


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

    def start_head(self, num_cpus: int = 1) -> Node:
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
                str(free_port()),
                "--ray-client-server-port",
                str(free_port()),
                "--min-worker-port",
                "0",
                "--max-worker-port",
                "0",
            ],
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

    def kill_raylet(self, node: Node) -> int:
        """SIGKILL the node's raylet: its workers die with it, as on a lost machine."""
        pid = node.raylet_pid()
        if pid is None:
            raise RuntimeError(f"no raylet under node {node.name}")
        os.kill(pid, signal.SIGKILL)
        return pid

    def stop_node(self, node: Node, timeout: float = 10.0) -> None:
        """Stop one node: SIGTERM to its process group (ours: ``start_new_session``), then
        SIGKILL to what is left of it."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(node.process.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.time() + timeout
            while node.processes() and time.time() < deadline:
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
