"""The ``mixscope`` command line: parse, call the API, format. Thin by design.

Nothing heavy (torch, transformers, ray) is imported at module load, so ``--help`` is fast.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Any

import click

from mixscope import MEASURES, __version__
from mixscope.errors import MixscopeError, first_line
from mixscope.models.packaged import DEFAULT_MODEL


class _Group(click.Group):
    """Turns user errors into one line and a non-zero exit; ``--debug`` shows the traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except BrokenPipeError:  # `mixscope … | head`: the reader left, nothing to report
            sys.stderr.close()
            ctx.exit(0)
        except MixscopeError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                traceback.print_exc()
            click.echo(f"Error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except Exception as exc:
            if ctx.obj and ctx.obj.get("debug"):
                traceback.print_exc()
                ctx.exit(1)
            first = first_line(exc)
            click.echo(
                f"Error: {type(exc).__name__}: {first} (rerun with --debug for the traceback)",
                err=True,
            )
            ctx.exit(1)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mixscope")
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Measure context mixing in Transformer language models (Kobayashi et al., EMNLP 2021)."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def _quiet_transformers() -> None:
    import os

    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def _layer_summary(table: Any) -> tuple[list[str], list[list[Any]]]:
    import numpy as np

    layers = table["layer"].to_numpy()
    rows = []
    for layer in np.unique(layers):
        sel = layers == layer
        rows.append(
            [int(layer), int(sel.sum())]
            + [float(table[m].to_numpy()[sel].mean()) for m in MEASURES]
        )
    allrow = ["all", table.num_rows] + [float(table[m].to_numpy().mean()) for m in MEASURES]
    return ["layer", "tokens", *MEASURES], [*rows, allrow]


def _token_summary(table: Any, layer: int | None) -> tuple[list[str], list[list[Any]]]:
    import numpy as np

    cols = {
        c: table[c].to_numpy(zero_copy_only=False)
        for c in ("doc_id", "segment", "position", "layer")
    }
    if layer is not None:
        sel = cols["layer"] == layer
        if not sel.any():
            raise MixscopeError(f"--layer {layer} is out of range (1..{int(cols['layer'].max())})")
    else:
        sel = np.ones(table.num_rows, dtype=bool)
    tokens = table["token"].to_pylist()
    special = table["is_special"].to_numpy(zero_copy_only=False)
    masked = table["is_masked"].to_numpy(zero_copy_only=False)
    values = {m: table[m].to_numpy() for m in MEASURES}
    groups: dict[tuple[int, int, int], list[int]] = {}
    for k in np.flatnonzero(sel):
        key = (int(cols["doc_id"][k]), int(cols["segment"][k]), int(cols["position"][k]))
        groups.setdefault(key, []).append(int(k))
    rows = []
    for (doc, seg, pos), idx in groups.items():
        first = idx[0]
        flags = ("special " if special[first] else "") + ("masked" if masked[first] else "")
        rows.append(
            [doc, seg, pos, tokens[first], flags.strip()]
            + [float(values[m][idx].mean()) for m in MEASURES]
        )
    return ["doc", "seg", "pos", "token", "flags", *MEASURES], rows


def _write_table(table: Any, output: str) -> None:
    path = Path(output)
    suffix = path.suffix.lower()
    if suffix not in (".parquet", ".csv"):
        raise MixscopeError(f"--output must end in .parquet or .csv, got {output!r}")
    from mixscope.store.atomic import replacing

    with replacing(path) as tmp:
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            pq.write_table(table, tmp, compression="zstd")
        else:
            import pyarrow as pa
            import pyarrow.csv as pcsv

            plain = table.set_column(
                table.schema.get_field_index("token"), "token", table["token"].cast(pa.string())
            )
            pcsv.write_csv(plain, tmp)


@main.command()
@click.argument("texts", nargs=-1)
@click.option(
    "--model",
    "-m",
    default=DEFAULT_MODEL,
    show_default=True,
    help="Model directory or hub id (the packaged MiniLM works offline).",
)
@click.option(
    "--pair",
    nargs=2,
    multiple=True,
    metavar="TEXT TEXT_PAIR",
    help="A (text, text_pair) document; repeatable.",
)
@click.option(
    "--file",
    "-f",
    "files",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="Read one document per non-empty line.",
)
@click.option(
    "--tokens",
    is_flag=True,
    help="Print a per-token table (mean over layers) instead of per layer.",
)
@click.option(
    "--layer",
    type=int,
    default=None,
    help="With --tokens: one layer (1-based) instead of the mean.",
)
@click.option(
    "--output", "-o", default=None, help="Write the full table to FILE.parquet or FILE.csv."
)
@click.option(
    "--max-length", type=int, default=None, help="Tokens per sequence (default: the model's limit)."
)
@click.option("--batch-size", type=int, default=8, show_default=True)
@click.option("--device", default="auto", show_default=True, help="cpu, cuda, cuda:1, … or auto.")
@click.option("--dtype", default=None, help="float32 (default), bfloat16, float16, float64.")
@click.option("--revision", default=None, help="Hub revision (branch, tag or commit).")
@click.option(
    "--mask-rate",
    type=float,
    default=0.0,
    show_default=True,
    help="Share of non-special tokens replaced by the mask token.",
)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed of the masking positions."
)
@click.option("--verify", is_flag=True, help="Check the exactness identity on every block.")
@click.option(
    "--attention",
    type=click.Choice(["auto", "fast", "eager"]),
    default="auto",
    show_default=True,
    help="fast: α_ii from a fused kernel, O(n) memory; eager: full weights; auto: fast "
    "unless --verify.",
)
@click.option(
    "--padding-side",
    type=click.Choice(["left", "right"]),
    default=None,
    help="Pad batches on this side (default: the tokenizer's; the numbers do not change).",
)
def analyze(
    texts: tuple[str, ...],
    model: str,
    pair: tuple[tuple[str, str], ...],
    files: tuple[str, ...],
    tokens: bool,
    layer: int | None,
    output: str | None,
    max_length: int | None,
    batch_size: int,
    device: str,
    dtype: str | None,
    revision: str | None,
    mask_rate: float,
    seed: int,
    verify: bool,
    attention: str,
    padding_side: str | None,
) -> None:
    """Quick look at a few TEXTS: mean of the five measures per layer.

    \b
    Examples:
      mixscope analyze "The cat sat on the mat." "A second sentence."
      mixscope analyze --pair "First paragraph." "Second paragraph." --tokens
      mixscope analyze -m bert-base-uncased -f sentences.txt -o out.parquet
    """
    from mixscope.format import aligned_table

    docs: list[Any] = list(texts) + [tuple(p) for p in pair]
    for name in files:
        try:
            lines = Path(name).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise MixscopeError(f"cannot read {name}: {exc}") from None
        docs += [ln for ln in lines if ln.strip()]
    if not docs:
        raise MixscopeError("no texts given: pass TEXTS, --pair or --file")

    _quiet_transformers()
    from mixscope.api import analyze as run_analyze

    table = run_analyze(
        model,
        docs,
        max_length=max_length,
        batch_size=batch_size,
        device=device,
        dtype=dtype,
        revision=revision,
        mask_rate=mask_rate,
        seed=seed,
        verify=verify,
        padding_side=padding_side,
        attention=attention,
    )
    if output:
        _write_table(table, output)
    headers, rows = _token_summary(table, layer) if tokens else _layer_summary(table)
    click.echo(aligned_table(headers, rows))
    if verify:
        click.echo("exactness identity: holds on every block", err=True)
    if output:
        click.echo(f"wrote {table.num_rows} rows to {output}", err=True)


