"""The order shards are handed out in: largest first, so the smallest ones form the tail.

A job's end waits for its last shard; when that shard is a large one started late, every
other actor sits idle meanwhile. Handing out the largest shards first (LPT, longest
processing time first) leaves the small shards — each file's partial last shard, short
documents — for the end, where they fill the gaps between actors finishing. The shard
stays the unit of retry and commit: only the order changes, never the plan.

A shard's size is the length of its byte range (the next shard's start in the same file,
or the file's size) where the file is local and uncompressed-addressed by byte; otherwise
its document count. Sizes only rank shards of one job, so the two never need to agree.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from mixscope.corpus.plan import Shard


def shard_sizes(shards: Sequence[Shard]) -> dict[int, float]:
    """shard_id → estimated work (bytes of its range, else documents × the mean bytes)."""
    by_file: dict[str, list[Shard]] = {}
    for s in shards:
        by_file.setdefault(s.file, []).append(s)
    sizes: dict[int, float] = {}
    for file, group in by_file.items():
        group = sorted(group, key=lambda s: s.start)
        try:
            end = float(os.path.getsize(file)) if "://" not in file else None
        except OSError:
            end = None
        by_count = file.endswith((".parquet", ".gz", ".zst", ".arrow")) or os.path.isdir(file)
        for k, s in enumerate(group):
            if by_count or end is None:
                sizes[s.shard_id] = float(s.n_docs)
                continue
            stop = float(group[k + 1].start) if k + 1 < len(group) else end
            sizes[s.shard_id] = max(stop - s.start, 1.0)
    return sizes


def order_shards(shards: Sequence[Shard], order: str = "largest_first") -> list[Shard]:
    """``shards`` in the order they are handed out (stable: ties keep the plan's order)."""
    if order == "plan":
        return list(shards)
    sizes = shard_sizes(shards)
    return sorted(shards, key=lambda s: -sizes[s.shard_id])
