"""The chaos run's verdict: the job's results against a clean run of the same job, and what
the faults left behind (benchmarks/chaos.py).

- every statistics table (each kind's consolidated file, read back and sorted: the exact
  sums make them equal to the bit), the detail rows and the five statistics views
  (tests/run_helpers.py ``content_hash``), run.json's counts: equal to the clean run's;
- ``mixscope status --verify`` (the CLI, a process of its own) finds nothing;
- no shard committed twice: the bucket keeps every version of every object, so a commit
  record written more than once shows as more than one version;
- no orphan: every object under the run's data and statistics folders is named by a
  commit record or by the newest consolidation record, and no lease is left.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from common import tests_module


def run_id_of(root: str) -> str:
    from mixscope.store.layout import Layout

    layout = Layout.open(root)
    (run_id,) = layout.list_dirs(layout.runs_dir())
    return run_id


def stats_tables(root: str) -> dict[str, Any]:
    """kind → the run's statistics of that kind, one table sorted by every column."""
    from mixscope.store import generations
    from mixscope.store.layout import Layout

    layout = Layout.open(root)
    out = {}
    for kind, files in generations.sources(layout, [run_id_of(root)]).items():
        paths = files.consolidated + files.merging
        if len(paths) != 1:
            out[kind] = f"{len(paths)} files (not consolidated into one)"
            continue
        table = layout.read_table(paths[0])
        out[kind] = table.sort_by([(c, "ascending") for c in table.column_names])
    return out


def run_counts(root: str) -> dict[str, Any]:
    from mixscope.store.layout import Layout

    layout = Layout.open(root)
    rec = layout.read_json(layout.run_record_path(run_id_of(root)))
    keys = ("status", "shards_total", "shards_done", "shards_failed", "rows", "tokens")
    return {k: rec.get(k) for k in keys}


def versions(client: Any, bucket: str, prefix: str) -> tuple[Counter[str], set[str]]:
    """(key → how many versions were ever written, the keys that exist now)."""
    written: Counter[str] = Counter()
    live: set[str] = set()
    pages = client.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix)
    for page in pages:
        for v in page.get("Versions", []):
            written[v["Key"]] += 1
            if v["IsLatest"]:
                live.add(v["Key"])
    return written, live


def named_files(root: str) -> set[str]:
    """Every data and statistics file a record of the run names (relative to the root)."""
    from mixscope.store import generations, manifest
    from mixscope.store.layout import Layout

    layout = Layout.open(root)
    run_id = run_id_of(root)
    gen = generations.latest(layout, run_id)
    named = {entry["path"] for entry in gen.files.values()}
    for shard, rec in manifest.commits(layout, run_id).items():
        for entry in rec.files.values():
            if not entry.path.startswith("stats/") or shard not in gen.shards:
                named.add(entry.path)
    return named


def store_findings(root: str, client: Any) -> dict[str, Any]:
    """Commit records written more than once; objects no record names (orphans)."""
    bucket, _, prefix = root.removeprefix("s3://").partition("/")
    written, live = versions(client, bucket, prefix + "/")
    rel = {k.removeprefix(prefix + "/") for k in live}
    commits = {k: n for k, n in written.items() if "/commits/" in k}
    twice = sorted(k.rsplit("/", 1)[-1] for k, n in commits.items() if n > 1)
    named = named_files(root)
    data = {k for k in rel if not k.startswith("_mixscope/")}
    orphans = sorted(data - named) + sorted(k for k in rel if k.endswith((".lease", ".tmp")))
    missing = sorted(named - data)
    rewrites = sum(n - 1 for k, n in written.items() if not k.startswith(f"{prefix}/_mixscope"))
    return {
        "commit_records": len(commits),
        "committed_twice": twice,
        "orphans": orphans,
        "missing": missing,
        "data_rewrites": rewrites,
    }


def status_verify(root: str, env: dict[str, str]) -> tuple[int, str]:
    """``mixscope status ROOT --verify``: exit code and its last line."""
    out = subprocess.run(
        [sys.executable, "-m", "mixscope.cli", "status", root, "--verify", "--no-progress"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = (out.stdout + out.stderr).strip().splitlines()
    return out.returncode, lines[-1] if lines else ""


def verdict(clean: str, chaos: str, client: Any, env: dict[str, str]) -> dict[str, Any]:
    """Every check of the module docstring; ``ok`` when all hold."""
    content_hash = tests_module("run_helpers").content_hash
    a, b = stats_tables(clean), stats_tables(chaos)
    stats_equal = {k: (not isinstance(a[k], str)) and a[k].equals(b.get(k)) for k in a}
    hash_clean, hash_chaos = content_hash(clean), content_hash(chaos)
    counts_clean, counts_chaos = run_counts(clean), run_counts(chaos)
    rc, line = status_verify(chaos, env)
    found = store_findings(chaos, client)
    checks = {
        "statistics tables equal": all(stats_equal.values()) and set(a) == set(b),
        "detail rows and statistics views equal": hash_clean == hash_chaos,
        "run.json counts equal": counts_clean == counts_chaos,
        "job complete": counts_chaos["status"] == "complete",
        "status --verify finds nothing": rc == 0,
        "no shard committed twice": not found["committed_twice"],
        "every shard committed": found["commit_records"] == counts_clean["shards_total"],
        "no orphan file": not found["orphans"] and not found["missing"],
    }
    return {
        "ok": all(checks.values()),
        "checks": checks,
        "stats_equal": stats_equal,
        "rows": hash_chaos[0],
        "counts": counts_chaos,
        "verify": line,
        **found,
    }


def work_redone(trace: Path, root: str, t0: float) -> dict[str, float]:
    """Shard attempts that did not become the committed one, and their seconds: each lost
    attempt counts until the same shard's next attempt started, at most the shard's own
    time (its committed ``seconds``): an estimate from above of the work a fault threw
    away. ``t0``: the job's start (attempts of the trace before it are not this job's)."""
    from mixscope.store import manifest
    from mixscope.store.layout import Layout

    layout = Layout.open(root)
    commits = manifest.commits(layout, run_id_of(root))
    starts: dict[int, list[float]] = {}
    for f in trace.iterdir():
        _, shard, _ = f.name.split("-")
        t = f.stat().st_mtime
        if t >= t0:
            starts.setdefault(int(shard), []).append(t)
    lost, seconds = 0, 0.0
    for shard, times in starts.items():
        times.sort()
        own = commits[shard].seconds if shard in commits else 0.0
        for first, after in itertools.pairwise(times):
            lost += 1
            seconds += min(after - first, own)
    return {"attempts": sum(map(len, starts.values())), "lost": lost, "seconds": seconds}