def job_options(func: Any) -> Any:
    """The overrides every job command takes: short flags and ``--set key=value``."""
    options = [
        click.argument("job", required=False, type=click.Path(dir_okay=False)),
        click.option("--model", "-m", default=None, help="Model directory or hub id."),
        click.option(
            "--corpus", "-c", multiple=True, help="Corpus file, directory or glob; repeatable."
        ),
        click.option(
            "--out", "-o", default=None, help="Output root (directory or object-store URI)."
        ),
        click.option("--workers", "-w", type=int, default=None, help="Number of actors."),
        click.option("--batch-size", type=int, default=None),
        click.option("--max-length", type=int, default=None),
        click.option("--revision", default=None, help="Hub revision of the model."),
        click.option(
            "--address", default=None, help="Ray cluster address (else RAY_ADDRESS, else local)."
        ),
        click.option(
            "--set",
            "sets",
            multiple=True,
            metavar="KEY=VALUE",
            help="Override any spec field, e.g. analysis.mask_rate=0.12.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _spec_from(
    job: str | None, model, corpus, out, workers, batch_size, max_length, revision, address, sets
):
    from mixscope.config import spec_from_flags

    flags = {
        "model": model,
        "corpus.paths": list(corpus) if corpus else None,
        "out": out,
        "runtime.workers": workers,
        "runtime.batch_size": batch_size,
        "analysis.max_length": max_length,
        "analysis.revision": revision,
        "runtime.address": address,
    }
    return spec_from_flags(job, sets, flags)


def _print_summary(summary: Any) -> None:
    from mixscope.format import aligned_table
    from mixscope.sql.summary import layer_summary

    s = summary
    click.echo(
        f"run {s.run_id}: {s.status} — {s.shards_done}/{s.shards_total} shards "
        f"({summary.shards_skipped} already committed, {summary.shards_failed} failed), "
        f"{summary.rows:,} rows, {summary.tokens:,} tokens in {summary.seconds:.1f}s "
        f"({summary.tokens_per_second:,.0f} tok/s) → {summary.root}",
        err=True,
    )
    for shard_id, error in sorted(summary.errors.items()):
        click.echo(f"  shard {shard_id} failed: {error}", err=True)
    if summary.shards_done:
        headers, rows = layer_summary(summary.root, summary.run_id)
        click.echo(aligned_table(headers, [list(r) for r in rows]))


@main.command()
@job_options
@click.option(
    "--detail",
    type=click.Choice(["full", "sample", "none"]),
    default=None,
    help="Per-token rows besides the statistics: every document, a sample "
    "(output.sample_rate) or none (the spec's output.detail).",
)
@click.option("--no-progress", is_flag=True, help="No progress bar or progress lines.")
@click.option(
    "--repair",
    is_flag=True,
    help="Check every committed file against its commit record (size and sha256) and "
    "redo exactly the shards whose results were deleted, truncated or changed.",
)
def run(
    job,
    model,
    corpus,
    out,
    workers,
    batch_size,
    max_length,
    revision,
    address,
    sets,
    detail,
    no_progress,
    repair,
):
    """Run (or resume) the analysis job JOB (a YAML spec; flags override it).

    \b
    Examples:
      mixscope run jobs/demo.yaml
      mixscope run jobs/wikitext2.yaml --workers 4 --set analysis.mask_rate=0.12
      mixscope run --model bert-base-uncased --corpus data/ --out results/
    """
    if detail:
        sets = (*sets, f"output.detail={detail}")
    spec = _spec_from(
        job, model, corpus, out, workers, batch_size, max_length, revision, address, sets
    )
    _quiet_transformers()
    from mixscope.runtime.driver import run_job

    summary = run_job(spec, show_progress=not no_progress, repair=repair)
    _print_summary(summary)
    if summary.status != "complete":
        sys.exit(1)


@main.command()
@job_options
def validate(job, model, corpus, out, workers, batch_size, max_length, revision, address, sets):
    """Check a job spec: fields, corpus readable, model loadable (on one document only)."""
    from mixscope.format import aligned_table

    spec = _spec_from(
        job, model, corpus, out, workers, batch_size, max_length, revision, address, sets
    )
    _quiet_transformers()
    from mixscope.runtime.driver import prepare
    from mixscope.runtime.worker import ShardWorker

    prep = prepare(spec, write=False)
    first = prep.plan.shards[0]
    worker = ShardWorker(spec, prep.run_id)
    from mixscope.corpus.plan import read_shard

    doc = read_shard(first, spec.corpus)[0]
    from mixscope.api import analyze as run_analyze

    table = run_analyze(
        (worker.loaded.model, worker.loaded.tokenizer),
        [doc.text],
        max_length=worker.max_length,
        mask_rate=spec.analysis.mask_rate,
        seed=spec.analysis.seed,
        verify=True,
    )
    rows = [
        ["run id", prep.run_id],
        [
            "model",
            f"{spec.model} ({worker.loaded.adapter.family}, "
            f"{worker.engine.num_layers} layers, {worker.device})",
        ],
        [
            "corpus",
            f"{len(prep.plan.files)} files, {prep.plan.n_docs:,} documents, "
            f"{len(prep.plan.shards)} shards",
        ],
        ["bad input", ", ".join(f"{k}={v}" for k, v in prep.plan.bad.items()) or "none"],
        [
            "first document",
            f"{table.num_rows // worker.engine.num_layers} tokens, exactness identity holds",
        ],
        ["output", spec.out],
    ]
    click.echo(aligned_table(["check", "result"], rows))
    click.echo("valid", err=True)


@main.command()
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
    help="Per Ray actor and node: what it does (shard, tok/s), nodes lost.",
)
def status(
    root: str, show_shards: bool, run_ids: tuple[str, ...], as_json: bool, show_actors: bool
) -> None:
    """Runs under ROOT: shards done / failed / pending, rows, throughput."""
    from mixscope.runtime.status import status_document

    doc = status_document(root, run_ids, show_shards)
    if not doc["runs"]:
        raise MixscopeError(f"no runs under {root}")
    if as_json:
        import json

        click.echo(json.dumps(doc, indent=2))
        return
    from mixscope.runtime.status import status_tables

    for line in status_tables(doc):
        click.echo(line)
    if show_actors:
        for r in doc["runs"]:
            _echo_actors(root, r["run_id"])


