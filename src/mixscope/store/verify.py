"""Is what the commit records promise still there? Damage after commit, found and repaired.

A commit record names every file of its shard with its size and sha256, and a
consolidation record (``stats/<g>.json``) names its statistics files the same way. A file
deleted, truncated or changed after the commit, or a commit record that no longer parses,
would make queries silently answer from part of the data (or from changed bytes: Parquet
has no checksum a reader checks, and one flipped byte may change a value without any
error); ``check_run`` finds every such damage (sizes only: one listing per folder;
``deep=True`` also hashes every byte, what ``status --verify`` and ``run --repair`` do)
and ``repair_plan`` says which shards to redo so that the run is whole again, exactly once:

- a damaged data file or statistics partial, or an unreadable commit record: that shard;
- a damaged consolidated statistics file: the shards its generation covers, and the
  generation record is withdrawn. Their partials were merged into it and deleted, so
  the generation cannot be rebuilt from them; redoing its shards rewrites each shard's
  files under the same names and commit records, so no shard is ever counted twice and
  the shards committed after it keep their partials.

Readers (``sql.views.connect``) refuse a damaged run with one line naming the damage;
``mixscope run --repair`` applies the plan and recomputes exactly those shards.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow.fs as pafs

from mixscope.store import manifest
from mixscope.store.layout import Layout
from mixscope.store.records import CommitRecord

_SHARD_FILE = re.compile(r"(\d+)\.json$")

#: bytes read per call while hashing: big files never sit in memory whole
CHUNK = 8 << 20
#: files hashed at once (I/O-bound on object stores; hashlib releases the GIL)
THREADS = 8


@dataclass(frozen=True)
class Damage:
    """One thing that is not as its record says: ``shard`` None for a generation file;
    ``file`` the damaged file (or record) relative to the root."""

    what: str
    shard: int | None = None
    generation: int | None = None
    file: str | None = None

    def __str__(self) -> str:
        where = (
            f"shard {self.shard}"
            if self.shard is not None
            else f"statistics generation {self.generation}"
        )
        return f"{where}: {self.what}"


@dataclass(frozen=True)
class Committed:
    """One file a record promises: its kind, where, size and sha256, and whose it is."""

    kind: str
    path: str  # absolute, under the layout's base
    bytes: int
    sha256: str
    shard: int | None
    generation: int | None


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


def sha256_of(layout: Layout, path: str, on_bytes: Callable[[int], None] | None = None) -> str:
    """The file's sha256, read in chunks; ``on_bytes(n)`` after each (progress)."""
    digest = hashlib.sha256()
    with layout.fs.open_input_stream(path) as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
            if on_bytes is not None:
                on_bytes(len(chunk))
    return digest.hexdigest()


def _size_damage(layout: Layout, sizes: _Sizes, c: Committed) -> str | None:
    """What is wrong with the file's presence or size, or None."""
    size, where = sizes.get(c.path), layout.relative(c.path)
    if size is None:
        return f"{c.kind} file missing ({where})"
    if c.bytes >= 0 and size != c.bytes:
        return f"{c.kind} file truncated or changed ({size} of {c.bytes} bytes: {where})"
    return None


def _content_damage(
    layout: Layout, c: Committed, on_bytes: Callable[[int], None] | None
) -> str | None:
    try:
        digest = sha256_of(layout, c.path, on_bytes)
    except FileNotFoundError:  # deleted since it was listed
        return f"{c.kind} file missing ({layout.relative(c.path)})"
    if digest != c.sha256:
        return f"{c.kind} file changed: sha256 differs from its record ({layout.relative(c.path)})"
    return None


@dataclass(frozen=True)
class Promised:
    """What a run's records say its files are: (shard or None, generation or None, kind →
    entry) per commit and for the latest consolidation, and the records that do not parse."""

    unreadable: tuple[Damage, ...]
    entries: tuple[tuple[int | None, int | None, dict[str, dict]], ...]

    def files(self, layout: Layout) -> list[Committed]:
        return [
            Committed(
                kind,
                layout.absolute(e["path"]),
                int(e.get("bytes", -1)),
                str(e.get("sha256") or ""),
                shard,
                generation,
            )
            for shard, generation, entries in self.entries
            for kind, e in entries.items()
        ]


