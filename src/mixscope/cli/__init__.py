"""The ``mixscope`` command line: parse, call the library, format. Thin by design.

One module per family of commands (analyze.py; jobs.py: run, validate, submit, status;
results.py: sql, queries, query, compare, frequencies, report; checkpoints.py: checkpoints
sync, watch, list); the options that set spec fields are made from the spec itself
(options.py). Nothing heavy (torch, transformers, ray) is imported at load, so ``--help``
is fast. Errors are one line and an exit code
(README: exit codes); ``--debug`` shows the traceback.
"""

from __future__ import annotations

import sys
import traceback
from typing import Any

import click

from mixscope import __version__
from mixscope.errors import MixscopeError, first_line


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
            from mixscope.store.reach import explain

            unreachable = explain(exc)  # an object store gone: one line of ours, not the client's
            if unreachable is not None:
                click.echo(f"Error: {unreachable}", err=True)
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


def _register() -> None:
    from mixscope.cli import analyze, jobs, query_commands
    from mixscope.cli.checkpoints import checkpoints

    for command in (
        analyze.analyze,
        jobs.run,
        jobs.validate,
        jobs.status,
        jobs.submit,
        query_commands.sql,
        query_commands.queries,
        query_commands.query,
        query_commands.compare,
        checkpoints,
        query_commands.frequencies,
        query_commands.report,
    ):
        main.add_command(command)


_register()
