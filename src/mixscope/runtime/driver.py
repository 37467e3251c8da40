"""The driver of a job: prepare (plan, identify: prepare.py), skip what is committed,
execute, commit.

Data flows one way: corpus → plan → executor (workers write files) → commit records →
run record. The driver is the only writer of commit records and of the run record.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from mixscope.config import JobSpec
from mixscope.errors import MixscopeError, first_line
from mixscope.runtime import faults
from mixscope.runtime.executor import make_executor
from mixscope.runtime.prepare import PreparedRun, prepare
from mixscope.runtime.progress import Progress, interval_from_env
from mixscope.runtime.run_lock import run_lock
from mixscope.stats.consolidate import consolidate
from mixscope.store import manifest, verify
from mixscope.store.layout import Layout
from mixscope.store.runs import now, write_run
from mixscope.store.sweep import sweep

__all__ = ["PreparedRun", "RunSummary", "prepare", "run_job", "run_prepared"]

#: consolidate a run's statistics after this many new commits (and when an invocation ends)
CONSOLIDATE_EVERY = 32


class BackgroundConsolidation:
    """Consolidations during a run, on a thread of their own, one at a time, so the driver
    keeps committing shards and handing out work while statistics are merged; ``finish``
    waits for it and consolidates what is left."""

    def __init__(self, layout: Layout, run_id: str, every: int) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.layout, self.run_id, self.every = layout, run_id, every
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="consolidate")
        self._running: Any = None
        self._last: Any = None
        self._since = 0

    def committed(self) -> None:
        self._since += 1
        if self._since >= self.every and (self._running is None or self._running.done()):
            self._check()
            self._since = 0
            self._running = self._pool.submit(
                consolidate,
                faults.consolidation_layout(self.layout),
                self.run_id,
                min_new=self.every,
            )

    def _check(self) -> None:
        if self._running is not None:
            running, self._running = self._running, None
            running.result()  # a failed consolidation surfaces (nothing is lost: it retries)

    def start_last(self) -> None:
        """Start the last consolidation on the thread (after the one running), so what the
        driver does meanwhile (the executor's release) overlaps it."""
        self._last = self._pool.submit(
            consolidate, faults.consolidation_layout(self.layout), self.run_id
        )

    def finish(self) -> None:
        """Wait for the consolidations, the last one (``start_last``) included."""
        try:
            self._check()
            self._last.result()
        finally:
            self._pool.shutdown(wait=True)


@dataclass
class RunSummary:
    run_id: str
    root: str
    status: str  # complete | failed
    shards_total: int
    shards_done: int
    shards_failed: int
    shards_skipped: int  # already committed before this invocation
    rows: int
    tokens: int
    seconds: float
    errors: dict[int, str] = field(default_factory=dict)
    #: groups ``measures: all`` left out as not applying to the model, and why (those a
    #: user is told of: Selection.noteworthy_skips)
    skipped_groups: dict[str, str] = field(default_factory=dict)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def run_job(
    spec: JobSpec, *, show_progress: bool = True, repair: bool = False, release: bool = False
) -> RunSummary:
    """Run (or resume) the job; every shard ends committed exactly once or recorded failed.
    One driver per run at a time (``run_lock``): a second gets ``RunBusyError``. Results
    damaged after their commit (``store/verify.py``) stop the run with one line, unless
    ``repair``: then exactly the affected shards are redone. ``release``: the process runs
    no other job, so the executor ends what it started (an embedded Ray instance) as soon
    as the shards are done, while the last consolidation runs (``mixscope run``)."""
    started = time.time()
    with _space_errors(spec.out):
        prep = prepare(spec, write=False)  # the plan is stored by ``_run``
    return _run(prep, started, show_progress, repair, release)


def run_prepared(
    prep: PreparedRun, *, show_progress: bool = True, repair: bool = False
) -> RunSummary:
    """``run_job`` of a run already prepared (``checkpoints sync`` prepares each checkpoint
    to learn its run id, and hands the result here rather than have it computed twice)."""
    return _run(prep, time.time(), show_progress, repair, release=False)


def _run(
    prep: PreparedRun, started: float, show_progress: bool, repair: bool, release: bool
) -> RunSummary:
    with _space_errors(prep.spec.out):
        prep.save_plan()
        with run_lock(prep.layout, prep.run_id):
            _check_committed(prep.layout, prep.run_id, repair, show_progress)
            return _run_locked(prep, started, show_progress, release)


@contextmanager
def _space_errors(out: str) -> Iterator[None]:
    """A full disk under ``out`` as one line; other errors pass."""
    try:
        yield
    except OSError as exc:
        if not out_of_space(exc):
            raise
        # every record is written to a temporary name and renamed (store/atomic.py): what
        # was committed before is whole, the rest is redone by the rerun
        raise MixscopeError(
            f"no space left on device under {out} (the driver's records could not be "
            "written); what was committed is intact: free space and rerun to resume"
        ) from exc


def out_of_space(exc: OSError) -> bool:
    """ENOSPC / EDQUOT, from the OS or from pyarrow's filesystems (which put the errno in
    the message only)."""
    import errno

    text = str(exc).lower()
    return (
        exc.errno in (errno.ENOSPC, errno.EDQUOT)
        or "no space left on device" in text
        or "disk quota exceeded" in text
    )


def _check_committed(layout: Layout, run_id: str, repair: bool, show_progress: bool) -> None:
    """Sizes against the records on every run; with ``repair`` every byte against its
    sha256 (a file changed in place keeps its size), with progress on a large root."""
    from mixscope.runtime.progress import ByteProgress

    promise = verify.promised(layout, run_id)
    total = sum(max(c.bytes, 0) for c in promise.files(layout)) if repair else 0
    bar = ByteProgress(total, f"repair: verify run {run_id}", enabled=repair and show_progress)
    try:
        damage = verify.check(layout, promise, deep=repair, on_bytes=bar.read)
    finally:
        bar.close()
    if not damage:
        return
    if not repair:
        more = f" and {len(damage) - 1} more" if len(damage) > 1 else ""
        raise MixscopeError(
            f"run {run_id} has damaged results ({damage[0]}{more}); "
            "rerun with --repair to redo exactly the affected shards"
        )
    redo = verify.repair(layout, run_id, damage)
    print(f"mixscope: repair: redoing shard(s) {sorted(redo)} of run {run_id}", file=sys.stderr)


def _run_locked(
    prep: PreparedRun, started: float, show_progress: bool, release: bool
) -> RunSummary:
    spec, layout, plan, run_id = prep.spec, prep.layout, prep.plan, prep.run_id
    record = prep.record  # read under the lock: what a previous invocation left
    interval = interval_from_env() if show_progress else 0.0  # a bad value fails before work
    # what a killed driver committed and did not consolidate
    consolidate(faults.consolidation_layout(layout), run_id)
    committed = manifest.commits(layout, run_id)
    pending = [s for s in plan.shards if s.shard_id not in committed]
    invocation = {"started_at": now(), "pending": len(pending), "done": 0, "failed": 0, "tokens": 0}
    record = write_run(
        layout, replace(record, invocations=(*record.invocations, invocation), status="running")
    )

    progress = Progress(
        total_docs=plan.n_docs,
        done_docs=sum(c.docs for c in committed.values()),
        total_shards=len(plan.shards),
        done_shards=len(plan.shards) - len(pending),
        label=f"run {run_id}",
        enabled=show_progress,
        interval=interval,
    )
    errors: dict[int, str] = {}
    done_now = 0
    tokens_now = 0
    try:
        if pending:
            executor = make_executor(spec, run_id, prep.max_length, release=release)
            background = BackgroundConsolidation(layout, run_id, CONSOLIDATE_EVERY)
            try:
                for event in executor.run(pending):
                    if event.kind == "done":
                        assert event.result is not None
                        result = event.result.commit_record(event.attempt, now())
                        faults.maybe_crash_before_commit(event.shard_id)
                        manifest.commit_shard(layout, run_id, result)
                        committed[event.shard_id] = result
                        errors.pop(event.shard_id, None)
                        done_now += 1
                        background.committed()
                        tokens_now += result.tokens
                        progress.shard_done(result.docs, result.tokens)
                    elif event.kind == "failed":
                        errors[event.shard_id] = event.error or "unknown error"
                        manifest.record_failure(
                            layout, run_id, event.shard_id, errors[event.shard_id], event.attempt
                        )
                        progress.shard_failed(event.shard_id, errors[event.shard_id])
                    elif event.kind == "retry":
                        progress.shard_retry()
                background.start_last()  # overlaps the executor's release
            finally:
                executor.close()
            background.finish()
        if len(committed) == len(plan.shards):
            sweep(layout, run_id)  # what interrupted work left: no one's now (store/sweep.py)
    finally:
        progress.close()
        seconds = time.time() - started
        finished = {
            **invocation,
            "finished_at": now(),
            "done": done_now,
            "failed": len(errors),
            "tokens": tokens_now,
            "seconds": round(seconds, 3),
        }
        complete = len(committed) == len(plan.shards)
        record = write_run(
            layout,
            replace(
                record,
                invocations=(*record.invocations[:-1], finished),  # this one, finished
                status="complete" if complete else ("failed" if errors else "incomplete"),
                shards_done=len(committed),
                shards_failed=len(errors),
                rows=sum(c.rows for c in committed.values()),
                tokens=sum(c.tokens for c in committed.values()),
                errors={str(k): first_line(v) for k, v in errors.items()},
            ),
        )

    return RunSummary(
        run_id=run_id,
        root=spec.out,
        status=record.status,
        shards_total=len(plan.shards),
        shards_done=len(committed),
        shards_failed=len(errors),
        shards_skipped=len(plan.shards) - len(pending),
        rows=record.rows,
        tokens=tokens_now,
        seconds=seconds,
        errors={k: first_line(v) for k, v in errors.items()},
        skipped_groups=prep.selection.noteworthy_skips,
    )
