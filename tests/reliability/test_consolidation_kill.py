"""A driver killed in the middle of a consolidation, then the job resumed.

A consolidation writes the next generation's statistics files under new names, creates its
record (the commit point), then deletes the merged partials and the previous generation's
files (stats/consolidate.py). Killed before the record, the new files are in force for no
one; killed after it, the old generation's files are. Either way readers stay exact, but
until issue 41 the files stayed for good: the complete run now sweeps what no record names
(store/sweep.py). The kill is ``MIXSCOPE_FAULTS`` ``die_in_consolidation`` (the driver's
``os._exit`` at the k-th write or delete of the merge), the driver a process of its own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from mixscope.cli import main
from mixscope.runtime.driver import run_job
from mixscope.store import generations, sweep
from mixscope.store.layout import Layout
from run_helpers import cli_args, content_hash, driver_process, job_spec


def _drive(model: str, out: Path, faults: dict) -> int:
    args = [*cli_args(model, out), "--set", "runtime.executor=local"]
    proc = driver_process(args, {"MIXSCOPE_FAULTS": json.dumps(faults)})
    proc.wait(timeout=300)
    return proc.returncode


@pytest.mark.scenario(
    "SIGKILL of the driver inside a consolidation",
    injected="run 1 leaves shard 1 failed (generation 1 covers the other 7); run 2 computes "
    "it and its driver exits (137) at the step in the test id of generation 2: among its new "
    "files, or after its record among the deletions of generation 1's files",
    checked="the files the kill left are no record's; the resumed run completes, deletes "
    "exactly them, equals a clean run, and status --verify finds nothing",
)
@pytest.mark.parametrize(
    ("step", "before"),
    [(3, "write"), (18, "delete")],
    ids=["before the record", "after the record"],
)
def test_consolidation_killed_then_resumed_leaves_nothing(
    tiny_bert_dir, tmp_path, clean_run, step, before
):
    out = tmp_path / "out"
    assert _drive(tiny_bert_dir, out, {"fail": {"shard": 1}}) == 1  # shard 1 failed
    layout = Layout.open(str(out))
    (run_id,) = layout.list_dirs(layout.runs_dir())
    first = generations.latest(layout, run_id)
    assert first.generation == 1 and 1 not in first.shards and len(first.shards) == 7
    trigger = tmp_path / "trigger"
    trigger.write_text(str(step))
    assert _drive(tiny_bert_dir, out, {"die_in_consolidation": {"trigger": str(trigger)}}) == 137
    fired = (tmp_path / "trigger.fired").read_text()
    assert fired.startswith(before), fired
    left = sweep.leftovers(layout, run_id)
    in_force = generations.latest(layout, run_id)
    if before == "write":  # generation 2 never took effect: its files are no one's
        assert in_force.generation == 1
        assert left and all("/gen-000002-" in p for p in left), left
    else:  # generation 2 in force: generation 1's files not all deleted yet
        assert in_force.generation == 2
        assert left and all("/gen-000001-" in p for p in left), left
    summary = run_job(job_spec(tiny_bert_dir, out), show_progress=False)
    assert summary.status == "complete"
    assert sweep.leftovers(layout, run_id) == []
    assert not [p for p in left if Path(p).exists()]
    assert not list(out.rglob("*.tmp"))
    assert content_hash(str(out)) == clean_run[2]
    verified = CliRunner().invoke(main, ["status", str(out), "--verify", "--no-progress"])
    assert verified.exit_code == 0, verified.output
