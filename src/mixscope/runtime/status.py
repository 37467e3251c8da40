"""What ``mixscope status`` shows: per run, shards done / failed / pending, rows, throughput."""

from __future__ import annotations

from typing import Any

from mixscope.store import manifest
from mixscope.store.layout import Layout
from mixscope.store.runs import list_runs


def run_status(root: str) -> list[dict[str, Any]]:
    layout = Layout.open(root)
    out = []
    for rec in list_runs(layout):
        run_id = rec["run_id"]
        done = manifest.commits(layout, run_id)
        failed = {k: v for k, v in manifest.failures(layout, run_id).items() if k not in done}
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
                "done": len(done),
                "failed": len(failed),
                "pending": max(0, total - len(done) - len(failed)),
                "rows": sum(int(c.get("rows", 0)) for c in done.values()),
                "tok/s": round(tokens / busy) if busy > 0 else 0,  # per busy worker-second
                "errors": {k: (v.get("error") or "").splitlines()[0] for k, v in failed.items()},
            }
        )
    return out