def _echo_actors(root: str, run_id: str) -> None:
    """The last ``actors.json`` of a run (runtime/pool_status.py) as two tables."""
    from mixscope.format import aligned_table
    from mixscope.runtime.pool_status import pool_tables, read_pool_status

    state = read_pool_status(root, run_id)
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


@main.command()
@job_options
@click.option("--wait", is_flag=True, help="Stream the job's logs and exit with its status.")
def submit(job, model, corpus, out, workers, batch_size, max_length, revision, address, sets, wait):
    """Submit JOB to a Ray cluster through the Ray Jobs API (--address http://HEAD:8265)."""
    spec = _spec_from(
        job, model, corpus, out, workers, batch_size, max_length, revision, None, sets
    )
    from mixscope.runtime.submit import submit_job

    code = submit_job(spec, address=address, wait=wait, echo=click.echo)
    sys.exit(code)


def sql_options(func: Any) -> Any:
    for option in reversed(
        [
            click.option(
                "--format",
                "fmt",
                default="table",
                show_default=True,
                type=click.Choice(["table", "csv", "json", "parquet"]),
            ),
            click.option(
                "--output", "-o", default=None, help="Write the result to FILE instead of stdout."
            ),
            click.option("--run", "run_ids", multiple=True, help="Only these runs in the views."),
            click.option(
                "--threads", type=int, default=None, help="DuckDB threads (default: all cores)."
            ),
            click.option("--memory-limit", default=None, help="DuckDB memory limit, e.g. 8GB."),
        ]
    ):
        func = option(func)
    return func


