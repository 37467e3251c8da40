"""Two ``checkpoints sync`` processes racing on one checkpoint folder, leases expiring."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from mixscope.store import manifest
from mixscope.store.layout import Layout
from test_checkpoints import save_checkpoint, sync_process


def _sync(train, probe, out) -> subprocess.Popen:
    return sync_process(
        train,
        probe,
        out,
        "checkpoints.lease_seconds=1.5",  # expires while the holder is stopped
        "checkpoints.backoff_seconds=0",
    )


@pytest.mark.scenario(
    "Two `checkpoints sync` processes racing, a lease expiring mid-run",
    injected="sync A is stopped (SIGSTOP) for 4 s while it analyses the first checkpoint, "
    "so its 1.5 s lease expires and sync B takes it over; then A continues",
    checked="B cannot start a second driver of A's run (run lock); every checkpoint's run "
    "has each shard committed once and one invocation; a third pass analyses nothing",
)
def test_checkpoint_syncs_race_with_an_expired_lease(tmp_path):
    train = tmp_path / "train"
    for k, step in enumerate((100, 200)):
        save_checkpoint(train / f"checkpoint-{step}", seed=k)
    probe = tmp_path / "probe.txt"
    probe.write_text("A short probe sentence.\nAnother probe sentence, a little longer.\n")
    out = tmp_path / "out"

    a = _sync(train, probe, out)
    runs = out / "_mixscope" / "runs"
    deadline = time.time() + 120
    while time.time() < deadline and not list(runs.glob("*/driver.lock")):
        time.sleep(0.02)
    assert list(runs.glob("*/driver.lock")), "sync A never started a run"
    a.send_signal(signal.SIGSTOP)
    try:
        time.sleep(4.0)  # A's lease (1.5 s) expires: it cannot renew while stopped
        b = _sync(train, probe, out)
        b_out, _ = b.communicate(timeout=300)
    finally:
        a.send_signal(signal.SIGCONT)
    a_out, _ = a.communicate(timeout=300)
    assert "is being run by" in b_out, b_out  # B took the lease, the run lock stopped it

    layout = Layout.open(str(out))
    run_ids = layout.list_dirs(layout.runs_dir())
    assert len(run_ids) == 2
    for run_id in run_ids:
        record = json.loads((runs / run_id / "run.json").read_text())
        assert len(record["invocations"]) == 1, (a_out, b_out, record["invocations"])
        commits = manifest.commits(layout, run_id)
        assert record["status"] == "complete" and len(commits) == record["shards_total"]
        assert {c.attempt for c in commits.values()} == {1}
    third = _sync(train, probe, out)
    third_out, _ = third.communicate(timeout=300)
    assert third.returncode == 0 and "analysing " not in third_out, third_out
