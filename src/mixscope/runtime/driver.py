"""The driver of a job: plan, identify the run, skip what is committed, execute, commit.

Data flows one way: corpus → plan → executor (workers write files) → commit records →
run record. The driver is the only writer of commit records and of the run record.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field, replace
from typing import Any

from mixscope.config import JobSpec
from mixscope.corpus.plan import CorpusPlan, plan_corpus
from mixscope.errors import MixscopeError, SpecError, first_line
from mixscope.models.fingerprint import model_identity
from mixscope.runtime import faults
from mixscope.runtime.executor import make_executor
from mixscope.runtime.progress import Progress, interval_from_env
from mixscope.runtime.run_lock import run_lock
from mixscope.stats.consolidate import consolidate
from mixscope.store import manifest, verify
from mixscope.store.layout import Layout
from mixscope.store.records import CommitRecord
from mixscope.store.run_record import RunRecord
from mixscope.store.runs import (
    identity_options,
    library_versions,
    load_run,
    now,
    run_id_for,
    write_run,
)

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
        self._since = 0

    def committed(self) -> None:
        self._since += 1
        if self._since >= self.every and (self._running is None or self._running.done()):
            self._check()
            self._since = 0
            self._running = self._pool.submit(
                consolidate, self.layout, self.run_id, min_new=self.every
            )

    def _check(self) -> None:
        if self._running is not None:
            running, self._running = self._running, None
            running.result()  # a failed consolidation surfaces (nothing is lost: it retries)

    def finish(self) -> None:
        try:
            self._check()
        finally:
            self._pool.shutdown(wait=True)
        consolidate(self.layout, self.run_id)


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

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass
class PreparedRun:
    spec: JobSpec
    layout: Layout
    plan: CorpusPlan
    run_id: str
    record: RunRecord


def prepare(spec: JobSpec, *, write: bool = True) -> PreparedRun:
    """Everything that can fail on bad input, before any work is scheduled.

    With ``write=False`` (``mixscope validate``) nothing is written under the output root.
    """
    from mixscope.models.loading import resolved_max_length, resolved_measures

    a = spec.analysis
    fits = None
    if spec.corpus.pairs:  # pairs are selected (and counted) with the model's tokenizer
        max_length = resolved_max_length(spec.model, a.max_length, revision=a.revision)
        fits = _pair_fits(spec, max_length)
    plan = plan_corpus(spec.corpus, spec.runtime.docs_per_shard, fits)
    if plan.n_docs == 0:
        bad = ", ".join(f"{k}: {v}" for k, v in plan.bad.items()) or "no records at all"
        raise MixscopeError(f"the corpus has no documents to analyse ({bad})")
    if fits is None:
        # config + tokenizer only: fails on an unsupported family before anything is
        # fingerprinted
        max_length = resolved_max_length(spec.model, a.max_length, revision=a.revision)
    try:  # names were checked with the spec; whether each applies needs the model's config
        selection = resolved_measures(spec.model, a.measures, revision=a.revision)
    except SpecError as exc:  # a group that does not apply: a bad flag, exit 2
        raise SpecError(f"invalid job spec: analysis.{exc}") from None
    model = model_identity(spec.model, spec.analysis.revision)
    options = identity_options(spec, max_length, selection.groups)
    run_id = run_id_for(model["fingerprint"], plan.fingerprint, options)
    layout = Layout.open(spec.out)
    stored = layout.read_json(layout.plan_path(run_id))
    if stored is not None:
        plan = CorpusPlan.from_dict(stored)  # resume on the plan the run started with
    elif write:
        layout.write_json(layout.plan_path(run_id), plan.to_dict())
    record = replace(
        load_run(layout, run_id) or RunRecord(run_id=run_id, created_at=now()),
        name=spec.name,
        model=model,
        step=spec.step if spec.step is not None else model.get("step"),
        corpus={
            "paths": list(spec.corpus.paths),
            "files": plan.files,
            "fingerprint": plan.fingerprint,
            "n_docs": plan.n_docs,
            "bad": plan.bad,
            "bad_examples": plan.bad_examples,
            "pairs": plan.pairs,  # kept / split / skipped (corpus/plan.py), or None
        },
        options=options,
        runtime={
            "workers": spec.runtime.workers,
            "worker_range": list(spec.runtime.worker_range()),
            "batch_size": spec.runtime.batch_size,
            "batch_tokens": spec.runtime.batch_tokens,
            "attention": spec.analysis.attention,
            "docs_per_shard": spec.runtime.docs_per_shard,
            "device": spec.runtime.device,
            "executor": spec.runtime.executor,
        },
        spec=spec.to_dict(),
        output={
            "detail": spec.output.detail,
            "sample_rate": spec.output.sample_rate,
            "precision": spec.output.precision,
        },
        libraries=library_versions(),
        shards_total=len(plan.shards),
        measures={
            "groups": list(selection.groups),
            "columns": list(selection.measures.columns),
            "skipped": dict(selection.skipped),
        },
    )
    return PreparedRun(spec, layout, plan, run_id, record)


def _pair_fits(spec: JobSpec, max_length: int) -> Any:
    """The pair test of ``corpus/plan.py`` with the job's tokenizer and sequence length."""
    from transformers import AutoTokenizer

    from mixscope.corpus.encode import pair_fit_check
    from mixscope.models.loading import resolve_source

    source = resolve_source(spec.model)
    tokenizer = AutoTokenizer.from_pretrained(source, revision=spec.analysis.revision)
    return pair_fit_check(tokenizer, max_length)


def run_job(spec: JobSpec, *, show_progress: bool = True, repair: bool = False) -> RunSummary:
    """Run (or resume) the job; every shard ends committed exactly once or recorded failed.
    One driver per run at a time (``run_lock``): a second gets ``RunBusyError``. Results
    damaged after their commit (``store/verify.py``) stop the run with one line, unless
    ``repair``: then exactly the affected shards are redone."""
    started = time.time()
    try:
        prep = prepare(spec)
        with run_lock(prep.layout, prep.run_id):
            _check_committed(prep.layout, prep.run_id, repair, show_progress)
            return _run_locked(prep, started, show_progress)
    except OSError as exc:
        if not out_of_space(exc):
            raise
        # every record is written to a temporary name and renamed (store/atomic.py): what
        # was committed before is whole, the rest is redone by the rerun
        raise MixscopeError(
            f"no space left on device under {spec.out} (the driver's records could not be "
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


def _run_locked(prep: PreparedRun, started: float, show_progress: bool) -> RunSummary:
    spec, layout, plan, run_id = prep.spec, prep.layout, prep.plan, prep.run_id
    record = prep.record
    interval = interval_from_env() if show_progress else 0.0  # a bad value fails before work
    consolidate(layout, run_id)  # what a killed driver committed and did not consolidate
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
            executor = make_executor(spec, run_id)
            background = BackgroundConsolidation(layout, run_id, CONSOLIDATE_EVERY)
            try:
                for event in executor.run(pending):
                    if event.kind == "done":
                        assert event.result is not None
                        result = CommitRecord.from_result(event.result, event.attempt, now())
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
            finally:
                executor.close()
            background.finish()
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
    )
