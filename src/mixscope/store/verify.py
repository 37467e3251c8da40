"""Is what the commit records promise still there? Damage after commit, found and repaired.

A commit record names every file of its shard with its size and sha256, and a
consolidation record (``stats/<g>.json``) names its statistics files the same way. A file
deleted or truncated after the commit, or a commit record that no longer parses, would
make queries silently answer from part of the data; ``check_run`` finds every such
damage (sizes only: one listing per run; ``deep=True`` also hashes every byte) and
``repair_plan`` says which shards to redo so that the run is whole again, exactly once:

- a damaged data file or statistics partial, or an unreadable commit record: that shard;
- a damaged consolidated statistics file: the shards its generation covers (their
  partials were merged into it and deleted), and the generation record is withdrawn.

Readers (``sql.views.connect``) refuse a damaged run with one line naming the damage;
``mixscope run --repair`` applies the plan and recomputes exactly those shards.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import pyarrow.fs as pafs

from mixscope.store import manifest
from mixscope.store.layout import Layout
from mixscope.store.records import CommitRecord

_SHARD_FILE = re.compile(r"(\d+)\.json$")


@dataclass(frozen=True)
class Damage:
    """One thing that is not as its record says: ``shard`` None for a generation file."""

    what: str
    shard: int | None = None
    generation: int | None = None

    def __str__(self) -> str:
        where = (
            f"shard {self.shard}"
            if self.shard is not None
            else f"statistics generation {self.generation}"
        )
        return f"{where}: {self.what}"


class _Sizes:
    """File sizes by listing each folder once (one LIST per folder on an object store,
    instead of one request per file)."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._folders: dict[str, dict[str, int]] = {}

    def get(self, path: str) -> int | None:
        folder = path.rsplit("/", 1)[0]
        if folder not in self._folders:
            selector = pafs.FileSelector(folder, allow_not_found=True)
            infos = self.layout.fs.get_file_info(selector)
            self._folders[folder] = {i.path: i.size for i in infos if i.type == pafs.FileType.File}
        return self._folders[folder].get(path)


def _entry_damage(
    layout: Layout, sizes: _Sizes, entries: dict[str, dict], deep: bool
) -> dict[str, str]:
    """kind → what is wrong with its file (missing, truncated, changed)."""
    out = {}
    for kind, entry in entries.items():
        path = layout.absolute(entry["path"])
        size, want = sizes.get(path), int(entry.get("bytes", -1))
        if size is None:
            out[kind] = f"{kind} file missing ({layout.relative(path)})"
        elif want >= 0 and size != want:
            out[kind] = f"{kind} file truncated or changed ({size} of {want} bytes)"
        elif deep and entry.get("sha256"):
            with layout.fs.open_input_stream(path) as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            if digest != entry["sha256"]:
                out[kind] = f"{kind} file changed (sha256 differs from its commit record)"
    return out


@dataclass(frozen=True)
class _Expected:
    """What a run's records say its files are: (shard or None, generation or None, kind →
    entry) per commit and for the latest consolidation, and the records that do not parse."""

    unreadable: tuple[Damage, ...]
    entries: tuple[tuple[int | None, int | None, dict[str, dict]], ...]


def _expected(layout: Layout, run_id: str) -> _Expected:
    from mixscope.stats.consolidate import latest
    from mixscope.store.schema import STATS

    commits, unreadable = manifest.read_records(
        layout, manifest.commits_dir(layout, run_id), CommitRecord.from_json
    )
    bad = []
    for path in unreadable:
        m = _SHARD_FILE.search(path)
        bad.append(Damage("commit record unreadable (truncated?)", int(m.group(1)) if m else None))
    gen = latest(layout, run_id)
    entries: list[tuple[int | None, int | None, dict[str, dict]]] = []
    for shard_id, rec in sorted(commits.items()):
        files = {k: e.to_json() for k, e in rec.files.items()}
        if shard_id in gen.shards:  # its partials live on in the generation's files
            files = {k: e for k, e in files.items() if k not in STATS}
        entries.append((shard_id, None, files))
    entries.append((None, gen.generation, gen.files))
    return _Expected(tuple(bad), tuple(entries))


def _damage(layout: Layout, expected: _Expected, deep: bool) -> list[Damage]:
    sizes = _Sizes(layout)
    damage = list(expected.unreadable)
    for shard, generation, files in expected.entries:
        for what in _entry_damage(layout, sizes, files, deep).values():
            damage.append(Damage(what, shard, generation))
    return damage


def check_run(layout: Layout, run_id: str, *, deep: bool = False) -> list[Damage]:
    """Every damage of the run's committed results, shard damage first, in shard order."""
    return _damage(layout, _expected(layout, run_id), deep)


#: (root, run) → (the records' listing, what they said) of the last check in this process
_SEEN: dict[tuple[str, str], tuple[tuple, _Expected]] = {}


def _records_listing(layout: Layout, run_id: str) -> tuple:
    """Name, size and mtime of every commit and consolidation record of the run: two
    folder listings, no file read. A commit, a consolidation, a record rewritten or
    truncated changes it."""
    out = []
    for folder in (manifest.commits_dir(layout, run_id), layout.consolidation_dir(run_id)):
        infos = layout.fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
        out += sorted((i.path, i.size, i.mtime_ns) for i in infos)
    return tuple(out)


def check_run_cached(layout: Layout, run_id: str) -> list[Damage]:
    """``check_run`` (not ``deep``) that reads the run's records again only when their
    listing changed since the last check in this process: repeated connections to a big
    output (a notebook's ``refresh()``, a report, a sync pass) list its folders to check
    every file's presence and size, but do not re-read thousands of commit records."""
    key, listing = (layout.root, run_id), _records_listing(layout, run_id)
    seen = _SEEN.get(key)
    if seen is None or seen[0] != listing:
        seen = (listing, _expected(layout, run_id))
        _SEEN[key] = seen
    return _damage(layout, seen[1], deep=False)


def repair_plan(layout: Layout, run_id: str, damage: list[Damage]) -> tuple[set[int], bool]:
    """(shards to redo, whether the consolidated statistics are withdrawn)."""
    from mixscope.stats.consolidate import latest

    redo = {d.shard for d in damage if d.shard is not None}
    withdraw = any(d.shard is None for d in damage)
    if withdraw:
        redo |= set(latest(layout, run_id).shards)
    return redo, withdraw


def repair(layout: Layout, run_id: str, damage: list[Damage]) -> set[int]:
    """Make the damaged shards pending again (the caller then runs them); the shards."""
    from mixscope.stats.consolidate import latest

    redo, withdraw = repair_plan(layout, run_id, damage)
    if withdraw:  # every generation record: the older ones' files were deleted already
        gen = latest(layout, run_id)
        for path in layout.list_files(layout.consolidation_dir(run_id), ".json"):
            layout.delete(path)
        for entry in gen.files.values():
            layout.delete(layout.absolute(entry["path"]))
    for shard_id in sorted(redo):
        layout.delete(layout.commit_file(run_id, shard_id))  # its files are rewritten
    return redo
