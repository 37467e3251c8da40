"""What interrupted work leaves behind in a run's folders, removed once the run is complete.

The commit protocol keeps every such file invisible (readers follow the records), but
nothing else removed them, so a run that lived through crashes kept them for good:

- temporary files (``.name.<hex>.tmp``, local roots) of a process killed between its
  write and its rename;
- statistics files no consolidation record names: those of a consolidation killed before
  its record (written under new names, never in force), and the previous generation's,
  when it was killed after its record but before deleting them;
- partials of shards the newest consolidation covers (killed among those deletions);
- data files no commit record names.

``leftovers`` lists them and ``sweep`` deletes them. The driver sweeps once a run is
complete, under the run lock and after its last consolidation: no writer of the run is
left, every shard is committed, and the newest consolidation covers them all, so whatever
no record names is no one's (the chaos run, benchmarks/chaos.py, checks that none is left).
"""

from __future__ import annotations

import pyarrow.fs as pafs

from mixscope.store import generations, manifest
from mixscope.store.layout import Layout
from mixscope.store.schema import STATS


def _files(layout: Layout, folder: str) -> list[str]:
    """Every file under ``folder`` (recursive, hidden ones included)."""
    selector = pafs.FileSelector(folder, recursive=True, allow_not_found=True)
    return [i.path for i in layout.fs.get_file_info(selector) if i.type == pafs.FileType.File]


def _temporary(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.startswith(".") and name.endswith(".tmp")


def leftovers(layout: Layout, run_id: str) -> list[str]:
    """The files of the run's data and statistics folders that no record names, and the
    temporary files of its record folder (absolute paths, sorted)."""
    gen = generations.latest(layout, run_id)
    named = {layout.absolute(entry["path"]) for entry in gen.files.values()}
    folders = {layout.stats_dir(kind, run_id) for kind in (*STATS, *gen.files)}
    for shard, rec in manifest.commits(layout, run_id).items():
        for entry in rec.files.values():
            path = layout.absolute(entry.path)
            if "/_partial/" in path:  # a statistics partial: named until it is merged
                folders.add(path.rsplit("/_partial/", 1)[0])
                if shard not in gen.shards:
                    named.add(path)
            else:
                named.add(path)
                folders.add(path.rsplit("/", 1)[0])
    found = {p for folder in folders for p in _files(layout, folder) if p not in named}
    found |= {p for p in _files(layout, layout.run_dir(run_id)) if _temporary(p)}
    return sorted(found)


def sweep(layout: Layout, run_id: str) -> list[str]:
    """Delete :func:`leftovers` (only when the run is complete: the caller's rule); the
    paths deleted."""
    found = leftovers(layout, run_id)
    for path in found:
        layout.delete(path)
    return found
