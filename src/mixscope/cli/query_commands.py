"""Commands over a results root: ``sql``, ``queries``, ``query``, ``compare``,
``frequencies import`` and ``report``. They read; only ``frequencies import`` and
``report`` write (a reference table, the report's files)."""

from __future__ import annotations

import sys
from typing import Any

import click

from mixscope.cli.options import format_option, output_option, quiet_transformers, sql_options
from mixscope.errors import MixscopeError


def _resolved(root: str, run_ids: tuple[str, ...]) -> list[str]:
    """``--run`` values as full run ids: unique prefixes accepted as everywhere (``compare``,
    ``status``); an unknown or ambiguous one is a one-line error naming the runs there are
    (``store.runs.resolve_run_ids``, the helper every command shares)."""
    from pathlib import Path

    if "://" not in root and not Path(root).is_dir():
        raise MixscopeError(f"results root {root} does not exist")
    if not run_ids:
        return []
    from mixscope.store.layout import Layout
    from mixscope.store.runs import resolve_run_ids

    return resolve_run_ids(Layout.open(root), list(run_ids))


def _connect(
    root: str, run_ids: tuple[str, ...], threads: int | None, memory_limit: str | None
) -> Any:
    from mixscope.sql.views import connect

    ids = _resolved(root, run_ids) or None
    return connect(root, run_ids=ids, threads=threads, memory_limit=memory_limit)


def _emit(cur: Any, fmt: str, output: str | None) -> None:
    from mixscope.sql.output import render

    text = render(cur, fmt, output)
    if text is not None:
        click.echo(text)
    else:
        click.echo(f"wrote {output}", err=True)


def _repl(con: Any, fmt: str, root: str, run_ids: tuple[str, ...]) -> None:
    from mixscope.sql.readonly import execute
    from mixscope.store.unreadable import naming_unreadable

    click.echo(
        "mixscope SQL (read-only). Views: tokens, documents, runs, frequencies, measures. "
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
            with naming_unreadable(root, run_ids):
                _emit(execute(con, statement), fmt, None)
        except MixscopeError as exc:
            click.echo(f"Error: {exc}", err=True)


@click.command()
@click.argument("root")
@click.argument("statement", required=False)
@sql_options
def sql(
    root: str,
    statement: str | None,
    fmt: str,
    output: str | None,
    run_ids: tuple[str, ...],
    threads: int | None,
    memory_limit: str | None,
) -> None:
    """Run a read-only SQL STATEMENT over the results in ROOT (no STATEMENT: a prompt).

    \b
    Views: tokens (one row per token per layer, with run_id and category), documents
    (one row per document: file, offset, tokens, in_detail), runs, frequencies (run_id |
    reference, token_id, token, count, rank), measures. --run takes unique prefixes.
    Example:
      mixscope sql results/ "SELECT layer, avg(attnresln_n) FROM tokens GROUP BY layer ORDER BY 1"
    """
    from mixscope.store.unreadable import naming_unreadable

    with naming_unreadable(root, run_ids):  # a damaged file: one line naming it
        con = _connect(root, run_ids, threads, memory_limit)
    if statement is None:
        if sys.stdin.isatty():
            _repl(con, fmt, root, run_ids)
            return
        statement = sys.stdin.read()
    from mixscope.sql.readonly import execute

    with naming_unreadable(root, run_ids):
        _emit(execute(con, statement), fmt, output)


@click.command()
@click.argument("root", required=False)
def queries(root: str | None) -> None:
    """List the named queries: name, description, parameters, columns.

    A query's measure columns are those of the runs it reads: with ROOT, the measures of
    ROOT's runs; without, those of the default measure groups.
    """
    from mixscope.sql.named import REQUIRED, all_queries, measure_lists

    measures, stored, source = measure_lists(root)
    for q in all_queries().values():
        click.echo(f"{q.name}\n  {q.description}")
        for p in q.params:
            default = "required" if p.default is REQUIRED else f"default {p.default!r}"
            click.echo(f"  --param {p.name}=…  ({default}) {p.help}")
        if q.columns:
            columns = q.expanded_columns(measures, stored)
            note = f"  (measures of {source})" if columns != q.columns else ""
            click.echo(f"  columns: {', '.join(columns)}{note}")


def _params(items: tuple[str, ...]) -> dict[str, str]:
    given: dict[str, str] = {}
    for item in items:
        if "=" not in item:
            raise MixscopeError(f"--param expects key=value, got {item!r}")
        key, value = item.split("=", 1)
        given[key.strip()] = value
    return given


@click.command()
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
    run_ids: tuple[str, ...],
    threads: int | None,
    memory_limit: str | None,
) -> None:
    """Run the named query NAME over ROOT (see `mixscope queries`)."""
    from mixscope.sql.named import get_query, run_query
    from mixscope.store.unreadable import naming_unreadable

    get_query(name)  # unknown names fail before the views are built
    given = _params(params)
    with naming_unreadable(root, run_ids):  # a damaged file: one line naming it
        con = _connect(root, run_ids, threads, memory_limit)
        _emit(run_query(con, name, given), fmt, output)


@click.command()
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
@format_option(("table", "csv", "json", "parquet"), "table")
@output_option("Write the result to FILE instead of stdout.")
def compare(root: str, run_a: str, run_b: str, by: str, fmt: str, output: str | None) -> None:
    """Runs RUN_A and RUN_B of ROOT side by side: means and the difference b - a.

    \b
    Run ids may be unique prefixes. Examples:
      mixscope compare results/ 3f2a 9c01                  # per layer and measure
      mixscope compare results/ 3f2a 9c01 --by token-type --format json
    """
    from mixscope.compare import compare_cursor, resolve_pair
    from mixscope.store.unreadable import naming_unreadable

    with naming_unreadable(root):  # a damaged file: one line naming it
        con = _connect(root, (), None, None)
        pair = resolve_pair(con, root, run_a, run_b)
        click.echo(pair.header(), err=True)
        _emit(compare_cursor(con, pair, by), fmt, output)


@click.group()
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


@click.command()
@click.argument("root")
@click.option("--run", "run_ids", multiple=True, help="Only these runs (repeatable).")
@output_option(
    "The HTML file (default report.html), or with --format png/svg/pdf a directory "
    "(default report)."
)
@format_option(
    ("html", "png", "svg", "pdf"),
    "html",
    "One self-contained HTML page; one PNG file per plot; or svg/pdf: the page and one "
    "vector file per plot beside it (for papers).",
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
@click.option(
    "--example",
    "example",
    type=int,
    default=None,
    metavar="DOC_ID",
    help="The document of the contribution maps [default: the first with at least 20 tokens].",
)
def report(
    root: str,
    run_ids: tuple[str, ...],
    output: str | None,
    fmt: str,
    reference: str | None,
    compare: tuple[str, str] | None,
    examples: bool,
    example: int | None,
) -> None:
    """Build the report of ROOT: tables and the paper's figures, as HTML, PNG, SVG or PDF."""
    from mixscope.report.build import build_report

    if examples:
        quiet_transformers()
    built = build_report(
        root,
        _resolved(root, run_ids) or None,  # unique prefixes, as everywhere
        output,
        fmt,
        reference=reference,
        examples=examples,
        compare=compare or None,
        example=example,
    )
    what = {"png": "plots", "svg": "SVG figures beside it", "pdf": "PDF figures beside it"}
    what_written = what.get(fmt, "figures")
    click.echo(f"wrote {built.output} ({len(built.plots)} {what_written})", err=True)
