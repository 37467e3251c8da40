"""Spec fields that describe themselves: default, help text and allowed values in one place.

Every field of a job spec is declared with :func:`setting`, so the CLI flags of
``mixscope run`` / ``analyze`` (cli/options.py), the generic checks of ``validate`` and
any reference page read the same default, the same sentence and the same choices: changing
a default or a help text is one edit, and a flag can never disagree with the spec.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


def setting(default: Any, help: str, *, choices: tuple[str, ...] | None = None) -> Any:
    """A spec field: its default, one sentence of help and, for a closed set, its choices.

    Defaults are immutable (tuples, scalars), so no ``default_factory`` is needed."""
    return dataclasses.field(default=default, metadata={"help": help, "choices": choices})


@dataclass(frozen=True)
class FieldInfo:
    """What the spec says about one field, addressed by its key (``runtime.workers``)."""

    key: str
    type: Any  # the resolved type hint, e.g. ``int | None``
    default: Any
    help: str
    choices: tuple[str, ...] | None

    @property
    def flag(self) -> str:
        """The field's long flag: ``runtime.batch_size`` → ``--batch-size``."""
        return "--" + self.key.rsplit(".", 1)[-1].replace("_", "-")


def describe(cls: type, prefix: str = "") -> dict[str, FieldInfo]:
    """The :class:`FieldInfo` of every field of the spec dataclass ``cls`` that has a plain
    default (sections, which are dataclasses themselves, are described on their own)."""
    import typing

    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is dataclasses.MISSING:
            continue
        key = prefix + f.name
        out[key] = FieldInfo(
            key=key,
            type=hints[f.name],
            default=f.default,
            help=str(f.metadata.get("help", "")),
            choices=f.metadata.get("choices"),
        )
    return out
