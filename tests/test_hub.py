"""A hub id where the Hugging Face Hub cannot be reached: one line at once, or the cache.

Each test runs a fresh process with ``HF_ENDPOINT`` on a loopback port nobody listens on
(huggingface_hub reads its settings at import), so the hub is unreachable whatever network
the machine has.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("HF_HUB_OFFLINE", None)
    env.update(HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}", HF_HOME=str(tmp_path / "hf"))
    return env


def test_an_unreachable_hub_is_one_line_without_retries(tmp_path):
    """``mixscope validate --model org/name`` with no hub and no cache: exit 1, one line
    naming the endpoint and the model, and none of huggingface_hub's retry lines."""
    env = _env(tmp_path)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("A document.\n")
    cmd = ["validate", "--model", "some-org/some-model", "--corpus", str(corpus)]
    out = subprocess.run(
        [sys.executable, "-m", "mixscope.cli", *cmd],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "cannot reach the Hugging Face Hub at http://127.0.0.1" in lines[0]
    assert "'some-org/some-model' is not in the local cache" in lines[0]
    assert "Retrying" not in out.stderr + out.stdout


def test_a_cached_model_loads_from_the_cache_when_the_hub_is_unreachable(tiny_bert_dir, tmp_path):
    """The same unreachable hub, with the model in the hub cache (a snapshot as
    huggingface_hub lays it out): it loads from there and runs."""
    snapshot = tmp_path / "hf" / "hub" / "models--some-org--tiny-bert" / "snapshots" / "abc123"
    shutil.copytree(tiny_bert_dir, snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("abc123")
    code = (
        "import mixscope\n"
        "t = mixscope.analyze('some-org/tiny-bert', ['A short text.', 'Another one.'])\n"
        "print(t.num_rows)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env(tmp_path),
        timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[-1]) > 0
    assert "Retrying" not in out.stderr


@pytest.mark.parametrize("offline", ["1"])
def test_hf_hub_offline_skips_the_probe(tmp_path, offline):
    """``HF_HUB_OFFLINE=1``: no probe (transformers' own offline message answers)."""
    env = {**_env(tmp_path), "HF_HUB_OFFLINE": offline}
    code = (
        "from mixscope.models import hub\n"
        "print(hub.hub_options('some-org/some-model'), hub.hub_unreachable.cache_info().misses)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["{}", "0"]
