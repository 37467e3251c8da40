"""What ``mixscope status`` shows: per run, shards done / failed / pending, rows, throughput,
and the actor pool's last state.

A read-side view of the results root (the records of ``store/``), not execution: the CLI,
the results API and the report read it; nothing here runs a job.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from mixscope.errors import first_line
from mixscope.store import manifest
from mixscope.store import verify as verification
from mixscope.store.layout import Layout
from mixscope.store.runs import load_runs
from mixscope.store.verify import Damage, check_run

#: version of the ``mixscope status --json`` document (its keys are a contract)
STATUS_FORMAT = 1

#: a run's status row: its keys in order, each with its Arrow type. The one definition
#: that ``run_status`` rows follow (a key missing there fails) and that
#: ``mixscope.open(...).runs`` types its table with.
RUN_STATUS_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("name", pa.string()),
        ("model", pa.string()),
        ("step", pa.int64()),
        ("status", pa.string()),
        ("detail", pa.string()),
        ("sample_rate", pa.float64()),  # output.sample_rate with detail "sample", else null
        ("groups", pa.list_(pa.string())),  # the measure groups the run computes
        ("shards_total", pa.int64()),
        ("done", pa.int64()),
        ("failed", pa.int64()),
        ("pending", pa.int64()),
        ("rows", pa.int64()),
        ("tokens", pa.int64()),
        ("tokens_per_s", pa.int64()),
        ("errors", pa.map_(pa.int64(), pa.string())),  # JSON: shard as a string → first line
        (
            "damaged",
            pa.list_(
                pa.struct(
                    [
                        ("shard", pa.int64()),
                        ("generation", pa.int64()),
                        ("what", pa.string()),
                        ("file", pa.string()),
                    ]
                )
            ),
        ),
        ("bad_input", pa.map_(pa.string(), pa.int64())),
        ("pairs", pa.map_(pa.string(), pa.int64())),
        ("created_at", pa.string()),
        ("updated_at", pa.string()),
    ]
)


def run_status(
    root: str, run_ids: tuple[str, ...] = (), *, verify: bool = False, progress: bool = False
) -> list[dict[str, Any]]:
    """One JSON-ready row per run (the keys of ``status --json``), from the typed records;
    ``run_ids``: these only (default all).

    ``damaged`` compares every committed file's presence and size with its record (one
    listing per folder) and, with ``verify``, every byte with its sha256: the only check
    that sees a file changed in place (``store/verify.py``). ``progress``: a bar or lines
    on stderr while hashing (``runtime/progress.py``)."""
    layout = Layout.open(root)
    records = [r for r in load_runs(layout) if not run_ids or r.run_id in run_ids]
    damages = _verified(layout, [r.run_id for r in records], progress) if verify else {}
    out = []
    for rec in records:
        run_id = rec.run_id
        done = manifest.commits(layout, run_id)
        failed = {k: v for k, v in manifest.failures(layout, run_id).items() if k not in done}
        damage = damages[run_id] if verify else check_run(layout, run_id)
        total = rec.shards_total
        tokens = sum(c.tokens for c in done.values())
        busy = sum(c.seconds for c in done.values())
        model = rec.spec.get("model") or rec.model.get("source", "")
        row = {
            "run_id": run_id,
            "name": rec.name,
            "model": model,
            "step": rec.step,
            "status": rec.status,
            "detail": rec.detail,
            "sample_rate": (rec.options.get("output") or {}).get("sample_rate"),
            "groups": list(rec.groups),
            "shards_total": total,
            "done": len(done),
            "failed": len(failed),
            "pending": max(0, total - len(done) - len(failed)),
            "rows": sum(c.rows for c in done.values()),
            "tokens": tokens,
            # per busy worker-second
            "tokens_per_s": round(tokens / busy) if busy > 0 else 0,
            "errors": {str(k): first_line(v.error) for k, v in sorted(failed.items())},
            # committed results deleted, truncated or changed since (store/verify.py)
            "damaged": [
                {"shard": d.shard, "generation": d.generation, "what": d.what, "file": d.file}
                for d in damage
            ],
            # input records not analysed, per reason (corpus/readers.py)
            "bad_input": dict(rec.corpus.get("bad") or {}),
            "pairs": dict(rec.corpus.get("pairs") or {}),
            "created_at": rec.created_at,
            "updated_at": rec.updated_at,
        }
        out.append(
            {key: row[key] for key in RUN_STATUS_SCHEMA.names}
        )  # the declared keys, in order
    return out


def _verified(layout: Layout, run_ids: list[str], progress: bool) -> dict[str, list[Damage]]:
    """run → its damage, every committed byte hashed; the records are read first so that
    the progress knows the total."""
    from mixscope.runtime.progress import ByteProgress

    promised = {run_id: verification.promised(layout, run_id) for run_id in run_ids}
    total = sum(max(c.bytes, 0) for p in promised.values() for c in p.files(layout))
    bar = ByteProgress(total, f"verify {layout.root}", enabled=progress)
    try:
        return {
            run_id: verification.check(layout, p, deep=True, on_bytes=bar.read)
            for run_id, p in promised.items()
        }
    finally:
        bar.close()


def pair_counts(pairs: dict[str, int] | None) -> str:
    """``corpus.pairs`` of a run record (corpus/plan.py) in words; "" for a run without."""
    if not pairs:
        return ""
    return ", ".join(f"{int(pairs.get(k, 0)):,} {k}" for k in ("kept", "split", "skipped"))


def shard_status(
    root: str, run_id: str, damaged: dict[int, str] | None = None
) -> list[dict[str, Any]]:
    """One JSON-ready row per planned shard of a run: done / failed / pending / damaged.

    ``damaged`` (shard → what) spares a second verification when the caller has one."""
    from mixscope.corpus.plan import CorpusPlan
    from mixscope.errors import MixscopeError

    layout = Layout.open(root)
    path = layout.plan_path(run_id)
    stored = layout.read_json(path)
    if stored is None:
        raise MixscopeError(f"no run {run_id} under {root}")
    plan = CorpusPlan.from_dict(stored, where=layout.relative(path))
    done = manifest.commits(layout, run_id)
    failed = manifest.failures(layout, run_id)
    if damaged is None:
        damaged = {}
        for d in check_run(layout, run_id):
            if d.shard is not None:
                damaged.setdefault(d.shard, d.what)
    rows = []
    for s in plan.shards:
        sid = s.shard_id
        c, f = done.get(sid), failed.get(sid)
        state = "damaged" if sid in damaged else ("done" if c else ("failed" if f else "pending"))
        rows.append(
            {
                "shard": sid,
                "state": state,
                "docs": s.n_docs,
                "first_doc": s.first_doc,
                "rows": c.rows if c else None,
                "tokens": c.tokens if c else None,
                "seconds": c.seconds if c else None,
                "attempts": c.attempt if c else (f.attempts if f else None),
                "worker": c.worker if c else None,
                "error": damaged.get(sid) or (first_line(f.error) if f and not c else None),
            }
        )
    return rows


def status_document(
    root: str,
    run_ids: tuple[str, ...] = (),
    shards: bool = False,
    actors: bool = False,
    *,
    verify: bool = False,
    progress: bool = False,
) -> dict:
    """What ``status --json`` prints: ``{"format", "root", "verified", "runs": [...]}``, each
    run with its ``shards`` and its actor ``pool`` when asked (every key documented in
    docs/status.md); ``verify``: its ``damaged`` from every byte hashed (``run_status``).

    The pool is the run's last ``actors.json`` as the driver wrote it
    (``runtime/pool_status.py``), or None for a run without one (the local executor): the
    document carries what the ``--actors`` tables show, so a script never has to parse
    them."""
    runs = run_status(root, run_ids, verify=verify, progress=progress)
    for r in runs if shards else ():
        damaged: dict[int, str] = {}  # the run's own verification: no second pass
        for d in r["damaged"]:
            if d["shard"] is not None:
                damaged.setdefault(d["shard"], d["what"])
        r["shards"] = shard_status(root, r["run_id"], damaged)
    for r in runs if actors else ():
        r["pool"] = read_pool_status(root, r["run_id"])
    return {"format": STATUS_FORMAT, "root": root, "verified": verify, "runs": runs}


#: the run table's columns: (header, key of the status document)
RUN_COLUMNS = (
    ("run_id", "run_id"),
    ("name", "name"),
    ("model", "model"),
    ("step", "step"),
    ("status", "status"),
    ("groups", "groups"),
    ("detail", "detail"),
    ("done", "done"),
    ("failed", "failed"),
    ("pending", "pending"),
    ("rows", "rows"),
    ("tok/s", "tokens_per_s"),
)


def status_tables(doc: dict) -> list[str]:
    """The human form of the status document: a run table, then each run's remarks."""
    from mixscope.format import aligned_table

    runs = doc["runs"]
    cols = list(RUN_COLUMNS) + ([("pairs", "pairs")] if any(r["pairs"] for r in runs) else [])

    def cell(r: dict, key: str) -> Any:
        if key == "pairs":
            return pair_counts(r[key])
        if key == "groups":
            return ",".join(r[key])
        if key == "detail" and r["sample_rate"] is not None:  # what a sample keeps
            return f"{r[key]} {r['sample_rate']:g}"
        return "" if r[key] is None else r[key]

    lines = [
        aligned_table([h for h, _ in cols], [[cell(r, k) for _, k in cols] for r in runs], digits=0)
    ]
    for r in runs:
        for shard_id, error in r["errors"].items():
            lines.append(f"{r['run_id']} shard {shard_id}: {error}")
        if r["bad_input"]:
            bad = ", ".join(f"{k} {v:,}" for k, v in sorted(r["bad_input"].items()))
            lines.append(f"{r['run_id']} input not analysed: {bad}")
        for d in r["damaged"]:
            lines.append(f"{r['run_id']} DAMAGED {Damage(**d)} (mixscope run … --repair)")
        if "shards" in r:
            shards = r["shards"]
            lines.append(f"\nrun {r['run_id']}")
            scols = list(shards[0]) if shards else []
            rows = [["" if s[c] is None else s[c] for c in scols] for s in shards]
            lines.append(aligned_table(scols, rows, digits=2))
    return lines


