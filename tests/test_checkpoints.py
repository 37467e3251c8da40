"""Scheduled re-analysis: discovery, completeness, exactly-once across concurrent syncs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from mixscope.checkpoints.complete import incomplete_reason
from mixscope.checkpoints.discover import discover
from mixscope.checkpoints.sync import sync_pass
from mixscope.cli import main
from mixscope.config import load_spec
from mixscope.sql.named import run_query
from mixscope.sql.views import connect
from mixscope.store.lease import Lease

OLD = time.time() - 3600


def save_checkpoint(folder: Path, seed: int, sharded: bool = False, age: bool = True) -> Path:
    from tiny_models import build

    model, tok = build("bert", torch.float32, seed=seed)
    model.save_pretrained(folder, **({"max_shard_size": "300KB"} if sharded else {}))
    tok.save_pretrained(folder)
    if age:  # written long ago: past any quiet period
        for p in folder.rglob("*"):
            os.utime(p, (OLD, OLD))
    return folder


@pytest.fixture()
def training(tmp_path):
    train = tmp_path / "train"
    for k, step in enumerate((100, 200, 300)):
        save_checkpoint(train / f"checkpoint-{step}", seed=k, sharded=step == 200)
    probe = tmp_path / "probe.txt"
    probe.write_text("A short probe sentence.\nAnother probe sentence, a little longer.\n")
    return train, probe, tmp_path / "out"


def _spec(probe: Path, out: Path, **extra):
    return load_spec(
        None,
        {
            "name": "tiny-train",
            "corpus.paths": [str(probe)],
            "out": str(out),
            "analysis.max_length": 32,
            "runtime.workers": 1,
            "checkpoints.quiet_seconds": 30,
            **extra,
        },
    )


def _statuses(report):
    return [(o.step, o.status) for o in report.outcomes]


def test_sync_runs_each_new_checkpoint_once(ray_local, training):
    train, probe, out = training
    spec = _spec(probe, out)
    first = sync_pass(spec, source=str(train))
    assert _statuses(first) == [(100, "analysed"), (200, "analysed"), (300, "analysed")]
    steps = connect(str(out)).execute("SELECT step FROM runs ORDER BY step").fetchall()
    assert [s for (s,) in steps] == [100, 200, 300]

    again = sync_pass(spec, source=str(train))
    assert _statuses(again) == [(100, "done"), (200, "done"), (300, "done")]

    save_checkpoint(train / "checkpoint-400", seed=3)
    third = sync_pass(spec, source=str(train))
    assert _statuses(third) == [(100, "done"), (200, "done"), (300, "done"), (400, "analysed")]
    for run in (out / "_mixscope" / "runs").iterdir():
        assert len(json.loads((run / "run.json").read_text())["invocations"]) == 1

    # the trend: one row per step × layer × measure, ordered by step, equal to each run's profile
    con = connect(str(out))
    trend = run_query(con, "checkpoint_trend", {"model": "tiny-train"}).fetchall()
    assert len(trend) == 4 * 2 * 5
    assert [r[1] for r in trend] == sorted(r[1] for r in trend)
    profile = {(r[0], r[1], r[2]): r[3] for r in run_query(con, "layer_profile", {}).fetchall()}
    for _model, _step, run_id, layer, measure, mean, _n in trend:
        assert mean == pytest.approx(profile[(run_id, layer, measure)], abs=1e-12)


def test_half_written_checkpoints_wait(training):
    train, probe, out = training
    spec = _spec(probe, out, **{"runtime.executor": "local"})
    missing = save_checkpoint(train / "checkpoint-500", seed=5, sharded=True)
    shard = sorted(missing.glob("model-0000*.safetensors"))[-1]
    held = shard.read_bytes()
    shard.unlink()
    marker = save_checkpoint(train / "checkpoint-600", seed=6)
    (marker / "IN_PROGRESS").write_text("")
    os.utime(marker / "IN_PROGRESS", (OLD, OLD))
    growing = save_checkpoint(train / "checkpoint-700", seed=7, age=False)  # just written
    save_checkpoint(train / "tmp-checkpoint-800", seed=8)  # Trainer's temporary name

    report = sync_pass(spec, source=str(train))
    by_step = {o.step: o for o in report.outcomes}
    assert [by_step[s].status for s in (100, 200, 300)] == ["analysed"] * 3
    assert by_step[500].status == "incomplete" and "missing weight shard" in by_step[500].detail
    assert by_step[600].status == "incomplete" and "IN_PROGRESS" in by_step[600].detail
    assert by_step[700].status == "incomplete" and "quiet period" in by_step[700].detail
    assert 800 not in by_step

    shard.write_bytes(held)
    (marker / "IN_PROGRESS").unlink()
    for p in [*missing.rglob("*"), *growing.rglob("*")]:
        os.utime(p, (OLD, OLD))
    later = sync_pass(spec, source=str(train))
    assert {o.step: o.status for o in later.outcomes} == {
        100: "done",
        200: "done",
        300: "done",
        500: "analysed",
        600: "analysed",
        700: "analysed",
    }
    assert {o.step: o.status for o in sync_pass(spec, source=str(train)).outcomes}[700] == "done"


def sync_process(train: Path, probe: Path, out: Path, *sets: str) -> subprocess.Popen:
    """``mixscope checkpoints sync`` of the tiny training folder as its own process (text
    output captured); ``sets`` are extra ``--set key=value`` overrides."""
    args = [sys.executable, "-m", "mixscope.cli", "checkpoints", "sync"]
    args += ["--source", str(train), "--corpus", str(probe), "--out", str(out)]
    args += ["--max-length", "32", "--set", "runtime.executor=local", "--set", "name=tiny-train"]
    for item in sets:
        args += ["--set", item]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_two_syncs_at_once_analyse_each_checkpoint_once(training):
    train, probe, out = training
    procs = [sync_process(train, probe, out) for _ in range(2)]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    runs = list((out / "_mixscope" / "runs").iterdir())
    assert len(runs) == 3
    for run in runs:
        record = json.loads((run / "run.json").read_text())
        assert len(record["invocations"]) == 1, record["invocations"]  # analysed once
    analysed = sum(o.count("analysing ") for o in outputs)
    assert analysed == 3


def test_corrupt_checkpoint_fails_then_backs_off_then_gives_up(training):
    train, probe, out = training
    bad = save_checkpoint(train / "checkpoint-250", seed=9)
    (bad / "model.safetensors").write_bytes(b"not a safetensors file at all")
    os.utime(bad / "model.safetensors", (OLD, OLD))
    spec = _spec(
        probe,
        out,
        **{
            "runtime.executor": "local",
            "checkpoints.max_attempts": 2,
            "checkpoints.backoff_seconds": 3600,
        },
    )

    first = {o.step: o for o in sync_pass(spec, source=str(train)).outcomes}
    assert [first[s].status for s in (100, 200, 300)] == ["analysed"] * 3
    assert first[250].status == "failed" and first[250].detail  # a clear error, recorded
    assert {o.step: o.status for o in sync_pass(spec, source=str(train)).outcomes}[250] == "backoff"

    later = lambda: time.time() + 2 * 3600  # noqa: E731  after the 1 h backoff
    second = {o.step: o for o in sync_pass(spec, source=str(train), now=later).outcomes}[250]
    assert second.status == "failed"  # retried once more, failed again: 2 of 2 attempts
    gave_up = {o.step: o for o in sync_pass(spec, source=str(train), now=later).outcomes}[250]
    assert gave_up.status == "failed" and gave_up.detail.startswith("failed 2 times")
    listing = CliRunner().invoke(main, ["checkpoints", "list", str(out)])
    assert listing.exit_code == 0
    assert any(ln.split()[:3] == ["250", "failed", "2"] for ln in listing.output.splitlines())

    # fixed, and asked to retry: it runs again
    save_checkpoint(train / "checkpoint-250", seed=9)
    retried = sync_pass(spec, source=str(train), retry_failed=True)
    assert {o.step: o.status for o in retried.outcomes}[250] == "analysed"


def test_lease_is_exclusive_and_expires(tmp_path):
    a, b = Lease(tmp_path, "ck", ttl=60), Lease(tmp_path, "ck", ttl=60)
    assert a.acquire() and not b.acquire()
    a.release()
    assert b.acquire()
    b._stop.set()  # a crashed holder: the lease stays behind but stops being renewed
    record = json.loads(b.path.read_text())
    record["expires_at"] = time.time() - 1
    b.path.write_text(json.dumps(record))
    c = Lease(tmp_path, "ck", ttl=60)
    assert c.acquire() and c.holder()["owner"] == c.owner
    c.release()
    assert not c.path.exists()


def test_discovery_of_sources(tmp_path):
    folder = tmp_path / "models"
    save_checkpoint(folder / "run-a-step2000", seed=1)
    trained = save_checkpoint(folder / "final", seed=2)
    (trained / "trainer_state.json").write_text(json.dumps({"global_step": 9000}))
    assert [(c.step, Path(c.model).name) for c in discover(str(folder))] == [
        (2000, "run-a-step2000"),
        (9000, "final"),
    ]
    hub = discover("hub:EleutherAI/pythia-70m", ("step3000", "step1000"))
    assert [(c.model, c.revision, c.step) for c in hub] == [
        ("EleutherAI/pythia-70m", "step1000", 1000),
        ("EleutherAI/pythia-70m", "step3000", 3000),
    ]
    assert incomplete_reason(tmp_path, 0) == "no config.json"


def test_watch_stops_cleanly_on_sigterm(training):
    train, probe, out = training
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mixscope.cli",
            "checkpoints",
            "watch",
            "--source",
            str(train),
            "--corpus",
            str(probe),
            "--out",
            str(out),
            "--max-length",
            "32",
            "--interval",
            "600",
            "--set",
            "runtime.executor=local",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    runs = out / "_mixscope" / "runs"

    def complete() -> int:
        records = [json.loads(p.read_text()) for p in runs.glob("*/run.json")]
        return sum(r["status"] == "complete" for r in records)

    deadline = time.time() + 240
    while time.time() < deadline and complete() < 3 and proc.poll() is None:
        time.sleep(0.2)
    assert complete() == 3, "watch did not analyse the three checkpoints before its deadline"
    proc.send_signal(signal.SIGTERM)  # idle now: waiting out its 600 s interval
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, output
    assert "watch stopped" in output
    assert len(list(runs.iterdir())) == 3 and complete() == 3  # nothing left half-done


_STEAL = """
import sys, time
from mixscope.store.lease import Lease
lease = Lease(sys.argv[1], "ck", ttl=60)
print("stolen" if lease.acquire() else "refused", flush=True)
lease._stop.set()  # keep the record on disk after this process exits
"""


def test_lease_renewal_and_a_stealing_process_never_both_hold(tmp_path, monkeypatch):
    """A renewal that races a steal by another process: at most one holder.

    Holder A's lease has expired on disk (A was paused); its heartbeat renews. Exactly in
    the window of that renewal, a second *process* B sees the expired lease and steals it.
    Before renewals were guarded, A read its own record, B replaced it, and A's renewal then
    overwrote B's: both believed they held the checkpoint.
    """
    import subprocess
    import sys

    from mixscope.store import lease as L

    a = Lease(tmp_path, "ck", ttl=60)
    assert a.acquire()
    a._stop.set()
    a._thread.join()
    record = json.loads(a.path.read_text())
    record["expires_at"] = time.time() - 1  # paused past its expiry
    a.path.write_text(json.dumps(record))

    real_replace, outcome = L.os.replace, {}

    def replace_during_a_steal(src, dst):
        if "b" not in outcome:  # the other process runs in the renewal's window
            run = subprocess.run(
                [sys.executable, "-c", _STEAL, str(tmp_path)], capture_output=True, text=True
            )
            outcome["b"] = run.stdout.strip() or run.stderr.strip().splitlines()[-1]
        return real_replace(src, dst)

    monkeypatch.setattr(L.os, "replace", replace_during_a_steal)
    renewed = a.renew()
    monkeypatch.setattr(L.os, "replace", real_replace)
    owner = a.holder()["owner"]
    b_believes = outcome["b"] == "stolen"
    assert outcome["b"] in ("stolen", "refused")
    assert renewed != b_believes  # exactly one of them believes it holds the lease …
    assert renewed == (owner == a.owner) and a.held == renewed  # … and the file agrees


def test_sync_of_many_checkpoints_starts_ray_once(ray_local, training):
    """One sync pass over 3 checkpoints: one ray.init, and each checkpoint's rows equal
    that checkpoint analysed alone (in-process, its own root)."""
    from mixscope.runtime import ray_executor
    from mixscope.runtime.driver import run_job

    train, probe, out = training
    ray_local.shutdown()  # a fresh process: Ray not started yet
    try:
        inits = ray_executor.RAY_INITS
        report = sync_pass(_spec(probe, out), source=str(train))
        assert _statuses(report) == [(100, "analysed"), (200, "analysed"), (300, "analysed")]
        assert ray_executor.RAY_INITS - inits == 1
    finally:
        ray_local.shutdown()
        ray_local.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            logging_level="ERROR",
            log_to_driver=False,
        )
    synced = {
        (run, layer, measure): (mean, seq_mean, n)
        for run, layer, measure, mean, seq_mean, n in run_query(
            connect(str(out)), "layer_profile", {}
        ).fetchall()
    }
    assert len(synced) == 3 * 2 * 5
    alone: dict = {}
    for o in report.outcomes:
        root = out.parent / f"alone-{o.step}"
        spec = _spec(probe, root, **{"runtime.executor": "local"})
        spec = replace(spec, model=str(train / f"checkpoint-{o.step}"), step=o.step)
        summary = run_job(spec, show_progress=False)
        assert summary.status == "complete" and summary.run_id == o.run_id
        for run, layer, measure, mean, seq_mean, n in run_query(
            connect(str(root)), "layer_profile", {}
        ).fetchall():
            alone[(run, layer, measure)] = (mean, seq_mean, n)
    assert synced == alone  # bit-identical: same run ids, same means and counts


def test_lease_record_is_typed_and_a_damaged_one_is_expired(tmp_path):
    """The lease file holds a versioned LeaseRecord; one without its expiry (or not JSON) is
    damage and is stolen like an expired lease, never a KeyError."""
    from mixscope.store.lease import LEASE_FORMAT, LeaseRecord

    a = Lease(tmp_path, "ck", ttl=60)
    assert a.acquire()
    rec = a.holder_record()
    assert isinstance(rec, LeaseRecord) and rec.owner == a.owner and rec.format == LEASE_FORMAT
    assert json.loads(a.path.read_text())["format"] == LEASE_FORMAT
    a._stop.set()
    a._thread.join()
    a.path.write_text(json.dumps({"owner": "someone"}))  # no expires_at
    b = Lease(tmp_path, "ck", ttl=60)
    assert b.acquire() and b.holder()["owner"] == b.owner
    b.path.write_text("{trunc")
    assert b.holder() is None and not b.renew()
    b.release()
    old = LeaseRecord.from_json({"owner": "x", "expires_at": 1.0}, "old")  # before format
    assert old.format == 0 and old.expired


def test_checkpoint_state_is_a_typed_record_that_reads_old_files(tmp_path):
    """A state file as written before the record was typed (every key, nulls included)
    reads unchanged; a write keeps unknown keys; a damaged file reads as never tried."""
    from mixscope.checkpoints.state import CheckpointRecord, CheckpointState, checkpoint_id
    from mixscope.store.layout import Layout

    old = {
        "attempts": 2,
        "fingerprint": "abc",
        "key": "/train/checkpoint-100",
        "last_error": "ValueError: broken",
        "model": "/train/checkpoint-100",
        "next_attempt_at": 1700000300.0,
        "revision": None,
        "run_id": "r1",
        "status": "failed",
        "step": 100,
        "updated_at": 1700000000.5,
        "from_a_newer_writer": [1],
    }
    state = CheckpointState(str(tmp_path))
    path = Layout.open(str(tmp_path)).checkpoint_state_path(checkpoint_id(old["key"]))
    assert path == f"{tmp_path}/_mixscope/checkpoints/{checkpoint_id(old['key'])}.json"
    Path(path).parent.mkdir(parents=True)
    Path(path).write_text(json.dumps(old))
    rec = state.get(old["key"])
    assert (rec.status, rec.attempts, rec.step, rec.run_id) == ("failed", 2, 100, "r1")
    assert rec.revision is None and rec.next_attempt_at == 1700000300.0
    assert rec.to_dict() == {k: v for k, v in old.items() if v is not None}
    assert CheckpointRecord.from_dict(rec.to_dict()) == rec
    state.put(replace(rec, status="done"))
    again = json.loads(Path(path).read_text())
    assert again["status"] == "done" and again["from_a_newer_writer"] == [1]
    assert [r.key for r in state.all()] == [old["key"]]
    Path(path).write_text("{trunc")
    assert state.get(old["key"]) == CheckpointRecord(old["key"])
    assert state.all() == []
    assert state.get("never") == CheckpointRecord("never")
