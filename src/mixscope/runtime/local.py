"""The in-process executor: one ShardWorker, shards one after another (no Ray).

It implements ``runtime.executor.Executor``; a failed attempt is retried at once on the
same worker (there is no other), as the ``RetryPolicy`` allows."""

from __future__ import annotations

import traceback
from collections.abc import Iterator, Sequence

from mixscope.config import JobSpec
from mixscope.corpus.plan import Shard
from mixscope.errors import one_line
from mixscope.runtime.events import ShardEvent
from mixscope.runtime.executor import RetryPolicy
from mixscope.runtime.worker import ShardWorker


class LocalExecutor:
    def __init__(
        self, spec: JobSpec, run_id: str, max_length: int, *, release: bool = False
    ) -> None:
        del release  # nothing of this executor outlives ``run``: nothing to end
        self.spec = spec
        self.run_id = run_id
        self.max_length = max_length
        self.policy = RetryPolicy.from_spec(spec)

    def run(self, shards: Sequence[Shard]) -> Iterator[ShardEvent]:
        # the first shard is read and tokenized while the model loads (worker.py)
        first_shard = shards[0] if shards else None
        worker = ShardWorker(self.spec, self.run_id, self.max_length, first_shard)
        try:
            yield from self._run(worker, shards)
        finally:
            worker.close()

    def _run(self, worker: ShardWorker, shards: Sequence[Shard]) -> Iterator[ShardEvent]:
        for shard in shards:
            attempt = 1
            while True:
                try:
                    result = worker.process(shard)
                except Exception as exc:  # a shard's failure never stops the job
                    detail = one_line(exc)
                    if not self.policy.retries(attempt):
                        detail += "\n" + traceback.format_exc(limit=5)
                    yield self.policy.failure(shard.shard_id, attempt, detail)
                    if not self.policy.retries(attempt):
                        break
                    attempt += 1
                    continue
                yield ShardEvent("done", shard.shard_id, attempt, result=result)
                break

    def close(self) -> None:
        pass
