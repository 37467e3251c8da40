"""Two shards in flight per actor: the next shard's model work overlaps the last one's finish.

Shown by the phases each worker records (``ShardResult.phases``), never by wall-clock
speed: ``finish`` is slowed by a fault (``MIXSCOPE_FAULTS`` "slow_finish", a sleep before
the files are written) so that what runs beside it shows in the order of the events. The
same shards give the same results with 1 and 2 in flight; with 1 the order is today's
(each shard's files written before the next one touches the model). The pool's
bookkeeping (one death per actor, busy time once) is checked without Ray; a killed actor
holding two shards is a reliability scenario (tests/reliability/test_faults.py).
"""

from __future__ import annotations

import json
import threading
from collections import deque
from itertools import pairwise
from pathlib import Path
from typing import Any

from mixscope.corpus.plan import Shard
from mixscope.runtime.actor_pool import Actor, ActorPool
from mixscope.runtime.driver import prepare
from mixscope.runtime.node_health import NodeHealth
from mixscope.runtime.shard_result import ShardResult
from mixscope.runtime.worker import ShardWorker
from mixscope.store import manifest
from run_helpers import executor_events, job_spec

SLOW_FINISH = 1.5
#: a job's shards slowed on the model too: shard k+1 reaches the worker when shard k-1 is
#: done (two in flight), so it can start before shard k's finish ends only if shard k's
#: device phase outlasts that round trip (a tiny model's is milliseconds; Ray's round trip
#: under load is not)
SLOW_BOTH = json.dumps({"slow": {"seconds": 1.0}, "slow_finish": {"seconds": SLOW_FINISH}})


def _spec(model: str, out: Path, executor: str, **extra: Any):
    """run_helpers' demo job, smaller: 12 documents in 4 shards of 3, in plan order, one
    worker and the spec's own retries and detail."""
    small = {
        "corpus.limit": 12,
        "runtime.executor": executor,
        "runtime.docs_per_shard": 3,
        "runtime.shard_order": "plan",
        "runtime.workers": 1,
        "runtime.max_retries": 2,
        "output.detail": "sample",
    }
    return job_spec(model, out, **{**small, **extra})


def _same(result: ShardResult) -> tuple:
    keys = ("shard_id", "docs", "sequences", "tokens", "rows", "detail_rows")
    return tuple(getattr(result, k) for k in keys)


def _files(results: list[ShardResult]) -> dict[int, dict[str, str]]:
    """Each shard's files by kind, as their hashes: what two runs must share byte for byte."""
    return {r.shard_id: {k: f.sha256 for k, f in r.files.items()} for r in results}


def _ray_results(spec) -> list[ShardResult]:
    events, _, prep = executor_events(spec)
    assert manifest.commits(prep.layout, prep.run_id) == {}  # executors never commit
    assert [e.kind for e in events] == ["done"] * len(prep.plan.shards)
    return [e.result for e in events if e.result is not None]


def _by_device(results: list[ShardResult]) -> list[dict[str, float]]:
    """Each shard's phases, in the order its device phase began (one worker)."""
    assert len({r.pid for r in results}) == 1
    return [dict(r.phases) for r in sorted(results, key=lambda r: r.phases["device_start"])]


# -- the pool's bookkeeping (no Ray) ------------------------------------------------------


class _FakeRay:
    def __init__(self) -> None:
        self.killed: list[Any] = []

    def kill(self, handle: Any, no_restart: bool = True) -> None:
        self.killed.append(handle)


class _Handle:
    class _actor_id:  # Ray's attribute, as ``Actor.row`` reads it
        @staticmethod
        def hex() -> str:
            return "a" * 32


def _pool(depth_queue: int = 4) -> tuple[ActorPool, Actor, _FakeRay]:
    ray = _FakeRay()
    queue = deque((Shard(i, "f", 0, 3 * i, 3), 1) for i in range(depth_queue))
    pool = ActorPool(ray, None, {}, (), {"CPU": 1.0}, NodeHealth(3, 5.0), 1, 2, queue)
    actor = Actor(_Handle(), "node-1", 0.0, state="idle")
    pool.actors.append(actor)
    return pool, actor, ray


