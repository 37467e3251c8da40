"""The in-process executor: one ShardWorker, no Ray.

It implements ``runtime.executor.Executor``; a failed attempt is retried at once on the
same worker (there is no other), as the ``RetryPolicy`` allows. Like a Ray actor, it keeps
``runtime.shards_in_flight`` shards in the worker at once: with 2, the next shard runs on
the model while the last one's ``finish`` writes its files (runtime/worker.py: the device
phases in turn order, at most two accumulators alive); with 1, shards one after another.
``benchmarks/actor.py`` times a job's worker through it, so the figure includes the overlap
a Ray actor has.
"""

from __future__ import annotations

import queue
import traceback
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

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
            if self.spec.runtime.shards_in_flight > 1:
                yield from self._overlapped(worker, shards)
            else:
                for turn, shard in enumerate(shards):
                    yield from self._attempts(worker, shard, turn)
        finally:
            worker.close()

    def _attempts(self, worker: ShardWorker, shard: Shard, turn: int) -> Iterator[ShardEvent]:
        """One shard's attempts, each event as it happens; a retry takes the model when it
        is free (its turn has passed)."""
        attempt = 1
        while True:
            try:
                result = worker.process(shard, turn if attempt == 1 else None)
            except Exception as exc:  # a shard's failure never stops the job
                detail = one_line(exc)
                if not self.policy.retries(attempt):
                    detail += "\n" + traceback.format_exc(limit=5)
                yield self.policy.failure(shard.shard_id, attempt, detail)
                if not self.policy.retries(attempt):
                    return
                attempt += 1
                continue
            yield ShardEvent("done", shard.shard_id, attempt, result=result)
            return

    def _overlapped(self, worker: ShardWorker, shards: Sequence[Shard]) -> Iterator[ShardEvent]:
        """Shards on ``shards_in_flight`` threads, handed over in plan order (their turns);
        events in the order they happen. Leaving early (the driver stops) cancels the shards
        not yet started and waits for the ones running."""
        events: queue.Queue[ShardEvent | None] = queue.Queue()

        def one(shard: Shard, turn: int) -> None:
            try:
                for event in self._attempts(worker, shard, turn):
                    events.put(event)
            finally:
                events.put(None)  # this shard has ended, whatever happened

        pool = ThreadPoolExecutor(self.spec.runtime.shards_in_flight, thread_name_prefix="shard")
        try:
            futures = [pool.submit(one, shard, turn) for turn, shard in enumerate(shards)]
            ended = 0
            while ended < len(shards):
                event = events.get()
                if event is None:
                    ended += 1
                    continue
                yield event
            for future in futures:
                future.result()  # an error outside a shard's attempts (none expected)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def close(self) -> None:
        pass
