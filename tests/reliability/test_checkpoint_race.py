"""Two ``checkpoints sync`` processes racing on one checkpoint folder, leases expiring.

The same race runs twice: with the run lock (the product) and with it switched off
(``MIXSCOPE_FAULTS={"disable": ["run_lock"]}``), to show that the lock is what keeps the
checkpoint analysed once: without it the same race analyses a shard twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from mixscope.runtime.faults import ENV as FAULTS
from mixscope.store import manifest
from mixscope.store.layout import Layout
from test_checkpoints import save_checkpoint, sync_process


def _sync(train, probe, out, faults: dict) -> subprocess.Popen:
    old = os.environ.get(FAULTS)
    os.environ[FAULTS] = json.dumps(faults)  # sync_process inherits this environment
    try:
        return sync_process(
            train,
            probe,
            out,
            "checkpoints.lease_seconds=1.5",  # expires while the holder is stopped
            "checkpoints.backoff_seconds=0",
        )
    finally:
        if old is None:
            del os.environ[FAULTS]
        else:
            os.environ[FAULTS] = old


def _wait_until_leases_expired(out, limit: float = 60.0) -> None:
    """Until every checkpoint lease record under ``out`` has expired (the stopped holder
    renews none): the event B's start depends on, not a fixed sleep."""
    folder = out / "_mixscope" / "checkpoints"
    deadline = time.time() + limit
    while time.time() < deadline:
        records = [json.loads(p.read_text()) for p in folder.rglob("*.lease")]
        if records and all(r["expires_at"] < time.time() for r in records):
            return
        time.sleep(0.05)
    raise AssertionError(f"the stopped sync's lease never expired: {folder}")


def _race(tmp_path, lock: bool) -> dict:
    """Sync A is stopped in the middle of its first shard (a trace file says the shard has
    started; a 2 s slow-down keeps it there) for 4 s, past its 1.5 s lease; sync B starts
    then and runs to its end; A continues. Returns what the test checks."""
    train = tmp_path / "train"
    for k, step in enumerate((100, 200)):
        save_checkpoint(train / f"checkpoint-{step}", seed=k)
    probe = tmp_path / "probe.txt"
    probe.write_text("A short probe sentence.\nAnother probe sentence, a little longer.\n")
    out, trace = tmp_path / "out", tmp_path / "trace"
    faults = {"trace": {"dir": str(trace)}, "slow": {"seconds": 2.0}}
    if not lock:
        faults["disable"] = ["run_lock"]

    a = _sync(train, probe, out, faults)
    deadline = time.time() + 120
    while time.time() < deadline and not (trace.exists() and any(trace.iterdir())):
        time.sleep(0.02)
    assert trace.exists() and any(trace.iterdir()), "sync A never started a shard"
    a.send_signal(signal.SIGSTOP)  # mid-shard: its commits are pending, its lease expires
    try:
        _wait_until_leases_expired(out)
        b = _sync(train, probe, out, faults)
        b_out, _ = b.communicate(timeout=300)
    finally:
        a.send_signal(signal.SIGCONT)
    a_out, _ = a.communicate(timeout=300)

    layout = Layout.open(str(out))
    run_ids = layout.list_dirs(layout.runs_dir())
    shards = 0
    for run_id in run_ids:
        record = json.loads((out / "_mixscope" / "runs" / run_id / "run.json").read_text())
        commits = manifest.commits(layout, run_id)
        assert record["status"] == "complete" and len(commits) == record["shards_total"]
        shards += record["shards_total"]
    third = _sync(train, probe, out, {})
    third_out = third.communicate(timeout=300)[0]
    assert third.returncode == 0, third_out
    return {
        "a": a_out,
        "b": b_out,
        "runs": len(run_ids),
        "shards": shards,  # of every checkpoint's run
        "analyses": len(list(trace.iterdir())),  # shard attempts started, both syncs
        "third": third_out,
    }


@pytest.mark.scenario(
    "Two `checkpoints sync` processes racing, a lease expiring mid-run",
    injected="sync A is stopped (SIGSTOP) for 4 s in the middle of its first shard, so its "
    "1.5 s lease expires and sync B takes it over; then A continues",
    checked="B cannot start a second driver of A's run (run lock); every checkpoint's run "
    "complete, each shard analysed (trace of shard starts) and committed exactly once; a "
    "third pass analyses nothing",
)
def test_checkpoint_syncs_race_with_an_expired_lease(tmp_path):
    got = _race(tmp_path, lock=True)
    assert "is being run by" in got["b"], got["b"]  # B took the lease, the run lock stopped it
    assert got["runs"] == 2
    assert got["analyses"] == got["shards"], (got["a"], got["b"])  # nothing analysed twice
    assert "analysing " not in got["third"], got["third"]


@pytest.mark.scenario(
    "The same race without the run lock (control)",
    injected="the race above with the run lock switched off (MIXSCOPE_FAULTS disable: run_lock)",
    checked="B's driver proceeds and the stopped checkpoint's shard is analysed twice: the "
    "run lock, not the lease or the timing, is what the scenario above relies on",
)
def test_without_the_run_lock_the_race_analyses_twice(tmp_path):
    got = _race(tmp_path, lock=False)
    assert "is being run by" not in got["b"]
    assert got["runs"] == 2
    assert got["analyses"] == got["shards"] + 1, (got["a"], got["b"])  # A's shard, again by B
