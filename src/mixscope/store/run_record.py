"""The run record (``_mixscope/runs/<run>/run.json``): typed, versioned, read and written here.

It follows store/records.py's conventions: ``format`` is ``RUN_FORMAT`` (records written
before it existed read as format 0), keys this version does not know are kept in ``extra``
and written back unchanged, and a record without ``run_id`` or with a value of the wrong
kind (``model`` not an object, ``rows`` not a number) raises ``CorruptRecordError`` naming
the file, so ``status``, ``sql`` and ``report`` say one line instead of a ``KeyError``.

The job spec is stored once, in ``spec``. Format 1 also wrote copies of two of its
sections, ``runtime`` (with ``worker_range`` and ``analysis.attention`` added, both
derived from the spec) and ``output``; they are still read, and dropped where the record's
``spec`` holds that section, so a resumed old run is rewritten in the new form.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from mixscope.errors import CorruptRecordError
from mixscope.store.records import known_keys, need

#: version of the run record (0: records written before it was stored; 1: with the
#: ``runtime`` and ``output`` copies of the spec's sections)
RUN_FORMAT = 2

_OBJECTS = (
    "model",
    "corpus",
    "options",
    "spec",
    "libraries",
    "errors",
    "measures",
)
#: format 1's copies of the spec's sections: read, dropped when ``spec`` holds them
_COPIES = ("runtime", "output")
_COUNTS = ("shards_total", "shards_done", "shards_failed", "rows", "tokens")


@dataclass(frozen=True)
class RunRecord:
    """What a run is (model, corpus, options, the spec it came from) and how far it got."""

    run_id: str
    created_at: str = ""
    updated_at: str = ""
    name: str = ""
    status: str = ""  # running | complete | incomplete | failed ("" before the first run)
    step: int | None = None
    model: Mapping[str, Any] = field(default_factory=dict)
    corpus: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)  # the run identity's options
    spec: Mapping[str, Any] = field(default_factory=dict)  # the job spec (JobSpec.to_dict)
    libraries: Mapping[str, Any] = field(default_factory=dict)
    invocations: tuple[Mapping[str, Any], ...] = ()
    shards_total: int = 0
    shards_done: int = 0
    shards_failed: int = 0
    rows: int = 0
    tokens: int = 0
    errors: Mapping[str, str] = field(default_factory=dict)  # shard id → first line
    #: the measure groups the run computes ({"groups": [...], "columns": [...],
    #: "skipped": {group: why}} — what ``all`` left out); empty: written before groups
    #: existed, i.e. the paper's group
    measures: Mapping[str, Any] = field(default_factory=dict)
    format: int = RUN_FORMAT
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def groups(self) -> tuple[str, ...]:
        """The run's measure groups (runs written before groups existed: the paper's)."""
        from mixscope.registry import DEFAULT_GROUPS

        return tuple(self.measures.get("groups") or DEFAULT_GROUPS)

    @property
    def measure_set(self) -> Any:
        """The run's columns (:class:`~mixscope.registry.MeasureSet`)."""
        from mixscope.registry import measure_set

        return measure_set(self.groups)

    @property
    def detail(self) -> str:
        """``output.detail`` of the run identity (runs of schema 1 kept every row)."""
        return str((self.options.get("output") or {}).get("detail") or "full")

    @classmethod
    def from_json(cls, d: Mapping[str, Any], where: str) -> RunRecord:
        run_id = need(d, "run_id", where)
        for key in _OBJECTS:
            if d.get(key) is not None and not isinstance(d[key], Mapping):
                raise CorruptRecordError(f"{where}: {key} is not an object")
        invocations = d.get("invocations") or []
        if not isinstance(invocations, list) or not all(
            isinstance(i, Mapping) for i in invocations
        ):
            raise CorruptRecordError(f"{where}: invocations is not a list of objects")
        try:
            counts: dict[str, Any] = {k: int(d.get(k) or 0) for k in _COUNTS}
            step = None if d.get("step") is None else int(d["step"])
            fmt = int(d.get("format", 0))
        except (TypeError, ValueError) as exc:
            raise CorruptRecordError(f"{where}: {exc}") from None
        known = known_keys(cls)
        objects: dict[str, Any] = {k: dict(d.get(k) or {}) for k in _OBJECTS}
        return cls(
            run_id=str(run_id),
            created_at=str(d.get("created_at") or ""),
            updated_at=str(d.get("updated_at") or ""),
            name=str(d.get("name") or ""),
            status=str(d.get("status") or ""),
            step=step,
            **objects,
            invocations=tuple(dict(i) for i in invocations),
            **counts,
            format=fmt,
            extra=_unknown(d, known, objects["spec"]),
        )

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        out["invocations"] = [dict(i) for i in self.invocations]
        for key in _OBJECTS:
            out[key] = dict(out[key])
        return {**self.extra, **out}


def _unknown(d: Mapping[str, Any], known: set[str], spec: Mapping[str, Any]) -> dict[str, Any]:
    """The keys this version does not know, kept for the rewrite; format 1's copies of a
    section that ``spec`` holds are not kept (the spec is stored once)."""
    return {k: v for k, v in d.items() if k not in known and not (k in _COPIES and k in spec)}
