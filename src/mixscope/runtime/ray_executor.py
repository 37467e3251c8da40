"""The Ray executor: an elastic pool of actors, each holding one ShardWorker (one model).

Ray is imported only here. It implements ``runtime.executor.Executor``. Actors ask for a
GPU (``runtime.gpus_per_worker``, fractional allowed) when the cluster has GPUs or
``runtime.device`` names CUDA (an autoscaling cluster may have no GPU node yet), so a job
never waits forever for a resource that does not exist. The pool (``actor_pool.py``)
starts what fits, asks the autoscaler for up to ``max_workers`` with
``request_resources`` (why that and not pending actors: see there), adds actors as nodes
join, and releases the demand when the remaining shards no longer need it. Shards go
out largest first (``scheduling.py``); each actor is created with its first shard, which
it reads and tokenizes while its model loads (``actor_pool.py`` says why this way). A
shard whose actor dies — its process or its whole node — is retried on a survivor; a
shard that raises is retried; both as the ``RetryPolicy`` allows
(``runtime.max_retries``), then reported failed while the rest goes on. Each actor holds up
to ``runtime.shards_in_flight`` shards (a threaded actor: its model runs the next shard
while the last one's files are written, ``worker.py``); an actor that dies holding two
has both retried and is one death (``actor_pool.py``). Nothing is
committed here (the driver commits, once per shard). A node whose actors keep dying is
backed off, then given up and reported (``node_health.py``).
What each actor and node does is written to ``runs/<run>/actors.json``
(``pool_status.py``; ``mixscope status --actors``).
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from typing import Any

from mixscope.config import JobSpec
from mixscope.corpus.plan import Shard
from mixscope.errors import MixscopeError, first_line, one_line
from mixscope.runtime.actor_pool import POLL, Actor, ActorPool
from mixscope.runtime.auth import auth_hint, quiet_default_token_notice, use_local_token
from mixscope.runtime.environment import worker_env
from mixscope.runtime.events import ShardEvent
from mixscope.runtime.executor import RetryPolicy
from mixscope.runtime.gcs_probe import check_gcs, probed
from mixscope.runtime.node_health import NodeHealth
from mixscope.runtime.pool_status import PoolStatus
from mixscope.runtime.ray_actor import RayShardWorker
from mixscope.runtime.scheduling import order_shards

#: how many times this process called ``ray.init`` (a sync of many checkpoints needs one:
#: tests/test_checkpoints.py, benchmarks/startup.py)
RAY_INITS = 0
#: whether ``end_ray`` is registered to run at this process's exit
_ENDS_AT_EXIT = False


def ensure_ray(address: str | None) -> tuple[Any, bool]:
    """Attach to ``address`` / RAY_ADDRESS, or start (or reuse) an embedded local Ray; the
    module and whether this call connected it (False: it was connected already).

    Reused while initialized, so every job of one process (``checkpoints sync`` of many
    checkpoints) pays Ray's start-up once.
    """
    import ray

    global RAY_INITS
    if ray.is_initialized():
        return ray, False
    # no address: an embedded instance of our own, even if a cluster runs on this machine
    address = address or os.environ.get("RAY_ADDRESS") or "local"
    if address != "local":
        use_local_token()  # an explicit address: Ray sends no token unless told (auth.py)
        gcs = _gcs_of(address)
        if gcs is not None:  # Ray answers neither a refused token nor a silent address
            check_gcs(gcs, named=address if gcs == address else f"{address} ({gcs})")
    RAY_INITS += 1
    # Ray's notice that our own embedded instance runs in token mode is not the user's news
    quiet = quiet_default_token_notice() if address == "local" else nullcontext()
    try:
        with quiet:
            ray.init(
                address=address,
                include_dashboard=False if address == "local" else None,
                ignore_reinit_error=True,
                log_to_driver=True,
                logging_level=logging.WARNING,
            )
    except (ConnectionError, ray.exceptions.AuthenticationError) as exc:
        # a refused token reads "Failed to connect", like a cluster that is not there
        hint = "" if address == "local" else f" (is it up? {auth_hint()})"
        raise MixscopeError(
            f"cannot reach the Ray cluster at {address}: {first_line(exc)}{hint}"
        ) from None
    global _ENDS_AT_EXIT
    if not _ENDS_AT_EXIT:  # before Ray's own exit hook (LIFO), which then has nothing to do
        atexit.register(end_ray, ray)
        _ENDS_AT_EXIT = True
    return ray, True


def _gcs_of(address: str) -> str | None:
    """The GCS ``ray.init(address)`` reaches, as ``host:port``, where ``check_gcs`` can ask
    it: ``auto`` as Ray resolves it (its address file, else a running instance; a stale
    file names a stopped head, which Ray would wait on without end). None where Ray finds
    nothing (its own error says so) or for what the probe does not ask (``ray://``)."""
    if address == "auto":
        try:
            from ray._private.services import canonicalize_bootstrap_address

            address = canonicalize_bootstrap_address("auto") or ""
        except Exception:  # a private helper, or no cluster found: ray.init decides
            return None
    return address if probed(address) else None


def end_ray(ray: Any) -> None:
    """``ray.shutdown()`` of the connection this process made; an embedded instance's
    autoscaler monitor is killed first. Called by a released executor's ``close`` and at
    the exit of any process that connected (``ensure_ray``), where Ray's own hook would
    first sleep half a second for late log lines.

    Why: ``ray.shutdown`` stops the GCS before the monitor, whose SIGTERM handler then
    reports its end to the dead GCS until Ray kills it a second later (ray-project/ray
    #30672 describes the order): a second of every embedded run's end. The monitor has
    nothing to keep for an instance that ends with this process. Ray keeps its processes
    in a private attribute: where it is not found, this is plain ``ray.shutdown()``.
    """
    if not ray.is_initialized():
        return
    node = getattr(getattr(ray, "_private", None), "worker", None)
    node = getattr(node, "_global_node", None)
    if node is not None and node.is_head():
        for info in getattr(node, "all_processes", {}).get("monitor", []):
            if info.process.poll() is None:
                info.process.kill()
                info.process.wait(timeout=5)
    ray.shutdown()


def _error_text(exc: BaseException) -> str:
    import ray

    if isinstance(exc, ray.exceptions.RayTaskError):
        cause = exc.cause if getattr(exc, "cause", None) is not None else exc
        return one_line(cause)
    return one_line(exc)


def _creation_error(exc: BaseException) -> str:
    """The useful line of an actor that died in its constructor."""
    text = str(exc)
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line and not line.startswith(("File ", "^", "Traceback")) and ":" in line:
            return line
    return _error_text(exc)


class RayExecutor:
    def __init__(
        self, spec: JobSpec, run_id: str, max_length: int, *, release: bool = False
    ) -> None:
        self.spec = spec
        self.run_id = run_id
        self.max_length = max_length
        self.policy = RetryPolicy.from_spec(spec)
        started = time.time()
        self.ray, connected = ensure_ray(spec.runtime.address)
        # the connection is this executor's to end only if it made it (a test session's
        # instance, or the one a sync of many checkpoints shares, stays)
        self.release = release and connected
        self.ray_start_seconds = round(time.time() - started, 3)
        r = spec.runtime
        resources = self.ray.cluster_resources()
        cluster_gpus = float(resources.get("GPU", 0))
        cluster_cpus = float(resources.get("CPU", 0))
        wants_gpu = cluster_gpus > 0 or r.device.startswith("cuda")
        self.num_gpus = r.gpus_per_worker if wants_gpu else 0.0
        self.local = (r.address or os.environ.get("RAY_ADDRESS") or "local") == "local"
        if self.local and r.cpus_per_worker > cluster_cpus:
            raise MixscopeError(
                f"runtime.cpus_per_worker={r.cpus_per_worker} "
                f"but the cluster has {cluster_cpus:g} CPUs"
            )
        self.min_workers, self.max_workers = r.worker_range()
        if self.local:  # nothing joins an embedded Ray: its capacity is all there will be
            capacity = int(cluster_cpus // r.cpus_per_worker)
            if self.num_gpus > 0:
                capacity = min(capacity, int(cluster_gpus // self.num_gpus))
            capacity = max(1, capacity)
            if capacity < self.max_workers:
                print(
                    f"mixscope: the cluster fits {capacity} of {self.max_workers} "
                    "requested workers",
                    file=sys.stderr,
                )
            self.max_workers = min(self.max_workers, capacity)
            self.min_workers = min(self.min_workers, self.max_workers)
        # the driver's settings travel with each actor (a cluster's workers have their own env)
        self.env = worker_env(os.environ)  # runtime/environment.py
        self.bundle = {"CPU": float(r.cpus_per_worker), "GPU": float(self.num_gpus)}
        self.actor_cls = self.ray.remote(RayShardWorker)
        self.actor_options = {
            "num_cpus": r.cpus_per_worker,
            "num_gpus": self.num_gpus,
            "max_restarts": 0,
            "max_task_retries": 0,
        }  # no runtime_env: the env goes as an argument (ray_actor.py says why)
        # shards per actor at once: with 2 a threaded actor runs the next shard's model
        # work beside the last one's finish (worker.py); 1 is a plain actor, as before
        self.depth = r.shards_in_flight
        if self.depth > 1:
            self.actor_options["max_concurrency"] = self.depth
        self.health = NodeHealth(r.node_max_failures, r.node_backoff_seconds)
        self.pool: ActorPool | None = None

    def run(self, shards: Sequence[Shard]) -> Iterator[ShardEvent]:
        ray = self.ray
        queue: deque[tuple[Shard, int]] = deque(
            (s, 1) for s in order_shards(shards, self.spec.runtime.shard_order)
        )
        pool = self.pool = ActorPool(
            ray,
            self.actor_cls,
            self.actor_options,
            (self.env, self.spec, self.run_id, self.max_length),
            self.bundle,
            self.health,
            min(self.min_workers, len(shards)),
            self.max_workers,
            queue,
        )
        status = PoolStatus(self.spec.out, self.run_id, pool, self.ray_start_seconds)
        in_flight: dict[Any, tuple[Actor, Shard, int]] = {}
        try:
            self._start(pool, queue)
            status.write(force=True)
            without_actors = None  # since when no actor lives or starts
            while queue or in_flight or pool.reserved():
                for actor in pool.open(self.depth):  # up to `depth` shards per actor
                    if not queue and not pool.reserved():
                        break
                    if not pool.usable(actor):
                        continue
                    item = pool.next_shard(actor)
                    if item is None:
                        continue  # a busy actor takes no reservation; an idle one may
                    shard, attempt = item
                    turn = pool.handed(actor, shard.shard_id)
                    ref = actor.handle.process.remote(shard, turn)
                    in_flight[ref] = (actor, shard, attempt)
                # an actor per shard that could run now: those busy, and one per queued
                pool.reconcile(pool.busy() + len(queue), queue_empty=not queue)
                refs = list(in_flight) + list(pool.starting)
                if not refs:
                    without_actors = without_actors or time.time()
                    if time.time() - without_actors > self.spec.runtime.min_workers_timeout:
                        why = "no node could take an actor (" + self._lost_text() + ")"
                        while queue:
                            shard, attempt = queue.popleft()
                            yield ShardEvent("failed", shard.shard_id, attempt, error=why)
                        break
                    time.sleep(POLL)
                    continue
                without_actors = None
                ready, _ = ray.wait(refs, num_returns=1, timeout=POLL)
                for ref in ready:
                    if ref in pool.starting:
                        self._started(pool, ref)
                        continue
                    yield from self._outcome(pool, queue, *in_flight.pop(ref), ref)
                status.write()
            status.finished(time.time())
        finally:
            pool.shutdown()
            try:
                pool.poll_nodes()  # a node lost near the end is reported too
            except Exception:
                pass
            status.write(force=True)

    def _start(self, pool: ActorPool, queue: deque[tuple[Shard, int]]) -> None:
        """Start what fits; wait for ``min_workers`` ready (at most min_workers_timeout)."""
        deadline = time.time() + self.spec.runtime.min_workers_timeout
        need = max(1, pool.min_workers)
        while True:
            pool.reconcile(len(queue), queue_empty=False, force=True)
            ready = len([a for a in pool.live() if a.state != "starting"])
            if ready >= need or (ready >= 1 and time.time() > deadline):
                if ready < need:
                    print(
                        f"mixscope: {ready} of runtime.min_workers={need} actors started "
                        f"within {self.spec.runtime.min_workers_timeout:g}s; going on",
                        file=sys.stderr,
                    )
                return
            if time.time() > deadline and not pool.starting:
                raise MixscopeError(
                    f"no actor could start within {self.spec.runtime.min_workers_timeout:g}s "
                    f"(each needs {self._bundle_text()}; {self._lost_text()})"
                )
            done, _ = self.ray.wait(list(pool.starting), num_returns=1, timeout=POLL)
            for ref in done:
                self._started(pool, ref)

    def _started(self, pool: ActorPool, ref: Any) -> None:
        try:
            pool.started(ref)
        except (self.ray.exceptions.RayActorError, self.ray.exceptions.RayTaskError) as exc:
            raise MixscopeError(f"workers could not start: {_creation_error(exc)}") from None

    def _outcome(
        self, pool: ActorPool, queue: deque, actor: Actor, shard: Shard, attempt: int, ref: Any
    ) -> Iterator[ShardEvent]:
        ray = self.ray
        try:
            result = ray.get(ref)
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as exc:
            if isinstance(exc, ray.exceptions.RayActorError):
                # one death, however many shards it held (actor_pool.py); replaced by
                # reconcile where room is
                pool.died(actor, shard.shard_id, _error_text(exc))
            else:
                pool.raised(actor, shard.shard_id)
            if self.policy.retries(attempt):
                queue.append((shard, attempt + 1))
            yield self.policy.failure(shard.shard_id, attempt, _error_text(exc))
            return
        pool.finished(actor, shard.shard_id, result.tokens)
        yield ShardEvent("done", shard.shard_id, attempt, result=result)

    def _bundle_text(self) -> str:
        return ", ".join(f"{v:g} {k}" for k, v in self.bundle.items() if v > 0)

    def _lost_text(self) -> str:
        lost = self.health.lost
        return (
            f"nodes lost: {', '.join(f'{n[:12]} ({w})' for n, w in lost.items())}"
            if lost
            else "no node lost"
        )

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()
        if self.release:
            # now, not at exit: Ray's exit hook first sleeps half a second for late log
            # lines, and the driver's final consolidation runs meanwhile (driver.py)
            self.release = False
            end_ray(self.ray)
