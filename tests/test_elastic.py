"""Elastic execution on a real two-node Ray cluster on this machine (no mocks).

A head with one CPU holds one actor; the job asks for two (``runtime.max_workers=2``). A
second node (one CPU, its own ``node2`` resource) joins while the job runs: the pool must
put an actor there, and the job must end with exactly the rows and statistics of a clean
in-process run. Then the same with the second node lost (all its processes killed) while its
actor works on a shard: the shard is retried on the head, nothing is committed twice, same result.

Each test has its own cluster (``tests/ray_cluster.py``: own ports and temp dir, stopped in
a finalizer, never ``ray stop``) and runs the job as a separate driver process, so the
session Ray of other tests is untouched. Shards are slowed (``MIXSCOPE_FAULTS`` "slow", a
sleep: results unchanged) so the job is still running when the cluster changes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ray_cluster import LocalCluster, driver_env
from run_helpers import content_hash

SHARDS = 14
SLOW = 1.5  # seconds per shard at least


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("elastic") / "docs.txt"
    words = [
        "the",
        "cat",
        "sat",
        "on",
        "a",
        "mat",
        "while",
        "dogs",
        "ran",
        "after",
        "red",
        "balls",
        "in",
        "the",
        "park",
    ]
    lines = [" ".join(words[(i + k) % len(words)] for k in range(5 + i % 9)) for i in range(28)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _args(model: str, corpus: Path, out: Path) -> list[str]:
    return [
        "--model", model, "--corpus", str(corpus), "--out", str(out),
        "--batch-size", "4", "--max-length", "32", "--detail", "full",
        "--set", "runtime.docs_per_shard=2", "--set", "runtime.max_retries=2",
    ]  # fmt: skip


@pytest.fixture(scope="module")
def clean(tiny_bert_dir, corpus, tmp_path_factory) -> tuple[int, str]:
    """The content hash of the same job run in-process (no Ray at all)."""
    out = tmp_path_factory.mktemp("clean")
    from mixscope.config import spec_from_flags
    from mixscope.runtime.driver import run_job

    spec = spec_from_flags(
        None,
        ["runtime.docs_per_shard=2", "runtime.executor=local", "output.detail=full"],
        {
            "model": tiny_bert_dir,
            "corpus.paths": [str(corpus)],
            "out": str(out),
            "runtime.batch_size": 4,
            "analysis.max_length": 32,
        },
    )
    summary = run_job(spec, show_progress=False)
    assert summary.status == "complete" and summary.shards_total == SHARDS
    return content_hash(str(out))


@pytest.fixture
def cluster():
    c = LocalCluster()
    yield c
    c.shutdown()


def _driver(
    cluster: LocalCluster, args: list[str], log: Path, faults: dict | None = None
) -> subprocess.Popen:
    env = driver_env()  # Ray never sends its token to an explicit address unless told
    env["MIXSCOPE_FAULTS"] = json.dumps({"slow": {"seconds": SLOW}, **(faults or {})})
    with log.open("wb") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from mixscope.cli import main; main()",
                "run",
                *args,
                "--address",
                cluster.address,
                "--set",
                "runtime.max_workers=2",
                "--no-progress",
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _actors(out: Path) -> dict:
    files = list(out.glob("_mixscope/runs/*/actors.json"))
    return json.loads(files[0].read_text()) if files else {}


def _wait(proc: subprocess.Popen, log: Path, cond, what: str, timeout: float = 120.0) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the job ended before {what}:\n{log.read_text()[-3000:]}")
        state = cond()
        if state:
            return state
        time.sleep(0.3)
    pytest.fail(f"no {what} after {timeout}s:\n{log.read_text()[-3000:]}")


def _node2(state: dict) -> str | None:
    return next((n["node"] for n in state.get("nodes", []) if "node2" in n["resources"]), None)


def _busy_on(state: dict, node: str | None) -> bool:
    return any(a["node"] == node and a["state"] == "busy" for a in state.get("actors", []))


def _finish(proc: subprocess.Popen, log: Path, timeout: float = 150.0) -> str:
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"the job did not finish:\n{log.read_text()[-3000:]}")
    text = log.read_text()
    assert proc.returncode == 0, text[-3000:]
    return text


def _held_head(gate: Path) -> dict:
    """The head's shard attempts wait until ``gate`` exists (``MIXSCOPE_FAULTS`` "hold"; its
    processes carry NODE_TAG=head): the head alone cannot end the job before what the test
    waits for on node2 has happened, however slowly node2 and its actors start."""
    return {"hold": {"until": str(gate), "env": "NODE_TAG", "value": "head"}}


def _start_job(cluster, tiny_bert_dir, corpus, tmp_path, faults: dict):
    cluster.start_head(num_cpus=1, env={"NODE_TAG": "head"})
    out, log = tmp_path / "out", tmp_path / "driver.log"
    proc = _driver(cluster, _args(tiny_bert_dir, corpus, out), log, faults)
    # the head's one actor works on a shard, the demand for a second one is stated
    state = _wait(
        proc,
        log,
        lambda: (s := _actors(out)) and any(a["state"] == "busy" for a in s["actors"]) and s,
        "busy actor on the head",
    )
    assert len({a["node"] for a in state["actors"]}) == 1
    return proc, out, log


def test_an_actor_joins_with_the_second_node(cluster, tiny_bert_dir, corpus, clean, tmp_path):
    gate = tmp_path / "go"
    proc, out, log = _start_job(cluster, tiny_bert_dir, corpus, tmp_path, _held_head(gate))
    assert _actors(out)["requested_bundles"] == 2  # asked the autoscaler for both
    cluster.add_node("n2", num_cpus=1, resources='{"node2": 1}')
    # the head goes on once node2's actor holds a shard: unheld, the head's 14 slowed shards
    # could all be done before node2 and its actor were up (seen: node2 got 2 of 14)
    _wait(proc, log, lambda: _busy_on(s := _actors(out), _node2(s)), "busy actor on node2")
    gate.touch()
    _finish(proc, log)
    state = _actors(out)
    node2 = _node2(state)
    assert node2 is not None, state
    on2 = [a for a in state["actors"] if a["node"] == node2]
    assert on2 and sum(a["shards"] for a in on2) >= 1, state
    assert sum(a["shards"] for a in state["actors"]) == SHARDS  # each shard done once
    assert state["requested_bundles"] == 0  # demand released
    assert state["lost_nodes"] == []
    assert content_hash(str(out)) == clean
    from click.testing import CliRunner

    from mixscope.cli import main

    shown = CliRunner().invoke(main, ["status", str(out), "--actors"])
    assert shown.exit_code == 0, shown.output
    assert node2[:12] in shown.output and "tok/s" in shown.output


def test_losing_the_second_node_completes_on_the_head(
    cluster, tiny_bert_dir, corpus, clean, tmp_path
):
    # both nodes up before the job (joining mid-job is the test above); the head held until
    # node2 is lost, so node2's actor still holds shards when it goes (busy is read from
    # actors.json, up to 2 s old: unheld, a late actor could be done by then)
    cluster.start_head(num_cpus=1, env={"NODE_TAG": "head"})
    n2 = cluster.add_node("n2", num_cpus=1, resources='{"node2": 1}')
    cluster.wait_for_nodes(2)
    out, log, gate = tmp_path / "out", tmp_path / "driver.log", tmp_path / "go"
    proc = _driver(cluster, _args(tiny_bert_dir, corpus, out), log, _held_head(gate))
    _wait(proc, log, lambda: _busy_on(s := _actors(out), _node2(s)), "busy actor on node2")
    cluster.lose_node(n2)
    gate.touch()
    text = _finish(proc, log)
    state = _actors(out)
    node2 = _node2(state)
    # its actor died with it (the cluster itself may take ~15 s more to call the node dead)
    assert any(a["node"] == node2 and a["state"] == "dead" for a in state["actors"]), state
    entry = next(n for n in state["nodes"] if n["node"] == node2)
    assert entry["actor_deaths"] >= 1 or node2 in state["lost_nodes"], entry
    assert content_hash(str(out)) == clean
    from mixscope.store import manifest
    from mixscope.store.layout import Layout

    layout = Layout.open(str(out))
    run_id = next(
        iter(json.loads(p.read_text())["run_id"] for p in out.glob("_mixscope/runs/*/run.json"))
    )
    commits = manifest.commits(layout, run_id)
    assert len(commits) == SHARDS
    assert any(c.attempt >= 2 for c in commits.values()), text[-2000:]  # the lost shard
    assert os.path.exists(out)


def test_a_node_whose_actors_keep_dying_is_backed_off_then_given_up(
    cluster, tiny_bert_dir, corpus, clean, tmp_path
):
    """Every actor on node n2 dies in its first shard (its processes carry NODE_TAG=n2):
    the node is backed off after the first death, given up after the second
    (node_max_failures), never handed a third actor, and reported; the job completes on
    the head with exactly the rows of a clean run."""
    cluster.start_head(num_cpus=1, env={"NODE_TAG": "head"})
    cluster.add_node("n2", num_cpus=1, resources='{"node2": 1}', env={"NODE_TAG": "n2"})
    cluster.wait_for_nodes(2)
    out, log = tmp_path / "out", tmp_path / "driver.log"
    args = [*_args(tiny_bert_dir, corpus, out), "--set", "runtime.max_retries=3"]
    args += ["--set", "runtime.node_max_failures=2", "--set", "runtime.node_backoff_seconds=1"]
    gate = tmp_path / "go"
    faults = {"kill_where": {"env": "NODE_TAG", "value": "n2"}, **_held_head(gate)}
    proc = _driver(cluster, args, log, faults)
    # the head goes on once node2 is given up: unheld, the head could finish every shard
    # before node2's second actor was up and handed one (then one death, not two)
    _wait(
        proc,
        log,
        lambda: (s := _actors(out)) and _node2(s) in s.get("lost_nodes", []) and s,
        "node2 given up",
    )
    gate.touch()
    _finish(proc, log, timeout=240)
    state = _actors(out)
    node2 = _node2(state)
    assert node2 is not None, state
    entry = next(n for n in state["nodes"] if n["node"] == node2)
    assert entry["actor_deaths"] == 2, entry  # backed off once, then given up: no third
    assert node2 in state["lost_nodes"], state
    on2 = [a for a in state["actors"] if a["node"] == node2]
    assert len(on2) == 2 and all(a["state"] == "dead" and a["shards"] == 0 for a in on2), on2
    assert sum(a["shards"] for a in state["actors"]) == SHARDS  # each shard done once
    assert content_hash(str(out)) == clean
    from click.testing import CliRunner

    from mixscope.cli import main

    shown = CliRunner().invoke(main, ["status", str(out), "--actors"])
    assert shown.exit_code == 0, shown.output
    assert "gave up after 2 actor deaths" in shown.output, shown.output