def _expected(layout: Layout, run_id: str) -> Promised:
    from mixscope.store.generations import latest
    from mixscope.store.schema import STATS

    commits, unreadable = manifest.read_records(
        layout, layout.commits_dir(run_id), CommitRecord.from_json
    )
    bad = []
    for path in unreadable:
        m = _SHARD_FILE.search(path)
        shard = int(m.group(1)) if m else None
        bad.append(
            Damage("commit record unreadable (truncated?)", shard, None, layout.relative(path))
        )
    gen = latest(layout, run_id)
    entries: list[tuple[int | None, int | None, dict[str, dict]]] = []
    for shard_id, rec in sorted(commits.items()):
        files = {k: e.to_json() for k, e in rec.files.items()}
        if shard_id in gen.shards:  # its partials live on in the generation's files
            files = {k: e for k, e in files.items() if k not in STATS}
        entries.append((shard_id, None, files))
    entries.append((None, gen.generation, gen.files))
    return Promised(tuple(bad), tuple(entries))


def _damage(
    layout: Layout,
    expected: Promised,
    deep: bool,
    on_bytes: Callable[[int], None] | None = None,
) -> list[Damage]:
    sizes = _Sizes(layout)
    damage = list(expected.unreadable)
    whole = []  # present at their committed size: hashed when deep
    for c in expected.files(layout):
        what = _size_damage(layout, sizes, c)
        if what is not None:
            damage.append(Damage(what, c.shard, c.generation, layout.relative(c.path)))
        elif deep and c.sha256:
            whole.append(c)
    hashed = hash_files(layout, whole, on_bytes)
    for c, what in zip(whole, hashed, strict=True):
        if what is not None:
            damage.append(Damage(what, c.shard, c.generation, layout.relative(c.path)))
    return sorted(damage, key=lambda d: (d.shard is None, d.shard or 0))


def hash_files(
    layout: Layout, files: Iterable[Committed], on_bytes: Callable[[int], None] | None = None
) -> list[str | None]:
    """Per file, in order: what is wrong with its content (sha256), or None; ``THREADS``
    files at a time."""
    files = list(files)
    if len(files) <= 1:
        return [_content_damage(layout, c, on_bytes) for c in files]
    with ThreadPoolExecutor(min(THREADS, len(files))) as pool:
        return list(pool.map(lambda c: _content_damage(layout, c, on_bytes), files))


def promised(layout: Layout, run_id: str) -> Promised:
    """What the run's records promise: read them once, then ``check`` (a caller that
    shows progress sums the bytes first)."""
    return _expected(layout, run_id)


def check(
    layout: Layout,
    promise: Promised,
    *,
    deep: bool = False,
    on_bytes: Callable[[int], None] | None = None,
) -> list[Damage]:
    """``check_run`` of records already read."""
    return _damage(layout, promise, deep, on_bytes)


def check_run(
    layout: Layout,
    run_id: str,
    *,
    deep: bool = False,
    on_bytes: Callable[[int], None] | None = None,
) -> list[Damage]:
    """Every damage of the run's committed results, shard damage first, in shard order.
    ``deep``: also every byte against its sha256, ``on_bytes(n)`` as they are read."""
    return _damage(layout, _expected(layout, run_id), deep, on_bytes)


#: (root, run) → (the records' listing, what they said) of the last check in this process
_SEEN: dict[tuple[str, str], tuple[tuple, Promised]] = {}


def _records_listing(layout: Layout, run_id: str) -> tuple:
    """Name, size and mtime of every commit and consolidation record of the run: two
    folder listings, no file read. A commit, a consolidation, a record rewritten or
    truncated changes it."""
    out = []
    for folder in (layout.commits_dir(run_id), layout.consolidation_dir(run_id)):
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
    from mixscope.store.generations import latest

    redo = {d.shard for d in damage if d.shard is not None}
    withdraw = any(d.shard is None for d in damage)
    if withdraw:
        redo |= set(latest(layout, run_id).shards)
    return redo, withdraw


def repair(layout: Layout, run_id: str, damage: list[Damage]) -> set[int]:
    """Make the damaged shards pending again (the caller then runs them); the shards."""
    from mixscope.store.generations import latest

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
