"""Start-up overlap: a worker reads and tokenizes its first shard while its model loads.

The model load is slowed (``MIXSCOPE_FAULTS`` "slow_load", a sleep before the weights
load, as a slow disk or hub would be) so that what overlaps it shows in the worker's
recorded start-up events; results must not change. In the Ray pool each actor is created
with the shard it gets first, and a model that cannot load still fails the job once,
before any shard is attempted.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mixscope.errors import MixscopeError
from mixscope.runtime import actor_pool
from mixscope.runtime.driver import prepare
from mixscope.runtime.executor import make_executor
from mixscope.runtime.shard_result import ShardResult
from mixscope.runtime.worker import ShardWorker
from mixscope.store import manifest
from run_helpers import executor_events, job_spec

SLOW_LOAD = 2.0


def _spec(model: str, out: Path, executor: str, **extra):
    """run_helpers' demo job, smaller: 9 documents in 3 shards of 3, one worker and the
    spec's own retries and detail."""
    small = {
        "corpus.limit": 9,
        "runtime.executor": executor,
        "runtime.docs_per_shard": 3,
        "runtime.workers": 1,
        "runtime.max_retries": 2,
        "output.detail": "sample",
    }
    return job_spec(model, out, **{**small, **extra})


def _same(result: ShardResult) -> tuple:
    return tuple(getattr(result, k) for k in ("shard_id", "docs", "sequences", "tokens", "rows"))


def test_the_first_shard_is_tokenized_while_the_model_loads(tiny_bert_dir, tmp_path, monkeypatch):
    prep = prepare(_spec(tiny_bert_dir, tmp_path / "out", "local"))
    first, other = prep.plan.shards[0], prep.plan.shards[1]
    plain = ShardWorker(
        prep.spec, prep.run_id, prep.max_length
    )  # no hint: nothing read before process()
    try:
        assert set(plain.timeline) == {"model_loaded"}
        expected = {s.shard_id: _same(plain.process(s)) for s in (first, other)}
    finally:
        plain.close()

    monkeypatch.setenv("MIXSCOPE_FAULTS", json.dumps({"slow_load": {"seconds": SLOW_LOAD}}))
    worker = ShardWorker(prep.spec, prep.run_id, prep.max_length, first)
    try:
        t = worker.timeline
        assert t["first_started"] < t["first_encoded"] < t["model_loaded"]  # inside the load
        assert t["model_loaded"] - t["first_encoded"] > SLOW_LOAD / 2
        assert worker.startup()["first_shard"] == first.shard_id
        assert _same(worker.process(first)) == expected[first.shard_id]  # the same results
    finally:
        worker.close()

    # a hint is only a hint: handed another shard first, the worker reads that one
    monkeypatch.delenv("MIXSCOPE_FAULTS")
    hinted = ShardWorker(prep.spec, prep.run_id, prep.max_length, first)
    try:
        assert _same(hinted.process(other)) == expected[other.shard_id]
        assert _same(hinted.process(first)) == expected[first.shard_id]
    finally:
        hinted.close()


def _ray_events(spec) -> tuple[list, list[dict], object]:
    events, executor, prep = executor_events(spec)
    assert executor.pool is not None
    return events, [a.info for a in executor.pool.actors], prep


def test_each_actor_is_created_with_its_first_shard(
    ray_local, tiny_bert_dir, tmp_path, monkeypatch
):
    monkeypatch.setenv("MIXSCOPE_FAULTS", json.dumps({"slow_load": {"seconds": SLOW_LOAD}}))
    spec = _spec(tiny_bert_dir, tmp_path / "out", "ray", **{"runtime.workers": 1})
    events, infos, _ = _ray_events(spec)
    assert sorted(e.kind for e in events) == ["done"] * 3
    (info,) = infos
    # the shard it was created with is the one it analysed first, tokenized in the load
    # (first on the model: with two in flight, the second shard's files may be done first)
    first = min(events, key=lambda e: e.result.phases["device_start"] if e.result else 0)
    assert info["first_shard"] == first.shard_id
    t = info["timeline"]
    assert t["first_encoded"] < t["model_loaded"], t

    # the benchmark's baseline: no shard travels with the actor, nothing read in the load
    monkeypatch.setattr(actor_pool, "OVERLAP_FIRST_SHARD", False)
    spec = _spec(tiny_bert_dir, tmp_path / "base", "ray", **{"runtime.workers": 1})
    events, (info,), _ = _ray_events(spec)
    assert sorted(e.kind for e in events) == ["done"] * 3
    assert info["first_shard"] is None and "first_encoded" not in info["timeline"]


def test_a_model_that_cannot_load_fails_the_job_once(
    ray_local, tiny_bert_dir, tmp_path, monkeypatch
):
    """Weights that do not load: the tokenizer does, so the first shards are read while
    the actors try; the job still fails once, with the load's one line, and no shard was
    attempted (no retry used, nothing committed)."""
    bad = tmp_path / "bad-model"
    shutil.copytree(tiny_bert_dir, bad)
    (bad / "model.safetensors").write_bytes(b"not a safetensors file at all")
    trace = tmp_path / "trace"
    monkeypatch.setenv("MIXSCOPE_FAULTS", json.dumps({"trace": {"dir": str(trace)}}))
    spec = _spec(
        str(bad), tmp_path / "out", "ray", **{"runtime.workers": 2, "runtime.max_retries": 2}
    )
    prep = prepare(spec)
    executor = make_executor(spec, prep.run_id, prep.max_length)
    events = []
    try:
        with pytest.raises(MixscopeError) as info:
            for event in executor.run(prep.plan.shards):
                events.append(event)
    finally:
        executor.close()
    message = str(info.value)
    assert message.startswith("workers could not start: ") and "\n" not in message
    assert "deserializing header" in message, message  # the weights' own error
    assert events == [] and not trace.exists()  # no shard attempt, no retry used
    assert manifest.commits(prep.layout, prep.run_id) == {}
