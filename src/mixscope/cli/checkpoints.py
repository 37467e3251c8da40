"""``mixscope checkpoints sync | watch | list`` (imports nothing heavy at load).

The spec overrides of ``sync`` and ``watch`` are the ones ``run`` takes
(``options.override_options``: each flag made from its spec field), with ``--job`` for the
spec; the pass itself is ``checkpoints/sync.py``."""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

import click

from mixscope.cli.options import apply_options, job_spec, override_options, set_option, spec_option
from mixscope.errors import MixscopeError


def _options(func: Any) -> Any:
    """The flags of ``sync`` and ``watch``: the job (``--job``), the checkpoints' source and
    hub revisions, then the same spec overrides as ``run`` (made from the spec's fields)."""
    opts = [
        spec_option("checkpoints.source", "--source", "-s"),
        click.option(
            "--job",
            "-j",
            default=None,
            type=click.Path(dir_okay=False),
            help="Job spec (probe corpus, options, output).",
        ),
        click.option(
            "--revision",
            "revisions",
            multiple=True,
            help="Hub revisions to analyse (repeatable), for a hub: source.",
        ),
        *override_options(model=False),
        click.option(
            "--submit",
            "submit_address",
            default=None,
            metavar="URL",
            help="Submit each run through the Ray Jobs API at URL instead.",
        ),
        spec_option("checkpoints.quiet_seconds", "--quiet-period"),
        click.option(
            "--retry-failed", is_flag=True, help="Retry checkpoints that failed too often."
        ),
        set_option(),
    ]
    return apply_options(opts, func)


def _base_spec(job: str | None, sets: tuple[str, ...], params: dict[str, Any]) -> Any:
    """The job's spec with ``--set`` and the flags applied; it must name a source."""
    spec = job_spec(job, sets, params)
    if not spec.checkpoints.source:
        raise MixscopeError("no checkpoint source: pass --source or set checkpoints.source")
    return spec


def _pass(spec: Any, revisions: tuple[str, ...], retry: bool, submit_address: str | None) -> Any:
    from mixscope.checkpoints.sync import sync_pass

    return sync_pass(
        spec,
        source=spec.checkpoints.source,
        revisions=tuple(revisions),
        retry_failed=retry,
        submit_address=submit_address,
        log=lambda s: click.echo(s, err=True),
    )


def _print_report(report: Any) -> None:
    from mixscope.format import aligned_table

    rows = [
        [o.step if o.step is not None else "", o.status, o.run_id or "", o.key, o.detail]
        for o in report.outcomes
    ]
    click.echo(aligned_table(["step", "status", "run_id", "checkpoint", "detail"], rows))
    summary = ", ".join(
        f"{s}: {report.count(s)}"
        for s in ("analysed", "done", "failed", "backoff", "running", "incomplete")
        if report.count(s)
    )
    click.echo(summary or "no checkpoints found", err=True)


@click.group()
def checkpoints() -> None:
    """Re-analyse each new checkpoint of a model in training, exactly once."""


@checkpoints.command()
@_options
def sync(
    job: str | None,
    revisions: tuple[str, ...],
    submit_address: str | None,
    retry_failed: bool,
    sets: tuple[str, ...],
    **params: Any,
) -> None:
    """One reconcile pass: analyse every complete checkpoint not analysed yet, oldest first."""
    spec = _base_spec(job, sets, params)
    report = _pass(spec, revisions, retry_failed, submit_address)
    _print_report(report)
    if report.count("failed"):
        sys.exit(1)


@checkpoints.command()
@_options
@click.option(
    "--interval", type=float, default=None, help="Seconds between passes (default: the job's)."
)
@click.option(
    "--passes", type=int, default=None, help="Stop after this many passes (default: forever)."
)
def watch(
    job: str | None,
    revisions: tuple[str, ...],
    submit_address: str | None,
    retry_failed: bool,
    sets: tuple[str, ...],
    interval: float | None,
    passes: int | None,
    **params: Any,
) -> None:
    """The sync pass in a loop; Ctrl-C or SIGTERM stops cleanly after the current run."""
    spec = _base_spec(job, sets, params)
    stop = threading.Event()

    def request_stop(signum, _frame):
        click.echo(
            f"mixscope: {signal.Signals(signum).name}: stopping after the current pass", err=True
        )
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    every = interval if interval is not None else spec.checkpoints.interval_seconds
    done = 0
    while not stop.is_set():
        report = _pass(spec, revisions, retry_failed, submit_address)
        _print_report(report)
        done += 1
        if passes is not None and done >= passes:
            break
        stop.wait(every)
    click.echo("mixscope: watch stopped", err=True)


@checkpoints.command("list")
@click.argument("root")
@click.option(
    "--source", "-s", default=None, help="Also list checkpoints of SOURCE not analysed yet."
)
@click.option(
    "--job",
    "-j",
    default=None,
    type=click.Path(dir_okay=False),
    help="Job spec (for quiet period and revisions).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="A JSON array, one object per checkpoint (keys: step, status, attempts, run_id, "
    "checkpoint, error); [] when none is known.",
)
def list_(root: str, source: str | None, job: str | None, as_json: bool) -> None:
    """Every known checkpoint: step and status (done, running, failed, pending, incomplete,
    interrupted)."""
    from mixscope.checkpoints.sync import list_checkpoints
    from mixscope.config import load_spec
    from mixscope.format import aligned_table

    # only the checkpoints section matters here: a placeholder corpus passes validation
    # whatever the job's corpus is (files or a hub dataset)
    no_corpus = {"corpus.paths": ["-"], "corpus.format": "text"} | {
        f"corpus.{k}": None
        for k in ("dataset", "dataset_config", "dataset_split", "dataset_revision")
    }
    base = load_spec(job, no_corpus) if job else None
    rows = list_checkpoints(root, source, base)
    cols = ["step", "status", "attempts", "run_id", "checkpoint", "error"]
    if as_json:  # for schedulers and dashboards: nothing known yet is not an error
        import json

        click.echo(json.dumps([{c: r[c] for c in cols} for r in rows], indent=1))
        return
    if not rows:
        raise MixscopeError(
            f"no checkpoints known under {root}"
            + ("" if source else " (pass --source to list a source)")
        )
    click.echo(aligned_table(cols, [["" if r[c] is None else r[c] for c in cols] for r in rows]))
