"""The benchmarks still run against the code they measure: each one's ``--quick`` smoke run
exits 0 and prints its table (a benchmark that rots silently is a README figure nobody can
regenerate: storage.py read commit records as dicts for a release after they became typed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _run(script: str, *args: str) -> str:
    """A benchmark script's stdout; it must exit 0."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _quick(script: str, tmp_path: Path, *more: str) -> str:
    return _run(script, "--quick", "--dir", str(tmp_path), *more)


def test_storage_benchmark_runs(tmp_path: Path) -> None:
    out = _quick("storage.py", tmp_path)
    assert "full float16" in out and "summary means max |diff|" in out
    assert list(tmp_path.iterdir()) == []  # its results directories are removed


def test_host_benchmark_runs(tmp_path: Path) -> None:
    """Against HEAD: the default baseline (0844ca9) needs numba, which the project no longer
    installs."""
    out = _quick("host.py", tmp_path, "--baseline", "HEAD")
    assert "| `none` |" in out and "tokens/s per core" in out
    assert "Encoding alone:" in out and "however fast the accumulation" in out


def test_finish_parallel_benchmark_runs() -> None:
    out = _run("finish_parallel.py", "--shards", "2", "--shard-seqs", "64", "--reps", "1")
    assert "2 shards' finish (16,384 tokens" in out and "the rate" in out


def test_ff_benchmark_runs() -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, str(BENCH / "ff.py"), "--quick", "--no-memory"],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| MiniLM-L6 (real) | 128 × 4 |" in done.stdout and "paper + ff / SDPA" in done.stdout


def test_efficiency_benchmark_runs(tmp_path: Path) -> None:
    out = _quick("efficiency.py", tmp_path, "--long", "2")
    assert "Amortized: the corpus repeated 2 times" in out
    assert "bare forward" in out and "detail `none`" in out and "detail `sample`" in out
    assert "analysis over forward" in out and "host path" in out and "tail" in out
    assert list(tmp_path.iterdir()) == []  # its scratch folder is removed


def test_decomposition_benchmark_runs() -> None:
    """benchmarks/decomposition.py against a baseline revision (git archive of HEAD)."""
    args = ("--baseline", "HEAD", "--reps", "1", "--runs", "2", "--batch", "2", "--seq-len", "32")
    assert "this / baseline **" in _run("decomposition.py", *args)


def test_attention_benchmark_times_the_new_layouts() -> None:
    """attention.py --decoder: fast / SDPA on a random decoder of the 2024–26 layouts."""
    out = _run("attention.py", "--decoder", "olmo2", "--decoder-n", "64", "--reps", "1")
    assert "| olmo2 (random) | 64 × 1 |" in out
