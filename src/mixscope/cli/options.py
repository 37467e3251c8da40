"""Click options made from the job spec's own fields, and the option sets commands share.

A flag that sets a spec field is declared by its key (``spec_option("runtime.workers",
"-w")``): its type, choices, help text and default come from the field (config/spec.py),
so ``--help`` and the spec can never disagree. The flag's parameter name is the key with
``__`` for ``.``, which is how :func:`spec_flags` maps what was given back to spec keys.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

import click

from mixscope.config.fields import FieldInfo
from mixscope.config.spec import field_info

Decorator = Callable[[Any], Any]

#: parameter names of spec flags carry the key: runtime.batch_size → runtime__batch_size
_SEP = "__"

#: the parameter names that ``spec_option`` made, and the spec key of each
_SPEC_PARAMS: dict[str, str] = {}


def _base_type(info: FieldInfo) -> Any:
    typ = info.type
    if typing.get_origin(typ) in (typing.Union, types.UnionType):
        typ = next(a for a in typing.get_args(typ) if a is not type(None))
    return typ


def _shown(value: Any) -> str | None:
    """A default as ``--help`` shows it; None where there is nothing worth showing."""
    if value is None or value == () or value is False:
        return None
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value)


def spec_option(
    key: str,
    *decls: str,
    override: bool = True,
    help: str | None = None,
    metavar: str | None = None,
) -> Decorator:
    """The click option that sets spec field ``key`` (``--batch-size`` for
    ``runtime.batch_size`` unless ``decls`` name the flags).

    ``override=True`` (job commands): the option defaults to None, "not given", so the
    YAML's value stands; help ends with the spec's default. ``override=False``
    (``analyze``, which has no spec file): the spec's default is the option's default.
    ``help`` replaces the field's sentence where a command means something narrower."""
    info = field_info(key)
    name = info.key.replace(".", _SEP)
    _SPEC_PARAMS[name] = info.key
    typ = _base_type(info)
    text = help or info.help
    kwargs: dict[str, Any] = {} if metavar is None else {"metavar": metavar}
    if typ is bool:
        kwargs["is_flag"] = True
    elif typing.get_origin(typ) is tuple:
        kwargs["multiple"] = True
    elif info.choices is not None:
        kwargs["type"] = click.Choice(info.choices)
    else:
        kwargs["type"] = typ
    if override:
        shown = _shown(info.default)
        kwargs["default"] = None
        if shown is not None and not kwargs.get("is_flag"):
            text = f"{text} [spec default: {shown}]"
    else:
        kwargs["default"] = info.default
        kwargs["show_default"] = _shown(info.default) is not None
    return click.option(*(decls or (info.flag,)), name, help=text, **kwargs)


def spec_flags(params: Mapping[str, Any]) -> dict[str, Any]:
    """The spec flags that were given (``{"runtime.workers": 2, …}``) among a command's
    parameters; flags not given (None, or an empty repeatable) are left out."""
    return {
        _SPEC_PARAMS[name]: list(value) if isinstance(value, tuple) else value
        for name, value in params.items()
        if name in _SPEC_PARAMS and value is not None and value != ()
    }


def spec_values(params: Mapping[str, Any]) -> dict[str, Any]:
    """Every spec flag's value (given or default) by its spec key (``analysis.seed``)."""
    return {_SPEC_PARAMS[n]: v for n, v in params.items() if n in _SPEC_PARAMS}


def apply_options(options: list[Decorator], func: Any) -> Any:
    for option in reversed(options):
        func = option(func)
    return func


def override_options(*, model: bool = True, address: bool = True) -> list[Decorator]:
    """The short flags for the common spec fields, each made from its field: model, name,
    corpus, output, workers, batch size, length, revision, measure groups and cluster
    address.
    ``model=False`` leaves out ``--model`` and ``--revision`` (``checkpoints``: each
    checkpoint is the model, and ``--revision`` there lists hub revisions);
    ``address=False`` leaves ``--address`` to the command."""
    options = [spec_option("model", "--model", "-m")] if model else []
    options += [
        spec_option("name", "--name", "-n"),
        spec_option("corpus.paths", "--corpus", "-c"),
        spec_option("out", "--out", "-o"),
        spec_option("runtime.workers", "--workers", "-w"),
        spec_option("runtime.batch_size"),
        spec_option("analysis.max_length"),
    ]
    if model:
        options.append(spec_option("analysis.revision"))
    options.append(spec_option("analysis.measures", metavar="GROUPS"))
    if address:
        options.append(spec_option("runtime.address"))
    return options


def set_option() -> Decorator:
    """``--set key=value``: any spec field, after the YAML and before the flags."""
    return click.option(
        "--set",
        "sets",
        multiple=True,
        metavar="KEY=VALUE",
        help="Override any spec field, e.g. analysis.mask_rate=0.12.",
    )


def job_options(*, address: bool = True) -> Decorator:
    """The JOB argument and the overrides every job command takes: short flags for the
    common fields and ``--set key=value`` for any other. ``address=False`` leaves
    ``--address`` to the command (``submit``: the Jobs API, not the cluster of a run)."""
    options: list[Decorator] = [
        click.argument("job", required=False, type=click.Path(dir_okay=False)),
        *override_options(address=address),
        set_option(),
    ]
    return lambda func: apply_options(options, func)


def job_spec(job: str | None, sets: tuple[str, ...], params: Mapping[str, Any]) -> Any:
    """The validated spec of a job command: YAML, then ``--set``, then the flags."""
    from mixscope.config import spec_from_flags

    return spec_from_flags(job, sets, spec_flags(params))


def sql_options(func: Any) -> Any:
    """The options of every command that answers with a query result."""
    return apply_options(
        [
            format_option(("table", "csv", "json", "parquet"), "table"),
            output_option("Write the result to FILE instead of stdout."),
            click.option("--run", "run_ids", multiple=True, help="Only these runs in the views."),
            click.option(
                "--threads", type=int, default=None, help="DuckDB threads (default: all cores)."
            ),
            click.option("--memory-limit", default=None, help="DuckDB memory limit, e.g. 8GB."),
        ],
        func,
    )


def format_option(choices: tuple[str, ...], default: str, help: str | None = None) -> Decorator:
    return click.option(
        "--format",
        "fmt",
        default=default,
        show_default=True,
        type=click.Choice(choices),
        help=help,
    )


def output_option(help: str) -> Decorator:
    return click.option("--output", "-o", default=None, help=help)


def quiet_transformers() -> None:
    """No transformers warnings or progress bars on a command's output."""
    import os

    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
