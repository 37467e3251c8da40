"""Two drivers at once on the same output: each shard analysed and committed once."""

from __future__ import annotations

import pytest

from mixscope.runtime.driver import prepare
from mixscope.runtime.run_lock import run_lock
from mixscope.store import manifest
from mixscope.store.layout import Layout
from run_helpers import cli_args, content_hash, driver_process, job_spec


@pytest.mark.scenario(
    "Two identical `run` commands started at the same moment on the same output",
    injected="two driver processes of the same job (in-process executor) started together",
    checked="both exit 0 or the second says the run is busy; 8 commit records; "
    "rows and statistics equal a clean run (nothing counted twice)",
)
def test_two_identical_runs_at_once(tiny_bert_dir, tmp_path, clean_run):
    out = tmp_path / "out"
    args = [*cli_args(tiny_bert_dir, out), "--set", "runtime.executor=local"]
    procs = [driver_process(args, {}) for _ in range(2)]
    outputs = []
    for p in procs:
        text, _ = p.communicate(timeout=600)
        outputs.append((p.returncode, text.decode()))
    for rc, text in outputs:
        assert rc == 0 or "is being run by" in text, text
    assert any(rc == 0 for rc, _ in outputs)
    layout = Layout.open(str(out))
    (run_id,) = layout.list_dirs(layout.runs_dir())
    assert sorted(manifest.commits(layout, run_id)) == list(range(8))
    assert content_hash(str(out)) == clean_run[2]


@pytest.mark.scenario(
    "A second driver while the run's lock is held",
    injected="the run lock held by another process (this test) while `mixscope run` starts",
    checked="the second driver exits 3 with one line naming the holder and commits "
    "nothing; once the holder exits, the same command completes the run",
)
def test_second_driver_is_refused_while_the_run_is_held(tiny_bert_dir, tmp_path, clean_run):
    out = tmp_path / "out"
    args = [*cli_args(tiny_bert_dir, out), "--set", "runtime.executor=local"]
    prep = prepare(job_spec(tiny_bert_dir, out, **{"runtime.executor": "local"}))
    with run_lock(prep.layout, prep.run_id):
        proc = driver_process(args, {})
        text, _ = proc.communicate(timeout=300)
    lines = text.decode().strip().splitlines()
    assert proc.returncode == 3  # README: exit codes (3: the run is busy)
    assert lines[-1].startswith(f"Error: run {prep.run_id} is being run by ")
    assert manifest.commits(prep.layout, prep.run_id) == {}
    proc = driver_process(args, {})
    text, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, text.decode()
    assert content_hash(str(out)) == clean_run[2]
