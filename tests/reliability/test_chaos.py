"""Chaos under load, the short schedule (issue 41): ``benchmarks/chaos.py`` as CI runs it.

One job on a real three-node Ray cluster (``ray start`` nodes on loopback) writing to a
versioned moto S3 bucket, while a seeded schedule injects one fault of each kind at random
moments: an actor SIGKILLed, a worker node lost and restarted, the driver SIGKILLed and the
job resumed, the driver dying inside a consolidation, the S3 endpoint stopped and started.
The benchmark judges the job against a clean run of the same job; this test reads its
figures and asserts each one (the full schedule, 20 of each kind, is run by hand:
``python benchmarks/chaos.py --schedule full --save``; docs/reliability.md shows its
figures).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
#: the kinds of fault (benchmarks/chaos_faults.py KINDS)
KINDS = ("actor_kill", "node_kill", "driver_kill", "consolidation_kill", "store_outage")


@pytest.mark.scenario(
    "Chaos under load (short schedule)",
    injected="one fault of each kind at a seeded random moment of one job on 3 Ray nodes "
    "and an S3 root: actor SIGKILL, node lost and restarted, driver SIGKILL, driver killed "
    "inside a consolidation, S3 endpoint outage",
    checked="every fault injected and survived; statistics tables, detail rows and run.json "
    "counts equal a clean run's; status --verify clean; no commit record written twice; "
    "no orphan file; no driver failed on its own",
)
def test_a_job_survives_one_fault_of_each_kind(tmp_path):
    out = tmp_path / "chaos.json"
    proc = subprocess.run(
        [sys.executable, "chaos.py", "--schedule", "short", "--json", str(out)],
        cwd=BENCHMARKS,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    res = json.loads(out.read_text())
    v = res["verdict"]
    assert v["ok"] and all(v["checks"].values()), v
    assert v["committed_twice"] == [] and v["orphans"] == [] and v["missing"] == []
    assert v["commit_records"] == res["shards"] == v["counts"]["shards_done"]
    assert v["counts"]["status"] == "complete" and v["counts"]["shards_failed"] == 0
    assert res["failures"] == []
    for kind in KINDS:
        mine = [f for f in res["faults"] if f["kind"] == kind]
        assert len(mine) == 1 and mine[0]["injected_at"] is not None, (kind, res["log"])
        assert mine[0]["survived"], (kind, res["log"])
    assert res["drivers"] >= 3  # the first, the one after the kill, the one after the consolidation
    assert res["redone"]["attempts"] >= res["shards"]
