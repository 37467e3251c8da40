"""The Ray executor: a pool of actors, each holding one ShardWorker (one model).

Ray is imported only here. It implements ``runtime.executor.Executor``. Actors ask for a
GPU (``runtime.gpus_per_worker``, fractional allowed) only when the cluster has GPUs, so a
job never waits forever for a resource that does not exist; the pool is also capped at
what the cluster can place. A shard whose actor dies is retried on a fresh actor; a shard
that raises is retried; both as the ``RetryPolicy`` allows (``runtime.max_retries``), then
reported failed while the rest goes on.
"""

from __future__ import annotations

import logging
import os
import sys
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

from mixscope.config import JobSpec
from mixscope.corpus.plan import Shard
from mixscope.errors import MixscopeError, one_line
from mixscope.runtime import faults
from mixscope.runtime.events import ShardEvent
from mixscope.runtime.executor import RetryPolicy
from mixscope.runtime.worker import ShardWorker

FORWARDED_ENV: tuple[str, ...] = (
    faults.ENV,
    "HF_HUB_OFFLINE",
    "HF_HOME",
    "HF_TOKEN",
    "TRANSFORMERS_VERBOSITY",
)
# object-store roots and corpora (docs/storage.md): the workers write and read them too
FORWARDED_ENV += tuple(
    f"AWS_{k}"
    for k in (
        "ENDPOINT_URL", "ENDPOINT_URL_S3", "REGION", "DEFAULT_REGION", "PROFILE",
        "ACCESS_KEY_ID", "SECRET_ACCESS_KEY", "SESSION_TOKEN",
    )
)  # fmt: skip


def ensure_ray(address: str | None) -> Any:
    """Attach to ``address`` / RAY_ADDRESS, or start (or reuse) an embedded local Ray."""
    import ray

    if ray.is_initialized():
        return ray
    # no address: an embedded instance of our own, even if a cluster runs on this machine
    address = address or os.environ.get("RAY_ADDRESS") or "local"
    try:
        ray.init(
            address=address,
            include_dashboard=False if address == "local" else None,
            ignore_reinit_error=True,
            log_to_driver=True,
            logging_level=logging.WARNING,
        )
    except ConnectionError as exc:
        raise MixscopeError(f"cannot reach the Ray cluster at {address}: {exc}") from None
    return ray


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
    def __init__(self, spec: JobSpec, run_id: str) -> None:
        self.spec = spec
        self.run_id = run_id
        self.policy = RetryPolicy.from_spec(spec)
        self.ray = ensure_ray(spec.runtime.address)
        r = spec.runtime
        resources = self.ray.cluster_resources()
        cluster_gpus = float(resources.get("GPU", 0))
        cluster_cpus = float(resources.get("CPU", 0))
        self.num_gpus = r.gpus_per_worker if cluster_gpus > 0 else 0.0
        if r.cpus_per_worker > cluster_cpus:
            raise MixscopeError(
                f"runtime.cpus_per_worker={r.cpus_per_worker} "
                f"but the cluster has {cluster_cpus:g} CPUs"
            )
        capacity = int(cluster_cpus // r.cpus_per_worker)
        if self.num_gpus > 0:
            capacity = min(capacity, int(cluster_gpus // self.num_gpus))
        self.workers = max(1, min(r.workers, capacity))
        if self.workers < r.workers:
            print(
                f"mixscope: the cluster fits {self.workers} of {r.workers} requested workers",
                file=sys.stderr,
            )
        # the driver's settings travel with each actor (a cluster's workers have their own env)
        env = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}
        env.setdefault("TRANSFORMERS_VERBOSITY", "error")
        env.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        self.actor_cls = self.ray.remote(ShardWorker).options(
            num_cpus=r.cpus_per_worker,
            num_gpus=self.num_gpus,
            max_restarts=0,
            max_task_retries=0,
            runtime_env={"env_vars": env},
        )
        self.spec_dict = spec.to_dict()

    def _new_actor(self) -> Any:
        return self.actor_cls.remote(self.spec_dict, self.run_id)

    def run(self, shards: Sequence[Shard]) -> Iterator[ShardEvent]:
        ray = self.ray
        queue: deque[tuple[Shard, int]] = deque((s, 1) for s in shards)
        idle = [self._new_actor() for _ in range(min(self.workers, len(shards)))]
        try:  # surface a model that cannot load once, instead of once per shard
            ray.get([a.info.remote() for a in idle])
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as exc:
            for a in idle:
                ray.kill(a, no_restart=True)
            raise MixscopeError(f"workers could not start: {_creation_error(exc)}") from None
        in_flight: dict[Any, tuple[Any, Shard, int]] = {}
        try:
            while queue or in_flight:
                while queue and idle:
                    shard, attempt = queue.popleft()
                    actor = idle.pop()
                    ref = actor.process.remote(shard.__dict__)
                    in_flight[ref] = (actor, shard, attempt)
                ready, _ = ray.wait(list(in_flight), num_returns=1)
                ref = ready[0]
                actor, shard, attempt = in_flight.pop(ref)
                try:
                    result = ray.get(ref)
                except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as exc:
                    if isinstance(exc, ray.exceptions.RayActorError):
                        ray.kill(actor, no_restart=True)
                        actor = self._new_actor()  # a dead actor is replaced
                    if self.policy.retries(attempt):
                        queue.append((shard, attempt + 1))
                    yield self.policy.failure(shard.shard_id, attempt, _error_text(exc))
                    idle.append(actor)
                    continue
                idle.append(actor)
                yield ShardEvent("done", shard.shard_id, attempt, result=result)
        finally:
            for actor in idle + [a for a, _, _ in in_flight.values()]:
                try:
                    ray.kill(actor, no_restart=True)
                except Exception:
                    pass

    def close(self) -> None:
        pass
