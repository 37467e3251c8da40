"""Job specs: YAML → frozen dataclasses, overrides, validation in one place."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from mixscope.config import apply_overrides, build_spec, load_spec, parse_set
from mixscope.errors import MixscopeError


def test_yaml_and_overrides(tmp_path):
    (tmp_path / "c.txt").write_text("x\n")
    job = tmp_path / "job.yaml"
    job.write_text("name: t\nmodel: m\ncorpus:\n  paths: [c.txt]\nruntime:\n  workers: 3\nout: o\n")
    spec = load_spec(
        str(job), parse_set(["runtime.batch_size=4", "analysis.mask_rate=0.12", "workers=2"])
    )
    assert spec.corpus.paths == (str((tmp_path / "c.txt").resolve()),)  # relative to the spec
    assert (spec.runtime.workers, spec.runtime.batch_size, spec.analysis.mask_rate) == (2, 4, 0.12)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.name = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"modle": "x"}, "unknown field modle"),
        ({"runtime": {"wrokers": 2}}, "unknown field runtime.wrokers"),
        ({"runtime": {"workers": "many"}}, "runtime.workers: expected int"),
        ({"runtime": {"workers": 0}}, "runtime.workers: at least 1"),
        ({"analysis": {"mask_rate": 1.5}}, "analysis.mask_rate"),
        ({"corpus": {"paths": []}}, "corpus.paths: required"),
        ({"corpus": {"paths": ["x"], "skip_regex": "("}}, "corpus.skip_regex"),
        ({"runtime": 3}, "runtime: expected a mapping"),
    ],
)
def test_validation_messages(data, message):
    base = {"corpus": {"paths": ["x"]}}
    merged = {**base, **data}
    if isinstance(data.get("corpus"), dict):
        merged["corpus"] = data["corpus"]
    with pytest.raises(MixscopeError, match=message):
        build_spec(merged)


def test_no_yaml_at_all():
    spec = load_spec(None, {"model": "m", "corpus.paths": ["a.txt"], "out": "o"})
    assert spec.model == "m" and spec.corpus.paths == ("a.txt",) and spec.out == "o"


def test_bad_yaml(tmp_path):
    job = tmp_path / "bad.yaml"
    job.write_text("name: [unclosed\n")
    with pytest.raises(MixscopeError, match="not valid YAML"):
        load_spec(str(job))
    with pytest.raises(MixscopeError, match="does not exist"):
        load_spec(str(tmp_path / "missing.yaml"))
    with pytest.raises(MixscopeError, match="unknown section"):
        apply_overrides({}, {"nosuch.field": 1})


@pytest.mark.parametrize(
    "name", sorted(p.name for p in (Path(__file__).parents[1] / "jobs").glob("*.yaml"))
)
def test_every_shipped_job_spec_validates(name):
    spec = load_spec(str(Path(__file__).parents[1] / "jobs" / name))
    assert spec.analysis.attention in ("auto", "fast", "eager")
    if name == "long_context.yaml":  # long segments: the fast path and a token budget
        assert spec.analysis.attention == "fast" and spec.analysis.max_length == 8192
        assert spec.runtime.batch_tokens // spec.analysis.max_length == 4
    if name == "gpu_cluster.yaml":  # a host core for each shard finishing beside the GPU
        assert spec.runtime.shards_in_flight - 1 <= spec.runtime.cpus_per_worker
        assert spec.runtime.worker_range() == (1, 8) and spec.analysis.measures == ("all",)
