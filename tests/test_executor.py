"""The executor contract: every executor reports the same outcomes for the same shards.

One scenario through the in-process and the Ray executor (a real local Ray): three shards,
the middle one always fails, two retries allowed. Both must report each good shard done
once, the bad one retried twice and then failed with its reason, and equal results for
the good shards; neither commits anything (the driver does).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mixscope.config import load_spec
from mixscope.runtime.driver import prepare
from mixscope.runtime.executor import EXECUTORS, RetryPolicy, make_executor
from mixscope.store import manifest

DEMO = Path(__file__).parents[1] / "jobs" / "data" / "demo.txt"


def test_retry_policy_counts_attempts():
    policy = RetryPolicy(max_attempts=3)
    assert [policy.retries(a) for a in (1, 2, 3)] == [True, True, False]
    assert [policy.failure(7, a, "x").kind for a in (1, 2, 3)] == ["retry", "retry", "failed"]
    event = policy.failure(7, 3, "boom")
    assert (event.shard_id, event.attempt, event.error, event.result) == (7, 3, "boom", None)


def _outcomes(executor_name: str, model: str, out: Path) -> tuple[list, dict, dict]:
    spec = load_spec(
        None,
        {
            "model": model,
            "corpus.paths": [str(DEMO)],
            "corpus.limit": 9,
            "out": str(out),
            "runtime.executor": executor_name,
            "runtime.workers": 2,
            "runtime.docs_per_shard": 3,
            "runtime.batch_size": 4,
            "runtime.max_retries": 2,
            "analysis.max_length": 32,
        },
    )
    prep = prepare(spec)
    assert len(prep.plan.shards) == 3
    executor = make_executor(spec, prep.run_id, prep.max_length)
    try:
        events = list(executor.run(prep.plan.shards))
    finally:
        executor.close()
        executor.close()  # safe twice
    assert manifest.commits(prep.layout, prep.run_id) == {}  # executors never commit
    kinds = sorted((e.kind, e.shard_id, e.attempt) for e in events)
    errors = {(e.shard_id, e.attempt): e.error for e in events if e.kind != "done"}
    done = {
        e.shard_id: (e.result.docs, e.result.tokens, e.result.rows)
        for e in events
        if e.kind == "done"
    }
    return kinds, errors, done


def test_local_and_ray_executors_report_the_same_outcomes(
    ray_local, tiny_bert_dir, tmp_path, monkeypatch
):
    monkeypatch.setenv("MIXSCOPE_FAULTS", json.dumps({"fail": {"shard": 1}}))
    assert set(EXECUTORS) == {"local", "ray"}
    results = {name: _outcomes(name, tiny_bert_dir, tmp_path / name) for name in EXECUTORS}
    for kinds, errors, done in results.values():
        assert kinds == [
            ("done", 0, 1),
            ("done", 2, 1),
            ("failed", 1, 3),
            ("retry", 1, 1),
            ("retry", 1, 2),
        ]
        assert sorted(errors) == [(1, 1), (1, 2), (1, 3)]
        assert all("injected failure in shard 1" in e for e in errors.values())
        assert sorted(done) == [0, 2] and all(d[0] == 3 and d[1] > 0 for d in done.values())
    assert results["local"][2] == results["ray"][2]  # the same docs, tokens, rows per shard


def test_unknown_executor_is_a_one_line_spec_error(tiny_bert_dir, tmp_path):
    from mixscope.errors import MixscopeError

    with pytest.raises(MixscopeError, match=r"runtime\.executor: local\|ray"):
        load_spec(
            None,
            {
                "model": tiny_bert_dir,
                "corpus.paths": [str(DEMO)],
                "out": str(tmp_path),
                "runtime.executor": "spark",
            },
        )


#: a driver process: one job on an embedded Ray it starts, ``release`` as argv[4] says;
#: prints what the executor's Ray processes were and how they ended, as JSON
RELEASE_DRIVER = """
import atexit, json, os, sys
# registered first, so it runs last: how Ray's processes were stopped at exit
atexit.register(lambda: print(json.dumps({"at_exit": alive_when_stopped})))
from mixscope.config import load_spec
from mixscope.runtime import ray_executor
from mixscope.runtime.driver import run_job

seen = {}
close = ray_executor.RayExecutor.close

def spy(self):
    node = self.ray._private.worker._global_node
    seen.update({kind: [i.process for i in infos] for kind, infos in node.all_processes.items()})
    close(self)
    seen["initialized_after_close"] = self.ray.is_initialized()

ray_executor.RayExecutor.close = spy
from ray._private import node as ray_node

alive_when_stopped = {}  # process type -> alive when ray.shutdown came to it
stop = ray_node.Node._kill_process_type

def stop_spy(self, kind, *args, **kwargs):
    infos = self.all_processes.get(kind, [])
    alive_when_stopped[kind] = any(i.process.poll() is None for i in infos)
    return stop(self, kind, *args, **kwargs)

ray_node.Node._kill_process_type = stop_spy
spec = load_spec(None, {"model": sys.argv[1], "corpus.paths": [sys.argv[2]], "corpus.limit": 6,
                        "out": sys.argv[3], "runtime.workers": 1, "runtime.docs_per_shard": 3,
                        "analysis.max_length": 32})
summary = run_job(spec, show_progress=False, release=sys.argv[4] == "release")
print(json.dumps({
    "status": summary.status,
    "shards": summary.shards_done,
    "initialized_after_close": seen.pop("initialized_after_close"),
    "returncodes": {k: [p.poll() for p in procs] for k, procs in seen.items()},
    "alive_when_stopped": alive_when_stopped,
}))
"""


@pytest.mark.parametrize("release", ["release", "keep"])
def test_a_released_job_ends_the_ray_it_started(release, tiny_bert_dir, tmp_path):
    """``mixscope run`` (release): the embedded Ray the job started is shut down when the
    pool ends, every process of it gone, the monitor killed first (``end_ray``: Ray would
    wait a second on it); results whole. ``checkpoints sync`` and the API (keep): Ray
    stays for the next job of the process, and ends the same way at its exit."""
    out = subprocess.run(
        [sys.executable, "-c", RELEASE_DRIVER, tiny_bert_dir, str(DEMO), str(tmp_path), release],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "RAY_ADDRESS": ""},
    )
    *_, line, exit_line = out.stdout.strip().splitlines()
    report, at_exit = json.loads(line), json.loads(exit_line)["at_exit"]
    assert (report["status"], report["shards"]) == ("complete", 2)
    codes = report["returncodes"]
    assert {"raylet", "gcs_server", "monitor"} <= set(codes)
    if release == "release":
        assert report["initialized_after_close"] is False
        assert all(c is not None for cs in codes.values() for c in cs), codes
        stopped = report["alive_when_stopped"]
        assert stopped["raylet"] and stopped["gcs_server"]  # Ray stops these itself
        # the monitor was killed before: Ray does not wait on it after stopping the GCS
        assert stopped["monitor"] is False and codes["monitor"] == [-9]
        assert at_exit == stopped  # nothing left to stop at exit
    else:
        assert report["initialized_after_close"] is True
        assert all(c is None for cs in codes.values() for c in cs), codes
        # ended at the process's exit, the same way (ensure_ray registers end_ray)
        assert at_exit["raylet"] and at_exit["gcs_server"] and at_exit["monitor"] is False