def _connect(
    root: str, run_ids: tuple[str, ...], threads: int | None, memory_limit: str | None
) -> Any:
    from pathlib import Path as _Path

    if "://" not in root and not _Path(root).is_dir():
        raise MixscopeError(f"results root {root} does not exist")
    from mixscope.sql.views import connect

    return connect(root, run_ids=list(run_ids) or None, threads=threads, memory_limit=memory_limit)


def _emit(cur: Any, fmt: str, output: str | None) -> None:
    from mixscope.sql.output import render

    text = render(cur, fmt, output)
    if text is not None:
        click.echo(text)
    else:
        click.echo(f"wrote {output}", err=True)


def _repl(con: Any, fmt: str) -> None:
    from mixscope.sql.readonly import execute

    click.echo(
        "mixscope SQL (read-only). Views: tokens, runs, frequencies, measures. "
        "End statements with ';', Ctrl-D to quit.",
        err=True,
    )
    buffer: list[str] = []
    while True:
        try:
            line = input("mixscope> " if not buffer else "     ...> ")
        except EOFError:
            click.echo("", err=True)
            return
        buffer.append(line)
        if not line.rstrip().endswith(";"):
            continue
        statement, buffer = "\n".join(buffer), []
        try:
            _emit(execute(con, statement), fmt, None)
        except MixscopeError as exc:
            click.echo(f"Error: {exc}", err=True)


@main.command()
@click.argument("root")
@click.argument("statement", required=False)
@sql_options
def sql(
    root: str, statement: str | None, fmt: str, output: str | None, run_ids, threads, memory_limit
) -> None:
    """Run a read-only SQL STATEMENT over the results in ROOT (no STATEMENT: a prompt).

    \b
    Views: tokens (one row per token per layer, with run_id and category), runs,
    frequencies (run_id | reference, token_id, token, count, rank), measures.
    Example:
      mixscope sql results/ "SELECT layer, avg(attnresln_n) FROM tokens GROUP BY layer ORDER BY 1"
    """
    con = _connect(root, run_ids, threads, memory_limit)
    if statement is None:
        if sys.stdin.isatty():
            _repl(con, fmt)
            return
        statement = sys.stdin.read()
    from mixscope.sql.readonly import execute

    _emit(execute(con, statement), fmt, output)


@main.command()
def queries() -> None:
    """List the named queries: name, description, parameters."""
    from mixscope.sql.named import REQUIRED, all_queries

    for q in all_queries().values():
        click.echo(f"{q.name}\n  {q.description}")
        for p in q.params:
            default = "required" if p.default is REQUIRED else f"default {p.default!r}"
            click.echo(f"  --param {p.name}=…  ({default}) {p.help}")
        if q.columns:
            click.echo(f"  columns: {', '.join(q.columns)}")