def test_an_actor_holds_up_to_depth_shards_and_its_death_counts_once():
    pool, actor, ray = _pool()
    other = Actor(_Handle(), "node-1", 0.0, state="idle")
    pool.actors.append(other)
    # every idle actor gets one before any gets a second: level by level
    handed = []
    for a in pool.open(2):
        item = pool.next_shard(a)
        assert item is not None
        handed.append((a is actor, item[0].shard_id, pool.handed(a, item[0].shard_id)))
    assert handed == [(True, 0, 0), (False, 1, 0), (True, 2, 1), (False, 3, 1)]
    assert actor.state == "busy" and list(actor.in_flight) == [0, 2]
    assert actor.row()["shard"] == "0, 2" and other.row()["shard"] == "1, 3"
    assert list(pool.open(2)) == []  # full
    # its process dies: both shards come back as errors; one death, one kill
    pool.died(actor, 0, "actor died")
    pool.died(actor, 2, "actor died")
    assert pool.health.deaths == {"node-1": 1} and pool.health.failures == {"node-1": 1}
    assert actor.state == "dead" and actor.in_flight == {} and ray.killed == [actor.handle]
    # a result from the other actor: a success of its node; then it idles
    pool.finished(other, 1, tokens=10)
    assert other.state == "busy" and pool.health.failures == {}
    pool.raised(other, 3)
    assert other.state == "idle" and other.shards == 1 and other.tokens == 10


def test_a_result_from_an_actor_that_died_after_it_is_not_a_node_success():
    pool, actor, _ = _pool()
    for shard_id in (0, 1):
        pool.handed(actor, shard_id)
    pool.died(actor, 1, "actor died")  # news of the death came first
    pool.finished(actor, 0, tokens=5)  # the shard it finished just before: still done
    assert pool.health.failures == {"node-1": 1}  # not reset by that success
    assert actor.state == "dead" and actor.shards == 1 and pool.first_done is not None


def test_busy_time_counts_once_however_many_shards_an_actor_holds(monkeypatch):
    import mixscope.runtime.actor_pool as ap

    now = [100.0]
    monkeypatch.setattr(ap.time, "time", lambda: now[0])
    pool, actor, _ = _pool()
    pool.handed(actor, 0)
    now[0] = 101.0
    pool.handed(actor, 1)  # held beside 0 from 101 to 103
    now[0] = 103.0
    pool.finished(actor, 0, tokens=1)
    now[0] = 104.0
    pool.finished(actor, 1, tokens=1)
    assert actor.busy_seconds == 4.0 and actor.state == "idle" and actor.last_end == 104.0


# -- the worker on two threads (no Ray) ---------------------------------------------------


def test_the_worker_runs_device_phases_in_turn_order_beside_finish(
    tiny_bert_dir, tmp_path, monkeypatch
):
    """Two threads call ``process`` at once, the later turn first: the device phases run
    one at a time in turn order, and the second shard's began before the first's finish
    ended (its finish slowed); the results are those of one thread."""
    prep = prepare(_spec(tiny_bert_dir, tmp_path / "out", "local"))
    a, b = prep.plan.shards[:2]
    worker = ShardWorker(prep.spec, prep.run_id, prep.max_length)
    try:
        alone = {s.shard_id: _same(worker.process(s)) for s in (a, b)}
        monkeypatch.setenv("MIXSCOPE_FAULTS", json.dumps({"slow_finish": {"seconds": 1.0}}))
        results: dict[int, ShardResult] = {}
        later = threading.Thread(target=lambda: results.update({1: worker.process(b, 1)}))
        later.start()
        earlier = threading.Thread(target=lambda: results.update({0: worker.process(a, 0)}))
        earlier.start()
        later.join()
        earlier.join()
    finally:
        worker.close()
    first, second = results[0].phases, results[1].phases
    assert first["device_end"] <= second["device_start"]  # one shard on the model at a time
    assert second["device_start"] < first["finish_end"]  # the overlap
    assert {r.shard_id: _same(r) for r in results.values()} == alone


# -- real Ray ---------------------------------------------------------------------------


