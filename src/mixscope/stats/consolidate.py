"""Consolidation: a run's per-shard statistics merged into one table per kind, exactly once.

Generation ``g`` of a run is the record ``_mixscope/runs/<run>/stats/<g>.json``
(``store/generations.py``: the records, and which files readers take). Generation g+1
merges g's files with the partials of committed shards g does not cover, writes new files
under new names, then creates its record exclusively (the one commit point; a concurrent
consolidator that loses the race discards its files). Only then are the merged partials
and g's files deleted.

Readers take the newest record and add the partials of committed shards it does not
cover, so every committed shard is counted exactly once at any moment, also while a job
runs; a crash at any step leaves either the old or the new generation in force. A reader
that listed files just before a consolidation deleted them gets a clear error (query
again), never a partial answer. This module is the merge arithmetic: exact sums in
integer limbs, the same bits for any merge order.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mixscope.store import manifest
from mixscope.store.generations import Generation, latest
from mixscope.store.layout import Layout
from mixscope.store.schema import EXACT_LIMBS, EXACT_LO_BITS, EXACT_SCALE_BITS, STATS, StatsKind


def consolidate(layout: Layout, run_id: str, *, min_new: int = 1) -> Generation:
    """Merge the partials of committed, not yet consolidated shards into a new generation.

    Does nothing while fewer than ``min_new`` such shards exist. Idempotent: running it
    again (or after a crash) never counts a shard twice.
    """
    from mixscope.stats.accumulate import merge

    gen = latest(layout, run_id)
    commits = manifest.commits(layout, run_id)
    new = sorted(s for s in commits if s not in gen.shards)
    if len(new) < max(1, min_new):
        _delete_partials(layout, run_id, gen.shards)  # left by a crash after a record
        return gen
    nxt = Generation(gen.generation + 1, gen.shards | frozenset(new), {})
    from mixscope.store.writer import write_parquet

    for kind_name, base in STATS.items():
        parts = []
        if kind_name in gen.files:
            parts.append(layout.read_table(layout.absolute(gen.files[kind_name]["path"])))
        for s in new:
            if kind_name in commits[s].files:
                parts.append(layout.read_table(layout.absolute(commits[s].files[kind_name].path)))
        if not parts:
            continue
        kind = base.for_columns(parts[0].column_names)  # the run's measures, as stored
        merged = exact(kind, merge(kind, [with_exact(kind, p) for p in parts]))
        path = layout.generation_file(kind_name, run_id, nxt.generation)
        nxt.files[kind_name] = write_parquet(layout, path, merged, stats=True)
    record = layout.generation_record(run_id, nxt.generation)
    if not layout.write_json_exclusive(record, nxt.to_dict()):
        for entry in nxt.files.values():  # another consolidator made this generation
            layout.delete(layout.absolute(entry["path"]))
        return latest(layout, run_id)
    _delete_partials(layout, run_id, nxt.shards)
    for entry in gen.files.values():
        layout.delete(layout.absolute(entry["path"]))
    return nxt


def _limbs(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """round(s · 2^70) as (q >> 50, q mod 2^50), computed exactly in float64 (s >= 0)."""
    scaled = s * 2.0 ** (EXACT_SCALE_BITS - EXACT_LO_BITS)  # exact: a power of two
    hi = np.floor(scaled)
    lo = np.rint((scaled - hi) * 2.0**EXACT_LO_BITS)  # both steps exact but the rounding
    return hi.astype(np.int64), lo.astype(np.int64)


def with_exact(kind: StatsKind, table: pa.Table) -> pa.Table:
    """A shard's table, its singleton NULLs restored (``stats/singletons.py``), with the
    exact limbs of its float sums (consolidated ones have them)."""
    from mixscope.stats.singletons import restore

    table = restore(kind, table)
    for v in kind.exact_columns:
        if v + EXACT_LIMBS[0] not in table.column_names:
            hi, lo = _limbs(table[v].to_numpy())
            table = table.append_column(v + EXACT_LIMBS[0], pa.array(hi))
            table = table.append_column(v + EXACT_LIMBS[1], pa.array(lo))
    return table.select(kind.consolidated_schema.names).cast(kind.consolidated_schema)


def exact(kind: StatsKind, table: pa.Table) -> pa.Table:
    """Carries normalized, each float sum recomputed from its limbs: the same bits for any
    merge order."""
    names = table.column_names
    for v in kind.exact_columns:
        hi = table[v + EXACT_LIMBS[0]].to_numpy()
        lo = table[v + EXACT_LIMBS[1]].to_numpy()
        hi = hi + (lo >> EXACT_LO_BITS)
        lo = lo & ((1 << EXACT_LO_BITS) - 1)
        value = hi * 2.0 ** -(EXACT_SCALE_BITS - EXACT_LO_BITS) + lo * 2.0**-EXACT_SCALE_BITS
        table = table.set_column(names.index(v), v, pa.array(value))
        table = table.set_column(names.index(v + EXACT_LIMBS[0]), v + EXACT_LIMBS[0], pa.array(hi))
        table = table.set_column(names.index(v + EXACT_LIMBS[1]), v + EXACT_LIMBS[1], pa.array(lo))
    return table


def _delete_partials(layout: Layout, run_id: str, shards: frozenset[int]) -> None:
    """Delete the partials of ``shards`` that still exist (one listing per kind)."""
    for kind in STATS:
        for path in layout.list_files(f"{layout.stats_dir(kind, run_id)}/_partial", ".parquet"):
            name = path.rsplit("/", 1)[-1]
            if name.startswith("part-") and int(name[5:-8]) in shards:
                layout.delete(path)