@main.command()
@click.argument("root")
@click.argument("name")
@click.option(
    "--param",
    "-p",
    "params",
    multiple=True,
    metavar="KEY=VALUE",
    help="A query parameter; repeatable.",
)
@sql_options
def query(
    root: str,
    name: str,
    params: tuple[str, ...],
    fmt: str,
    output: str | None,
    run_ids,
    threads,
    memory_limit,
) -> None:
    """Run the named query NAME over ROOT (see `mixscope queries`)."""
    from mixscope.sql.named import get_query, run_query

    get_query(name)  # unknown names fail before the views are built
    given: dict[str, str] = {}
    for item in params:
        if "=" not in item:
            raise MixscopeError(f"--param expects key=value, got {item!r}")
        key, value = item.split("=", 1)
        given[key.strip()] = value
    con = _connect(root, run_ids, threads, memory_limit)
    _emit(run_query(con, name, given), fmt, output)


@main.command()
@click.argument("root")
@click.argument("run_a")
@click.argument("run_b")
@click.option(
    "--by",
    type=click.Choice(["layer", "token-type"]),
    default="layer",
    show_default=True,
    help="Per layer and measure, or per layer, measure and token category.",
)
@click.option(
    "--format",
    "fmt",
    default="table",
    show_default=True,
    type=click.Choice(["table", "csv", "json", "parquet"]),
)
@click.option("--output", "-o", default=None, help="Write the result to FILE instead of stdout.")
def compare(root: str, run_a: str, run_b: str, by: str, fmt: str, output: str | None) -> None:
    """Runs RUN_A and RUN_B of ROOT side by side: means and the difference b - a.

    \b
    Run ids may be unique prefixes. Examples:
      mixscope compare results/ 3f2a 9c01                  # per layer and measure
      mixscope compare results/ 3f2a 9c01 --by token-type --format json
    """
    from mixscope.compare import compare_cursor, resolve_pair

    con = _connect(root, (), None, None)
    pair = resolve_pair(con, root, run_a, run_b)
    click.echo(pair.header(), err=True)
    _emit(compare_cursor(con, pair, by), fmt, output)


def _register_checkpoints() -> None:
    from mixscope.checkpoints.cli import checkpoints

    main.add_command(checkpoints)


_register_checkpoints()


@main.group()
def frequencies() -> None:
    """Reference frequency tables for the frequency analyses."""


@frequencies.command("import")
@click.argument("root")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--name", required=True, help="Name to refer to it by (--param reference=NAME).")
def frequencies_import(root: str, file: str, name: str) -> None:
    """Import FILE ('count token' lines, or CSV/Parquet with count and token / token_id)."""
    from mixscope.store.references import import_reference

    rows = import_reference(root, file, name)
    click.echo(f"imported {rows:,} tokens as reference {name!r} into {root}", err=True)


@main.command()
@click.argument("root")
@click.option("--run", "run_ids", multiple=True, help="Only these runs (repeatable).")
@click.option(
    "--output",
    "-o",
    default=None,
    help="The HTML file (default report.html), or with --format png a directory (default report).",
)
@click.option(
    "--format",
    "fmt",
    default="html",
    show_default=True,
    type=click.Choice(["html", "png"]),
    help="One self-contained HTML page, or one PNG file per plot.",
)
@click.option(
    "--reference",
    default=None,
    help="Frequency ranks from this imported reference table (default: the run's own counts).",
)
@click.option(
    "--compare",
    nargs=2,
    default=None,
    metavar="RUN_A RUN_B",
    help="Add the comparison of two runs (ids or unique prefixes), as `mixscope compare`.",
)
@click.option(
    "--examples/--no-examples",
    default=True,
    show_default=True,
    help="Contribution maps of an example sequence (loads each run's model).",
)
def report(
    root: str,
    run_ids: tuple[str, ...],
    output: str | None,
    fmt: str,
    reference: str | None,
    compare: tuple[str, str] | None,
    examples: bool,
) -> None:
    """Build the report of ROOT: tables and the paper's figures, as HTML or PNG files."""
    from mixscope.report.build import build_report

    if examples:
        _quiet_transformers()
    built = build_report(
        root,
        list(run_ids) or None,
        output,
        fmt,
        reference=reference,
        examples=examples,
        compare=compare or None,
    )
    what = "plots" if fmt == "png" else "figures"
    click.echo(f"wrote {built.output} ({len(built.plots)} {what})", err=True)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
