"""Disk full while writing: the job fails cleanly, nothing half-written is visible, and a
rerun with space completes. The output root is a small tmpfs (needs mount rights: root,
as in CI and this project's containers; skipped with the reason elsewhere)."""

from __future__ import annotations

import json
import subprocess

import pytest

from mixscope.errors import MixscopeError
from mixscope.runtime.driver import run_job
from mixscope.sql.views import connect
from mixscope.store import manifest
from mixscope.store.layout import Layout
from run_helpers import cli_args, content_hash, driver_process, job_spec


def _mount(mount, size: str):
    mount.mkdir(parents=True)
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
            capture_output=True,
            text=True,
        )
    except FileNotFoundError:
        pytest.skip("no mount command to create a small tmpfs")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def small_disk(tmp_path):
    yield from _mount(tmp_path / "disk", "160k")


def _resize(mount, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(mount)], check=True)


@pytest.mark.scenario(
    "Disk full while writing",
    injected="the output root is a 160 KiB tmpfs, too small for the job's results",
    checked="the job ends failed (ENOSPC named) without a traceback; no temporary or "
    "half-written file is left, queries see committed shards only; after the disk grows "
    "the rerun completes and equals a clean run",
)
def test_disk_full_then_rerun_with_space(small_disk, tiny_bert_dir, clean_run):
    out = small_disk / "out"
    spec = job_spec(tiny_bert_dir, out, **{"runtime.executor": "local"})
    try:
        summary = run_job(spec, show_progress=False)
        failed_with = " ".join(summary.errors.values())
        assert summary.status == "failed", summary
    except MixscopeError as exc:  # the driver's own record could not be written: also clean
        failed_with = str(exc)
    assert "no space left on device" in failed_with.lower() or "ENOSPC" in failed_with
    leftovers = [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []
    layout = Layout.open(str(out))
    (run_id,) = layout.list_dirs(layout.runs_dir())
    committed = manifest.commits(layout, run_id)
    plan = layout.read_json(layout.plan_path(run_id))["shards"]
    docs = {
        d
        for s in plan
        if s["shard_id"] in committed
        for d in range(s["first_doc"], s["first_doc"] + s["n_docs"])
    }
    rows = connect(str(out)).execute("SELECT DISTINCT doc_id FROM tokens").fetchall()
    seen = {r[0] for r in rows}
    assert seen == docs  # exactly the committed shards' documents, nothing half-written

    _resize(small_disk, "64m")
    again = run_job(spec, show_progress=False)
    assert again.status == "complete" and again.shards_skipped == len(committed)
    assert content_hash(str(out)) == clean_run[2]


#: tmpfs pages (4 KiB; each record is one page) that the driver's records get, and the
#: write that no longer fits: plan.json, driver.lock, the first run.json, then one commit
#: record per shard (8), the consolidation record, the final run.json (a second page while
#: it replaces the first)
DRIVER_WRITES = {
    "the first run record": (2, 0),
    "the third commit record": (5, 2),
    "the consolidation record": (11, 8),
    "the final run record": (12, 8),
}


@pytest.mark.scenario(
    "Disk full while the driver writes its own records",
    injected="the output root's `_mixscope/` (run record, plan, commit and consolidation "
    "records) is a tmpfs of a few 4 KiB pages, too small for the write in the test id; "
    "the data files have space",
    checked="`mixscope run` exits 1 with one line (no space left, nothing lost), no "
    "traceback; no temporary file is left, every record parses, exactly the commits that "
    "fitted are there and queries see only their documents; after the disk grows the rerun "
    "completes and equals a clean run",
)
@pytest.mark.parametrize("write", list(DRIVER_WRITES))
def test_disk_full_in_the_drivers_records(write, tmp_path, tiny_bert_dir, clean_run):
    pages, fitted = DRIVER_WRITES[write]
    out = tmp_path / "out"
    records = out / "_mixscope"
    mount = _mount(records, f"{4 * pages}k")
    next(mount)
    try:
        args = [*cli_args(tiny_bert_dir, out), "--set", "runtime.executor=local"]
        proc = driver_process(args, {})
        output = proc.communicate(timeout=300)[0].decode()
        assert proc.returncode == 1, output
        errors = [x for x in output.splitlines() if x.startswith("Error:")]
        assert errors == [
            f"Error: no space left on device under {out} (the driver's records could not be "
            "written); what was committed is intact: free space and rerun to resume"
        ], output
        assert "Traceback" not in output
        assert [p for p in out.rglob("*") if p.name.endswith(".tmp")] == []
        for path in records.rglob("*.json"):
            json.loads(path.read_text())  # whole: the old content or the new, never half
        layout = Layout.open(str(out))
        (run_id,) = layout.list_dirs(layout.runs_dir())
        committed = manifest.commits(layout, run_id)
        assert len(committed) == fitted
        if fitted:
            plan = layout.read_json(layout.plan_path(run_id))["shards"]
            docs = {
                d
                for sh in plan
                if sh["shard_id"] in committed
                for d in range(sh["first_doc"], sh["first_doc"] + sh["n_docs"])
            }
            rows = connect(str(out)).execute("SELECT DISTINCT doc_id FROM tokens").fetchall()
            assert {r[0] for r in rows} == docs

        _resize(records, "16m")
        again = driver_process(args, {})
        output = again.communicate(timeout=300)[0].decode()
        assert again.returncode == 0, output
        record = json.loads((records / "runs" / run_id / "run.json").read_text())
        assert record["status"] == "complete" and record["invocations"][-1]["done"] == 8 - fitted
        assert content_hash(str(out)) == clean_run[2]
    finally:
        next(mount, None)
