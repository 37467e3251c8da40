"""The Ray actor: a thin shell that sets the driver's environment, then builds a ShardWorker.

Why not ``runtime_env={"env_vars": ...}``: an actor with a runtime_env of its own cannot
take one of the worker processes Ray keeps started, so each actor waited for a fresh
process (about a second more per actor on a 2-core machine; benchmarks/startup.py).
The environment travels as a constructor argument instead and is set before anything
reads it: this module imports nothing heavy, and ``mixscope.runtime.worker`` (torch,
transformers, which read ``HF_HUB_OFFLINE`` and friends on import) is imported only
after ``os.environ`` is updated. Each actor has its process to itself, so the update
leaks into nothing else. The spec and the shards arrive as their frozen dataclasses:
unpickling them imports ``mixscope.config`` and ``mixscope.corpus.plan`` only, which read
no such variable (tests/test_structure.py checks).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from mixscope.config import JobSpec
    from mixscope.corpus.plan import Shard
    from mixscope.runtime.shard_result import ShardResult


class RayShardWorker:
    """``ShardWorker``'s actor methods, after setting ``env`` in this process."""

    def __init__(
        self,
        env: dict[str, str],
        spec: JobSpec,
        run_id: str,
        max_length: int,
        first_shard: Shard | None = None,
    ) -> None:
        os.environ.update(env)
        from mixscope.runtime.worker import ShardWorker

        # ``first_shard``: read while the model loads
        self.worker = ShardWorker(spec, run_id, max_length, first_shard)

    def startup(self) -> dict[str, Any]:
        return self.worker.startup()

    def info(self) -> dict[str, Any]:
        return self.worker.info()

    def process(self, shard: Shard, turn: int | None = None) -> ShardResult:
        # two calls at once where the executor made this a threaded actor
        # (runtime.shards_in_flight): the worker serialises their device phases
        return self.worker.process(shard, turn)

    def close(self) -> None:
        self.worker.close()
