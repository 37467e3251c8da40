"""The executor contract: what the driver needs from anything that runs shards.

An executor takes the pending shards of a run, runs each on a ``ShardWorker`` somewhere
(in this process, on Ray actors, …) and reports one ``ShardEvent`` per outcome, in the
order outcomes happen. It never commits: the driver turns a "done" event into a commit
record, so an executor that dies, retries or runs a shard twice cannot commit anything
twice. Retrying is decided by one ``RetryPolicy`` that every executor applies the same
way. Executors are named in ``runtime.executor`` and found through ``EXECUTORS`` (a
module path each, imported only when chosen: Ray is imported only where it is used).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from mixscope.runtime.events import ShardEvent

if TYPE_CHECKING:  # pragma: no cover
    from mixscope.config import JobSpec
    from mixscope.corpus.plan import Shard


class Executor(Protocol):
    """Runs shards and reports their outcomes; built as ``cls(spec, run_id, max_length,
    release=…)`` (``max_length``: the run's resolved sequence length, handed to every
    worker; ``release``: ``close`` also ends what the executor started for this process,
    an embedded Ray instance, because no other job of the process will use it)."""

    def run(self, shards: Sequence[Shard]) -> Iterator[ShardEvent]:
        """Submit ``shards`` and yield one event per outcome as it happens: "done" (with the
        worker's result) once per shard that succeeds, "retry" for each failed attempt the
        policy retries, "failed" once per shard that has no attempts left."""
        ...

    def close(self) -> None:
        """Release what ``run`` left (actors, processes; with ``release`` what the executor
        started); safe to call twice."""
        ...


@dataclass(frozen=True)
class RetryPolicy:
    """How many attempts a shard gets: 1 + ``runtime.max_retries``; a retried shard goes to
    the back of the queue (another worker, when there is one)."""

    max_attempts: int

    @classmethod
    def from_spec(cls, spec: JobSpec) -> RetryPolicy:
        return cls(max_attempts=1 + spec.runtime.max_retries)

    def retries(self, attempt: int) -> bool:
        """Whether a shard whose ``attempt``-th attempt (1-based) failed runs again."""
        return attempt < self.max_attempts

    def failure(self, shard_id: int, attempt: int, error: str) -> ShardEvent:
        """The event of a failed attempt: "retry" while attempts are left, else "failed"."""
        if self.retries(attempt):
            return ShardEvent("retry", shard_id, attempt, error=error)
        return ShardEvent("failed", shard_id, attempt, error=error)


#: runtime.executor (choices.EXECUTOR_NAMES; tests/test_structure.py checks) → "module:Class"
EXECUTORS = {
    "local": "mixscope.runtime.local:LocalExecutor",
    "ray": "mixscope.runtime.ray_executor:RayExecutor",
}


def make_executor(
    spec: JobSpec, run_id: str, max_length: int, *, release: bool = False
) -> Executor:
    """The executor ``spec.runtime.executor`` names, for ``run_id`` analysed at
    ``max_length`` tokens (``release``: see :class:`Executor`)."""
    module, _, name = EXECUTORS[spec.runtime.executor].partition(":")
    cls = getattr(importlib.import_module(module), name)
    return cls(spec, run_id, max_length, release=release)
