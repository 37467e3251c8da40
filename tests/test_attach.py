"""Attaching to a cluster a user started with Ray's defaults, which run it with token
authentication: ``run`` and ``checkpoints sync`` with ``--address`` use this shell's token
(``~/.ray/auth_token``, ``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``; an explicit
``RAY_AUTH_MODE`` wins), and a refused attach says that it may be authentication.

The head and each driver get a HOME of their own, so the token is where Ray keeps it
(``~/.ray/auth_token``) without touching the real one; no shell here sets RAY_AUTH_MODE.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ray_cluster import default_head
from run_helpers import DEMO

BIN = Path(sys.executable).parent


def _shell(home: Path, **env: str) -> dict[str, str]:
    """A user's shell: no RAY_AUTH_MODE nor RAY_ADDRESS, its own HOME, and ``env``."""
    drop = ("RAY_AUTH_MODE", "RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
    base = {k: v for k, v in os.environ.items() if k not in drop}
    path = f"{BIN}:{base.get('PATH', '')}"
    return {**base, "HOME": str(home), "PATH": path, "HF_HUB_OFFLINE": "1", **env}


@pytest.fixture(scope="module")
def token_head(tmp_path_factory):
    """``ray start --head --port P`` where ``~/.ray/auth_token`` exists and RAY_AUTH_MODE is
    unset: Ray runs it with token authentication (its log says so, checked here)."""
    home = tmp_path_factory.mktemp("head-home")
    token = secrets.token_hex(32)
    (home / ".ray").mkdir()
    (home / ".ray" / "auth_token").write_text(token)
    log = home / "head.log"
    args = ["--num-cpus", "1", "--include-dashboard", "false"]
    with default_head(log, args, _shell(home)) as address:
        assert "Token authentication is enabled" in log.read_text()
        yield {"address": address, "home": home, "token": token}


def _run(head, out: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    args = ["run", "--model", head["model"], "--corpus", str(DEMO), "--out", str(out)]
    args += ["--workers", "1", "--max-length", "32", "--set", "runtime.docs_per_shard=30"]
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mixscope.cli",
            *args,
            "--address",
            head["address"],
            "--no-progress",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )


@pytest.fixture(scope="module")
def head(token_head, tiny_bert_dir):
    return {**token_head, "model": tiny_bert_dir}


def test_run_attaches_with_the_token_ray_keeps_in_home(head, tmp_path):
    """The user's case: ``ray start --head`` then ``mixscope run --address``, same HOME."""
    result = _run(head, tmp_path / "out", _shell(head["home"]))
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"^run \w+: complete — 1/1 shards", result.stderr, re.M), result.stderr


def test_checkpoints_sync_attaches_with_ray_auth_token(head, tmp_path):
    """Another path that attaches, with the token in the environment and none in HOME."""
    import torch

    from tiny_models import build

    checkpoint = tmp_path / "train" / "checkpoint-100"
    model, tok = build("bert", torch.float32, seed=1)
    model.save_pretrained(checkpoint)
    tok.save_pretrained(checkpoint)
    old = time.time() - 3600  # written long ago: past the quiet period
    for p in checkpoint.rglob("*"):
        os.utime(p, (old, old))
    probe = tmp_path / "probe.txt"
    probe.write_text("A short probe sentence.\nAnother probe sentence, a little longer.\n")
    empty_home = tmp_path / "home"
    empty_home.mkdir()
    args = ["checkpoints", "sync", "--source", str(tmp_path / "train"), "--corpus", str(probe)]
    args += ["--out", str(tmp_path / "out"), "--max-length", "32", "--workers", "1"]
    result = subprocess.run(
        [sys.executable, "-m", "mixscope.cli", *args, "--address", head["address"]],
        env=_shell(empty_home, RAY_AUTH_TOKEN=head["token"]),
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert re.search(r"^\s*100\s+analysed\b", result.stdout, re.M), result.stdout


def _refused(result: subprocess.CompletedProcess, head) -> str:
    """The error line of a refused attach: the last line, the only one of mixscope's."""
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"Error: cannot reach the Ray cluster at {head['address']}: "), last
    return last


def test_a_wrong_token_is_named_in_the_one_line_error(head, tmp_path):
    wrong = tmp_path / "token"
    wrong.write_text(secrets.token_hex(32))
    empty_home = tmp_path / "home"
    empty_home.mkdir()
    result = _run(head, tmp_path / "out", _shell(empty_home, RAY_AUTH_TOKEN_PATH=str(wrong)))
    line = _refused(result, head)
    assert f"token authentication, is its token the one in {wrong}?" in line


def test_an_explicit_auth_mode_wins_over_the_token_file(head, tmp_path):
    result = _run(head, tmp_path / "out", _shell(head["home"], RAY_AUTH_MODE="disabled"))
    assert "unset RAY_AUTH_MODE=disabled" in _refused(result, head)
