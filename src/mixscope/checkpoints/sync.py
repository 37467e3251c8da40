"""One idempotent reconcile pass: analyse every complete checkpoint not yet analysed.

For each candidate (oldest step first): skip it if incomplete; prepare its run (the
driver's ``prepare``: the one place a run is identified, so sync and ``run`` agree on its
id); if a complete run with that id exists under ROOT it is done; if it failed too often
or is backing off, leave it; otherwise take its lease and run the prepared run (or submit
the job) for it. Running the pass twice in a row does nothing the second time.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from mixscope.checkpoints.complete import incomplete_reason
from mixscope.checkpoints.discover import Candidate, discover
from mixscope.checkpoints.state import CheckpointRecord, CheckpointState, checkpoint_id
from mixscope.config import JobSpec
from mixscope.corpus.plan import CorpusPlan, plan_corpus
from mixscope.errors import MixscopeError, one_line
from mixscope.runtime.prepare import PreparedRun, prepare
from mixscope.store.layout import Layout
from mixscope.store.lease import Lease
from mixscope.store.runs import load_run


@dataclass
class Outcome:
    key: str
    step: int | None
    status: str  # done | analysed | failed | backoff | running | incomplete | pending
    run_id: str | None = None
    detail: str = ""


@dataclass
class SyncReport:
    outcomes: list[Outcome] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(o.status == status for o in self.outcomes)


def _spec_for(base: JobSpec, c: Candidate) -> JobSpec:
    return replace(
        base,
        model=c.model,
        step=c.step,
        analysis=replace(base.analysis, revision=c.revision or base.analysis.revision),
    )


def _prepare(base: JobSpec, c: Candidate, plan: CorpusPlan) -> tuple[PreparedRun | None, str]:
    """The checkpoint's prepared run, or why it cannot be prepared (yet): the checkpoint's
    own sequence limit and groups, as the driver resolves them, because it is the driver's
    ``prepare``. ``plan``: the probe corpus, planned once for every checkpoint."""
    try:
        return prepare(_spec_for(base, c), write=False, plan=plan), ""
    except (OSError, MixscopeError) as exc:  # vanished or unreadable, or not a usable model
        return None, str(exc)


def _run(prep: PreparedRun, submit_address: str | None, show_progress: bool) -> tuple[str, str]:
    """(status, error) of running or submitting one checkpoint's job."""
    if submit_address:
        from mixscope.runtime.submit import submit_job

        code = submit_job(prep.spec, address=submit_address, wait=True, echo=lambda *_a, **_k: None)
        return ("complete", "") if code == 0 else ("failed", "the Ray job did not succeed")
    from mixscope.runtime.driver import run_prepared

    summary = run_prepared(prep, show_progress=show_progress)
    error = "; ".join(f"shard {k}: {v}" for k, v in sorted(summary.errors.items()))
    return summary.status, error


