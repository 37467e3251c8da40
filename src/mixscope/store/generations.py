"""The consolidation records of a run: which generation of merged statistics is in force,
and, for readers, which files hold each committed shard's statistics exactly once.

Generation ``g`` of a run is the record ``_mixscope/runs/<run>/stats/<g>.json``: the set of
shards it covers and one immutable file per statistics kind. It is half of the commit
protocol (``store/manifest.py`` is the other): readers take the newest record and add the
partials of committed shards it does not cover. The merge that writes a new generation is
``stats/consolidate.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mixscope.errors import CorruptRecordError
from mixscope.store import manifest
from mixscope.store.layout import Layout
from mixscope.store.runs import now
from mixscope.store.schema import STATS

FORMAT = 1


@dataclass
class Generation:
    generation: int = 0
    shards: frozenset[int] = frozenset()
    files: dict[str, dict[str, Any]] = field(default_factory=dict)  # kind → manifest entry

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "generation": self.generation,
            "shards": sorted(self.shards),
            "files": self.files,
            "created_at": now(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Generation:
        return cls(int(d["generation"]), frozenset(int(s) for s in d["shards"]), d["files"])


def latest(layout: Layout, run_id: str) -> Generation:
    """The newest consolidation of the run (generation 0, covering nothing, if none)."""
    for path in reversed(layout.list_files(layout.consolidation_dir(run_id), ".json")):
        try:
            rec = layout.read_json(path)
        except CorruptRecordError:  # damaged: store/verify.py finds the files it named
            continue
        if rec is not None:
            return Generation.from_dict(rec)
    return Generation()


@dataclass
class StatsFiles:
    """Where one kind's statistics are, for readers."""

    consolidated: list[str] = field(default_factory=list)  # runs fully consolidated: unique keys
    merging: list[str] = field(default_factory=list)  # the rest: generation + partials to merge


def sources(
    layout: Layout, run_ids: list[str] | None = None, kinds: tuple[str, ...] = tuple(STATS)
) -> dict[str, StatsFiles]:
    """kind → the files that hold each committed shard's statistics exactly once."""
    runs = run_ids if run_ids is not None else layout.list_dirs(layout.runs_dir())
    out = {k: StatsFiles() for k in kinds}
    for run_id in runs:
        gen = latest(layout, run_id)  # the record first: shards committed later are partials
        partials: dict[str, list[str]] = {k: [] for k in kinds}
        for shard_id, rec in manifest.commits(layout, run_id).items():
            if shard_id in gen.shards:
                continue
            for kind in kinds:
                if kind in rec.files:
                    partials[kind].append(layout.absolute(rec.files[kind].path))
        for kind in kinds:
            files = [layout.absolute(gen.files[kind]["path"])] if kind in gen.files else []
            if partials[kind]:
                out[kind].merging += files + partials[kind]
            else:
                out[kind].consolidated += files
    for f in out.values():
        f.consolidated.sort()
        f.merging.sort()
    return out
