"""The in-process executor: one ShardWorker, shards one after another (no Ray)."""

from __future__ import annotations

import traceback
from collections.abc import Iterator

from mixscope.config import JobSpec
from mixscope.corpus.plan import Shard
from mixscope.errors import one_line
from mixscope.runtime.events import ShardEvent
from mixscope.runtime.worker import ShardWorker


class LocalExecutor:
    def __init__(self, spec: JobSpec, run_id: str) -> None:
        self.spec = spec
        self.run_id = run_id

    def run(self, shards: list[Shard]) -> Iterator[ShardEvent]:
        worker = ShardWorker(self.spec, self.run_id)
        try:
            yield from self._run(worker, shards)
        finally:
            worker.close()

    def _run(self, worker: ShardWorker, shards: list[Shard]) -> Iterator[ShardEvent]:
        attempts_allowed = 1 + self.spec.runtime.max_retries
        for shard in shards:
            for attempt in range(1, attempts_allowed + 1):
                try:
                    result = worker.process(shard)
                except Exception as exc:  # a shard's failure never stops the job
                    kind = "retry" if attempt < attempts_allowed else "failed"
                    detail = one_line(exc)
                    if kind == "failed":
                        detail += "\n" + traceback.format_exc(limit=5)
                    yield ShardEvent(kind, shard.shard_id, attempt, error=detail)
                    continue
                yield ShardEvent("done", shard.shard_id, attempt, result=result)
                break

    def close(self) -> None:
        pass