def test_an_actor_overlaps_the_next_shard_with_the_last_ones_finish(
    ray_local, tiny_bert_dir, tmp_path, monkeypatch
):
    monkeypatch.setenv("MIXSCOPE_FAULTS", SLOW_BOTH)
    one = {"runtime.workers": 1}
    two = _ray_results(_spec(tiny_bert_dir, tmp_path / "two", "ray", **one))
    serial = _ray_results(
        _spec(tiny_bert_dir, tmp_path / "one", "ray", **one, **{"runtime.shards_in_flight": 1})
    )
    assert len(two) == 4
    # 2 in flight: the model is never shared, and each next shard's model work began
    # before the last one's finish ended
    phases = _by_device(two)
    for prev, nxt in pairwise(phases):
        assert prev["device_end"] <= nxt["device_start"] < prev["finish_end"], (prev, nxt)
    # device phases in the order the pool handed the shards out (plan order here)
    assert [r.shard_id for r in sorted(two, key=lambda r: r.phases["device_start"])] == [
        0,
        1,
        2,
        3,
    ]
    # 1 in flight: today's order, each shard's files written before the next one starts
    phases = _by_device(serial)
    for prev, nxt in pairwise(phases):
        assert prev["finish_end"] <= nxt["device_start"], (prev, nxt)
    assert [r.shard_id for r in sorted(serial, key=lambda r: r.phases["device_start"])] == [
        0,
        1,
        2,
        3,
    ]
    # the same results either way
    assert sorted(map(_same, two)) == sorted(map(_same, serial))
    assert _files(two) == _files(serial)


def test_the_local_executor_overlaps_like_an_actor(tiny_bert_dir, tmp_path, monkeypatch):
    """runtime/local.py keeps two shards in the worker as a Ray actor does (what
    benchmarks/actor.py times): each next shard's model work begins before the last one's
    finish ends, device phases in plan order, the same files as one at a time."""
    monkeypatch.setenv("MIXSCOPE_FAULTS", SLOW_BOTH)
    two = _ray_results(_spec(tiny_bert_dir, tmp_path / "two", "local"))
    serial = _ray_results(
        _spec(tiny_bert_dir, tmp_path / "one", "local", **{"runtime.shards_in_flight": 1})
    )
    phases = _by_device(two)
    assert len(phases) == 4
    for prev, nxt in pairwise(phases):
        assert prev["device_end"] <= nxt["device_start"] < prev["finish_end"], (prev, nxt)
    order = sorted(two, key=lambda r: r.phases["device_start"])
    assert [r.shard_id for r in order] == [0, 1, 2, 3]
    for prev, nxt in pairwise(_by_device(serial)):
        assert prev["finish_end"] <= nxt["device_start"], (prev, nxt)
    assert _files(two) == _files(serial)


def test_three_in_flight_keep_the_model_busy_while_two_finish(tiny_bert_dir, tmp_path, monkeypatch):
    """With 3 in flight (a fast device, spare host cores) the model starts shard k+2 while
    shards k and k+1 are still writing their files, which 2 in flight never allows (its
    slots: one on the model, one finishing); never more than 3 shards alive at once; the
    same files as one at a time."""
    serial = _ray_results(
        _spec(tiny_bert_dir, tmp_path / "one", "local", **{"runtime.shards_in_flight": 1})
    )
    # finish far longer than the device phase: the files are the bottleneck
    slow = json.dumps({"slow": {"seconds": 0.5}, "slow_finish": {"seconds": 2.5}})
    monkeypatch.setenv("MIXSCOPE_FAULTS", slow)
    runs = {
        n: _ray_results(
            _spec(tiny_bert_dir, tmp_path / f"n{n}", "local", **{"runtime.shards_in_flight": n})
        )
        for n in (2, 3)
    }

    def alive_at_device_start(results: list[ShardResult]) -> list[int]:
        """Shards alive (device phase begun, finish not ended) as each device phase begins."""
        phases = _by_device(results)
        return [
            sum(p["device_start"] <= q["device_start"] < p["finish_end"] for p in phases)
            for q in phases
        ]

    assert max(alive_at_device_start(runs[2])) == 2
    assert max(alive_at_device_start(runs[3])) == 3
    three = _by_device(runs[3])
    assert three[2]["device_start"] < three[0]["finish_end"]  # shard 2 on the model early
    assert _files(runs[3]) == _files(runs[2]) == _files(serial)
