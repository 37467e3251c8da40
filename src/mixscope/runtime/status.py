"""What ``mixscope status`` shows: per run, shards done / failed / pending, rows, throughput."""

from __future__ import annotations

from typing import Any

from mixscope.errors import first_line
from mixscope.store import manifest
from mixscope.store.layout import Layout
from mixscope.store.runs import list_runs
from mixscope.store.verify import check_run


def run_status(root: str) -> list[dict[str, Any]]:
    layout = Layout.open(root)
    out = []
    for rec in list_runs(layout):
        run_id = rec["run_id"]
        done = manifest.commits(layout, run_id)
        failed = {k: v for k, v in manifest.failures(layout, run_id).items() if k not in done}
        damage = check_run(layout, run_id)
        total = int(rec.get("shards_total") or 0)
        tokens = sum(int(c.get("tokens", 0)) for c in done.values())
        busy = sum(float(c.get("seconds", 0)) for c in done.values())
        model = (rec.get("spec") or {}).get("model") or (rec.get("model") or {}).get("source", "")
        out.append(
            {
                "run_id": run_id,
                "name": rec.get("name") or "",
                "model": model,
                "step": "" if rec.get("step") is None else rec["step"],
                "status": rec.get("status") or "",
                "detail": ((rec.get("options") or {}).get("output") or {}).get("detail", "full"),
                "done": len(done),
                "failed": len(failed),
                "pending": max(0, total - len(done) - len(failed)),
                "rows": sum(int(c.get("rows", 0)) for c in done.values()),
                "tok/s": round(tokens / busy) if busy > 0 else 0,  # per busy worker-second
                "errors": {k: first_line(v.get("error")) for k, v in failed.items()},
                # committed results deleted, truncated or changed since (store/verify.py)
                "damaged": [str(d) for d in damage],
                # input records not analysed, per reason (corpus/readers.py)
                "bad_input": dict((rec.get("corpus") or {}).get("bad") or {}),
                "pairs": pair_counts((rec.get("corpus") or {}).get("pairs")),
            }
        )
    return out


def pair_counts(pairs: dict[str, int] | None) -> str:
    """``corpus.pairs`` of a run record (corpus/plan.py) in words; "" for a run without."""
    if not pairs:
        return ""
    return ", ".join(f"{int(pairs.get(k, 0)):,} {k}" for k in ("kept", "split", "skipped"))


def shard_status(root: str, run_id: str) -> list[dict[str, Any]]:
    """One row per planned shard of a run: done / failed / pending, with its numbers."""
    layout = Layout.open(root)
    plan = layout.read_json(f"{layout.run_dir(run_id)}/plan.json")
    if plan is None:
        from mixscope.errors import MixscopeError

        raise MixscopeError(f"no run {run_id} under {root}")
    done = manifest.commits(layout, run_id)
    failed = manifest.failures(layout, run_id)
    damaged: dict[int, str] = {}
    for d in check_run(layout, run_id):
        if d.shard is not None:
            damaged.setdefault(d.shard, d.what)
    rows = []
    for s in plan["shards"]:
        sid = s["shard_id"]
        c, f = done.get(sid), failed.get(sid)
        rows.append(
            {
                "shard": sid,
                "state": "damaged"
                if sid in damaged
                else ("done" if c else ("failed" if f else "pending")),
                "docs": s["n_docs"],
                "first_doc": s["first_doc"],
                "rows": c["rows"] if c else "",
                "tokens": c["tokens"] if c else "",
                "seconds": c["seconds"] if c else "",
                "attempts": c["attempt"] if c else (f["attempts"] if f else ""),
                "worker": f"{c['host']}:{c['pid']}" if c else "",
                "error": damaged.get(sid) or (first_line(f.get("error")) if f and not c else ""),
            }
        )
    return rows