def sync_pass(  # noqa: C901 - one pass of the protocol, step by step
    base: JobSpec,
    *,
    source: str,
    revisions: tuple[str, ...] = (),
    retry_failed: bool = False,
    submit_address: str | None = None,
    show_progress: bool = False,
    log: Callable[[str], None] = lambda _s: None,
    now: Callable[[], float] = time.time,
) -> SyncReport:
    ck = base.checkpoints
    layout = Layout.open(base.out)
    if not (layout.is_local or layout.is_s3):
        raise MixscopeError("checkpoints sync needs a local, shared-filesystem or s3:// root")
    state = CheckpointState(base.out)
    plan = plan_corpus(base.corpus, base.runtime.docs_per_shard)  # fails early on a bad corpus
    if plan.n_docs == 0:
        raise MixscopeError("the probe corpus has no documents to analyse")
    report = SyncReport()

    for c in discover(source, revisions or ck.revisions):
        if c.local:
            reason = incomplete_reason(c.model, ck.quiet_seconds)
            if reason:
                report.outcomes.append(Outcome(c.key, c.step, "incomplete", detail=reason))
                continue
        prep, why = _prepare(base, c, plan)
        if prep is None:
            report.outcomes.append(Outcome(c.key, c.step, "incomplete", detail=why))
            continue
        run_id = prep.run_id
        record = load_run(layout, run_id)
        if record is not None and record.status == "complete":
            report.outcomes.append(Outcome(c.key, c.step, "done", run_id))
            continue
        st = state.get(c.key)
        if st.status == "failed" and not retry_failed:
            if st.attempts >= ck.max_attempts:
                detail = f"failed {st.attempts} times: {st.last_error}"
                report.outcomes.append(Outcome(c.key, c.step, "failed", run_id, detail))
                continue
            if st.next_attempt_at > now():
                wait = st.next_attempt_at - now()
                report.outcomes.append(
                    Outcome(c.key, c.step, "backoff", run_id, f"retry in {wait:.0f}s")
                )
                continue

        lease = Lease(state.lease_folder, checkpoint_id(c.key), ck.lease_seconds)
        if not lease.acquire():
            held_by = lease.holder_record()
            holder = held_by.owner if held_by else "?"
            report.outcomes.append(Outcome(c.key, c.step, "running", run_id, f"leased by {holder}"))
            continue
        try:
            record = load_run(layout, run_id)  # another process may have finished it meanwhile
            if record is not None and record.status == "complete":
                report.outcomes.append(Outcome(c.key, c.step, "done", run_id))
                continue
            attempts = st.attempts + 1
            base_record = CheckpointRecord(
                key=c.key,
                model=c.model,
                revision=c.revision,
                step=c.step,
                run_id=run_id,
                fingerprint=prep.model["fingerprint"],
                attempts=attempts,
            )
            state.put(replace(base_record, status="running", started_at=now()))
            log(f"analysing {c.key} (step {c.step}, run {run_id}, attempt {attempts})")
            try:
                status, error = _run(prep, submit_address, show_progress)
            except Exception as exc:  # a broken checkpoint must not stop the others
                status = "failed"
                error = one_line(exc)
                log(traceback.format_exc(limit=3))
            if status == "complete":
                state.put(replace(base_record, status="done", finished_at=now()))
                report.outcomes.append(Outcome(c.key, c.step, "analysed", run_id))
            else:
                delay = ck.backoff_seconds * 2 ** (attempts - 1)
                state.put(
                    replace(
                        base_record,
                        status="failed",
                        last_error=error or status,
                        next_attempt_at=now() + delay,
                    )
                )
                report.outcomes.append(Outcome(c.key, c.step, "failed", run_id, error or status))
        finally:
            lease.release()
    return report


def list_checkpoints(root: str, source: str | None, base: JobSpec | None) -> list[dict[str, Any]]:
    """Every checkpoint known under ROOT, plus (with a source) the ones not analysed yet."""
    state = CheckpointState(root)
    layout = Layout.open(root)
    rows: dict[str, dict[str, Any]] = {}
    for st in state.all():
        status = st.status
        lease = Lease(state.lease_folder, checkpoint_id(st.key), 1.0).holder_record()
        if status == "running" and not (lease and not lease.expired):
            status = "interrupted"
        rows[st.key] = {
            "checkpoint": st.key,
            "step": st.step,
            "status": status,
            "attempts": st.attempts,
            "run_id": st.run_id,
            "error": st.last_error if status == "failed" else "",
        }
        if st.run_id:
            rec = load_run(layout, st.run_id)
            if rec is not None and rec.status == "complete":
                rows[st.key]["status"] = "done"
    if source:
        ck_quiet = base.checkpoints.quiet_seconds if base else 60.0
        revisions = base.checkpoints.revisions if base else ()
        for c in discover(source, revisions):
            if c.key in rows:
                continue
            reason = incomplete_reason(c.model, ck_quiet) if c.local else None
            rows[c.key] = {
                "checkpoint": c.key,
                "step": c.step,
                "status": "incomplete" if reason else "pending",
                "attempts": 0,
                "run_id": None,
                "error": reason or "",
            }
    return sorted(rows.values(), key=lambda r: (r["step"] is None, r["step"] or 0, r["checkpoint"]))
