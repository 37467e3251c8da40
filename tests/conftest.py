"""Shared fixtures: the real MiniLM model path and tiny random models of every family.

This file imports only what the GPU check's machine has (torch, transformers, pytest: no
Ray, DuckDB or packaged model; benchmarks/gpu_check.sh): a fixture that needs more imports
it when a test asks for it."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from tiny_models import build, minilm_dir

#: the reliability matrix table (``--reliability-report PATH``)
pytest_plugins = ["reliability_report"]

# -- the tiers: every test's tier is declared here, and only here (no test file marks its
# own: tests/test_tiers.py checks it). A test is ``e2e`` (a Ray cluster, driver processes,
# whole jobs, the reliability matrix; the chaos run is ``chaos`` too), else ``slow`` (the
# real model, large inputs, the benchmarks' smoke runs), else fast; ``gpu`` tests need
# CUDA (benchmarks/gpu_check.sh).
# Docs: docs/development.md, "Tiers".

#: fixtures whose use makes a test slow (the real model) or end to end (a cluster or jobs)
SLOW_FIXTURES = {"minilm_path"}
E2E_FIXTURES = {"ray_local", "clean_run"}
#: whole modules of one tier (file stems); ``tests/reliability/`` is e2e too
E2E_MODULES = {
    "test_pipeline",
    "test_submit",
    "test_checkpoints",
    "test_ray_state",
    "test_attach",
    "test_gpu_check",  # a throwaway venv and the whole check's dry run
    "test_new_layouts_end_to_end",
    "test_readme_walkthrough",  # the README's own-corpus commands, each on its own Ray
}
SLOW_MODULES = {
    "test_benchmark_scripts",  # each benchmark's --quick run
    "test_elastic",  # a cluster that grows and shrinks under a slow job
    "test_packaging",  # builds the wheel (pip fetches the build backend)
}
GPU_MODULES = {"test_gpu"}
#: the chaos run's short schedule (e2e too: it lives in tests/reliability/)
CHAOS_MODULES = {"test_chaos"}
#: single tests (``module::function``) of a tier their module is not
E2E_TESTS = {
    "test_executor::test_a_released_job_ends_the_ray_it_started",
}
SLOW_TESTS = {
    "test_distance_runs::test_the_long_context_job_runs_the_group_on_8k_tokens",
}


def tier(item) -> str | None:
    """The tier of a collected test: "e2e", "slow" or None (fast)."""
    names = set(getattr(item, "fixturenames", ()))
    test = f"{item.path.stem}::{getattr(item, 'originalname', item.name)}"
    if (
        "reliability" in item.path.parts
        or item.path.stem in E2E_MODULES
        or test in E2E_TESTS
        or names & E2E_FIXTURES
    ):
        return "e2e"
    if item.path.stem in SLOW_MODULES or test in SLOW_TESTS or names & SLOW_FIXTURES:
        return "slow"
    return None


def pytest_collection_modifyitems(config, items):
    """Tiers from the lists above, so no test can forget its marker."""
    for item in items:
        kind = tier(item)
        if kind is not None:
            item.add_marker(getattr(pytest.mark, kind))
        if item.path.stem in GPU_MODULES:
            item.add_marker(pytest.mark.gpu)
        if item.path.stem in CHAOS_MODULES:
            item.add_marker(pytest.mark.chaos)


@pytest.fixture(scope="session")
def minilm_path() -> str:
    return str(minilm_dir())


# -- the SQL tests' results directories, built once per session (tests/sql_oracle.py) ------


@pytest.fixture(scope="session")
def real_root(tiny_bert_dir, tmp_path_factory):
    """A real job's results (the tiny BERT) with imported references."""
    import sql_oracle

    return sql_oracle.real_root(tiny_bert_dir, tmp_path_factory)


@pytest.fixture(scope="session")
def synth_root(tmp_path_factory):
    """Synthetic results in the real schema, for the edge cases (tests/sql_fixtures.py)."""
    import sql_oracle

    return sql_oracle.synth_root(tmp_path_factory)


@pytest.fixture(params=["real", "synthetic"])
def res(request):
    return request.getfixturevalue("real_root" if request.param == "real" else "synth_root")


@pytest.fixture(scope="session")
def tiny():
    """``tiny(family, dtype)`` → cached (model, tokenizer)."""
    cache: dict = {}

    def get(family: str, dtype=None):
        import torch

        dtype = dtype or torch.float64
        key = (family, dtype)
        if key not in cache:
            cache[key] = build(family, dtype)
        return cache[key]

    return get


@pytest.fixture(scope="session")
def ray_local():
    """One real local Ray instance for the whole test session (ray.init takes seconds).

    Ray's machine-wide ``ray_current_cluster`` is put back as it was if this instance wrote
    it (Ray 2.60 does not for an embedded one; a later Ray may), so no ``ray.init`` after
    the tests tries to join this stopped instance (``ray_cluster.AddressFile``).
    """
    import ray

    from ray_cluster import AddressFile

    address_file = AddressFile()
    if not ray.is_initialized():
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            logging_level="ERROR",
            log_to_driver=False,
        )
    port = int(ray.get_runtime_context().gcs_address.rsplit(":", 1)[1])
    yield ray
    ray.shutdown()
    address_file.restore(port)


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory):
    """A tiny random BERT saved with its tokenizer: a real model directory that loads fast."""
    import torch

    path = tmp_path_factory.mktemp("tiny-bert")
    model, tok = build("bert", torch.float32)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)