def verify_summary(doc: dict) -> tuple[str, bool]:
    """(the verdict of ``status --verify`` in one line, whether anything is damaged): per
    run, each damaged shard and generation, and what redoes them."""
    parts = []
    for r in doc["runs"]:
        shards = sorted({d["shard"] for d in r["damaged"] if d["shard"] is not None})
        gens = sorted({d["generation"] for d in r["damaged"] if d["shard"] is None})
        named = [f"shard {s}" for s in shards] + [f"statistics generation {g}" for g in gens]
        if named:
            parts.append(f"run {r['run_id']}: {', '.join(named)}")
    runs = len(doc["runs"])
    if not parts:
        return f"verified {runs} run(s): every committed file matches its record", False
    return (
        f"damaged: {'; '.join(parts)}: `mixscope run JOB --repair` redoes exactly these "
        "(a generation: the shards it covers)",
        True,
    )


def read_pool_status(root: str, run_id: str) -> dict[str, Any] | None:
    """The last ``actors.json`` of a run, or None (a run of the local executor has none)."""
    layout = Layout.open(root)
    data = layout.read_json(layout.actors_path(run_id))
    return data if isinstance(data, dict) else None


def pool_tables(state: dict[str, Any]) -> list[tuple[list[str], list[list[Any]]]]:
    """``actors.json`` as (headers, rows) tables: actors, then nodes (``status --actors``)."""
    actor_cols = ["actor", "node", "state", "shard", "shards", "tokens", "tok/s", "start_s"]
    actor_cols += ["load_s", "error"]
    cut = {"node": 12, "error": 60}
    actors = [[str(a.get(c, ""))[: cut[c]] if c in cut else a.get(c, "") for c in actor_cols]
              for a in state.get("actors", [])]  # fmt: skip
    node_cols = ["node", "address", "alive", "actors", "actor_deaths", "lost"]
    nodes = [[n.get(c, "") for c in node_cols] for n in state.get("nodes", [])]
    return [(actor_cols, actors), (node_cols, nodes)]
