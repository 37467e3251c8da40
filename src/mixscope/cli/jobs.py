"""Job commands: ``run``, ``validate``, ``submit`` (a spec and its overrides) and ``status``.

Each builds the spec from JOB and the flags (cli/options.py), hands it to the runtime
(driver, check, submit) and formats what comes back; exit codes are the README's.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from mixscope.cli.options import job_options, job_spec, quiet_transformers, spec_option
from mixscope.errors import MixscopeError


def _print_summary(summary: Any) -> None:
    from mixscope.format import aligned_table
    from mixscope.sql.summary import layer_summary

    s = summary
    click.echo(
        f"run {s.run_id}: {s.status} — {s.shards_done}/{s.shards_total} shards "
        f"({s.shards_skipped} already committed, {s.shards_failed} failed), "
        f"{s.rows:,} rows, {s.tokens:,} tokens in {s.seconds:.1f}s "
        f"({s.tokens_per_second:,.0f} tok/s) → {s.root}",
        err=True,
    )
    for shard_id, error in sorted(s.errors.items()):
        click.echo(f"  shard {shard_id} failed: {error}", err=True)
    for group, why in s.skipped_groups.items():
        click.echo(f"note: measures 'all' skipped {group}: {why}", err=True)
    if s.shards_done:
        headers, rows = layer_summary(s.root, s.run_id)
        click.echo(aligned_table(headers, [list(r) for r in rows]))
        if "reach_n" in headers:
            click.echo(
                "reach_n, reach_w: the layer's mean distance to its context in tokens, by norm "
                f"and by weight; per distance: mixscope query {s.root} distance_profile",
                err=True,
            )


@click.command()
@job_options()
@spec_option("output.detail")
@click.option("--no-progress", is_flag=True, help="No progress bar or progress lines.")
@click.option(
    "--repair",
    is_flag=True,
    help="Check every committed file against its commit record (size and sha256, as "
    "`status --verify`) and redo exactly the shards whose results were deleted, truncated "
    "or changed (a damaged statistics generation: the shards it covers).",
)
def run(
    job: str | None, sets: tuple[str, ...], no_progress: bool, repair: bool, **flags: Any
) -> None:
    """Run (or resume) the analysis job JOB (a YAML spec; flags override it).

    \b
    Examples:
      mixscope run jobs/demo.yaml
      mixscope run jobs/wikitext2.yaml --workers 4 --set analysis.mask_rate=0.12
      mixscope run --model minilm --corpus data/ --out results/ --name mine
    """
    spec = job_spec(job, sets, flags)
    quiet_transformers()
    from mixscope.runtime.driver import run_job

    summary = run_job(spec, show_progress=not no_progress, repair=repair, release=True)
    _print_summary(summary)
    if summary.status != "complete":
        sys.exit(1)


@click.command()
@job_options()
def validate(job: str | None, sets: tuple[str, ...], **flags: Any) -> None:
    """Check a job spec: fields, corpus readable, model loadable (on one document only)."""
    from mixscope.format import aligned_table

    spec = job_spec(job, sets, flags)
    quiet_transformers()
    from mixscope.runtime.check import check_job

    c = check_job(spec)
    rows = [
        ["run id", c.run_id],
        ["name", spec.name],
        ["model", f"{c.model} ({c.family}, {c.layers} layers, {c.device})"],
        ["corpus", f"{c.files} files, {c.docs:,} documents, {c.shards} shards"],
        ["bad input", ", ".join(f"{k}={v}" for k, v in c.bad.items()) or "none"],
        ["first document", f"{c.first_doc_tokens} tokens, exactness identity holds"],
        ["output", c.out],
    ]
    click.echo(aligned_table(["check", "result"], rows))
    click.echo("valid", err=True)


@click.command()
@job_options(address=False)
@click.option(
    "--address",
    "jobs_address",
    default=None,
    metavar="URL",
    help="The cluster's Ray Jobs API, http://HEAD:8265 (else RAY_ADDRESS); the job itself "
    "runs on that cluster.",
)
@click.option("--wait", is_flag=True, help="Stream the job's logs and exit with its status.")
def submit(
    job: str | None, sets: tuple[str, ...], jobs_address: str | None, wait: bool, **flags: Any
) -> None:
    """Submit JOB to a Ray cluster through the Ray Jobs API (--address http://HEAD:8265)."""
    spec = job_spec(job, sets, flags)
    from mixscope.runtime.submit import submit_job

    sys.exit(submit_job(spec, address=jobs_address, wait=wait, echo=click.echo))


@click.command()
@click.argument("root")
@click.option("--shards", "show_shards", is_flag=True, help="One line per shard of each run.")
@click.option("--run", "run_ids", multiple=True, help="Only these runs.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="One JSON document (stable keys, docs/status.md) instead of tables.",
)
@click.option(
    "--actors",
    "show_actors",
    is_flag=True,
    help="Per Ray actor and node: what it does (shard, tok/s), nodes lost (with --json: "
    "each run's `pool`).",
)
@click.option(
    "--verify",
    is_flag=True,
    help="Re-hash every committed file against the sha256 of its commit or consolidation "
    "record; exit 1 naming each damaged shard or generation (`run --repair` redoes them).",
)
@click.option("--no-progress", is_flag=True, help="No progress while --verify hashes.")
def status(
    root: str,
    show_shards: bool,
    run_ids: tuple[str, ...],
    as_json: bool,
    show_actors: bool,
    verify: bool,
    no_progress: bool,
) -> None:
    """Runs under ROOT: shards done / failed / pending, rows, throughput."""
    from mixscope.status import status_document

    doc = status_document(
        root, run_ids, show_shards, show_actors, verify=verify, progress=not no_progress
    )
    if not doc["runs"]:
        raise MixscopeError(f"no runs under {root}")
    if as_json:
        import json

        click.echo(json.dumps(doc, indent=2))
    else:
        from mixscope.status import status_tables

        for line in status_tables(doc):
            click.echo(line)
        if show_actors:
            for r in doc["runs"]:
                _echo_actors(r["run_id"], r["pool"])
    if verify:
        _verify_verdict(doc)


def _verify_verdict(doc: dict[str, Any]) -> None:
    """``status --verify``'s last line (stderr); exit 1 when anything is damaged."""
    from mixscope.status import verify_summary

    text, damaged = verify_summary(doc)
    click.echo(text, err=True)
    if damaged:
        sys.exit(1)


def _echo_actors(run_id: str, state: dict[str, Any] | None) -> None:
    """The last ``actors.json`` of a run (written by runtime/pool_status.py) as two tables."""
    from mixscope.format import aligned_table
    from mixscope.status import pool_tables

    if state is None:
        click.echo(f"\nrun {run_id}: no actor pool recorded (not run on Ray)")
        return
    tail = state.get("tail_idle_actor_s")
    click.echo(
        f"\nrun {run_id} actors: Ray start {state.get('ray_start_s')}s, first actor ready "
        f"{state.get('first_actor_ready_s')}s, asking the autoscaler for "
        f"{state.get('requested_bundles', 0)} bundles"
        + ("" if tail is None else f", idle at the end {tail}s actor-seconds")
    )
    for headers, rows in pool_tables(state):
        click.echo(aligned_table(headers, rows, digits=2))
    for node in state.get("lost_nodes", []):
        click.echo(f"{run_id} node {node} lost")
