"""The Ray actor: a thin shell that sets the driver's environment, then builds a ShardWorker.

Why not ``runtime_env={"env_vars": ...}``: an actor with a runtime_env of its own cannot
take one of the worker processes Ray keeps started, so each actor waited for a fresh
process (about a second more per actor on a 2-core machine; benchmarks/startup.py).
The environment travels as a constructor argument instead and is set before anything
reads it: this module imports nothing heavy, and ``mixscope.runtime.worker`` (torch,
transformers, which read ``HF_HUB_OFFLINE`` and friends on import) is imported only
after ``os.environ`` is updated. Each actor has its process to itself, so the update
leaks into nothing else.
"""

from __future__ import annotations

import os
from typing import Any


class RayShardWorker:
    """``ShardWorker``'s actor methods, after setting ``env`` in this process."""

    def __init__(
        self,
        env: dict[str, str],
        spec: dict[str, Any],
        run_id: str,
        first: dict[str, Any] | None = None,
    ) -> None:
        os.environ.update(env)
        from mixscope.runtime.worker import ShardWorker

        self.worker = ShardWorker(spec, run_id, first)  # ``first``: read while the model loads

    def startup(self) -> dict[str, Any]:
        return self.worker.startup()

    def info(self) -> dict[str, Any]:
        return self.worker.info()

    def process(self, shard: dict[str, Any]) -> dict[str, Any]:
        return self.worker.process(shard)

    def close(self) -> None:
        self.worker.close()
