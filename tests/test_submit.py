"""``mixscope submit`` against a real Ray head with its dashboard (the Ray Jobs API)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ray_cluster import default_head, free_port

DEMO = Path(__file__).parents[1] / "jobs" / "data" / "demo.txt"


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    """``ray start --head`` with the dashboard, in the foreground, stopped at the end (and
    Ray's ``ray_current_cluster`` put back as it was: ``ray_cluster.default_head``)."""
    dash = free_port()
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}", "HF_HUB_OFFLINE": "1"}
    env.pop("RAY_ADDRESS", None)
    args = [
        f"--dashboard-port={dash}",
        "--dashboard-host=127.0.0.1",
        "--include-dashboard=true",
        "--num-cpus=2",
    ]
    log = tmp_path_factory.mktemp("head") / "head.log"
    with default_head(log, args, env):
        address = f"http://127.0.0.1:{dash}"
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", dash), timeout=1):
                    break
            except OSError:
                time.sleep(0.5)
        _wait_for_jobs_api(address, deadline)  # it starts after the HTTP port opens
        yield address, env


def _wait_for_jobs_api(address: str, deadline: float) -> None:
    """Until the head's Jobs API answers (not a fixed sleep): 200, or 401 from a head with
    token authentication (Ray's default) — either way its routes are up; submit_job itself
    waits for the job agent."""
    import urllib.error
    import urllib.request

    while True:
        try:
            with urllib.request.urlopen(f"{address}/api/jobs/", timeout=2):
                return
        except urllib.error.HTTPError as exc:
            if exc.code == 401:
                return
            if time.time() > deadline:
                raise
        except OSError:
            if time.time() > deadline:
                raise
        time.sleep(0.2)


def test_submit_runs_once(ray_local, ray_head, tiny_bert_dir, tmp_path):
    """ray_local first: the head must coexist with the session's own Ray, as in a full run."""
    address, env = ray_head
    out = tmp_path / "out"
    args = [
        sys.executable,
        "-m",
        "mixscope.cli",
        "submit",
        "--model",
        tiny_bert_dir,
        "--corpus",
        str(DEMO),
        "--out",
        str(out),
        "--workers",
        "1",
        "--max-length",
        "32",
        "--set",
        "runtime.docs_per_shard=10",
        "--address",
        address,
    ]
    aws = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "mixscope-test"}
    job_env = {**env, **aws, "MIXSCOPE_PROGRESS_INTERVAL": "0"}
    first = subprocess.run(
        [*args, "--wait"], env=job_env, capture_output=True, text=True, timeout=400
    )
    assert first.returncode == 0, first.stdout + first.stderr
    assert "SUCCEEDED" in first.stderr
    # the job's log (streamed back by --wait) has the progress lines of a non-terminal
    assert re.search(
        r"mixscope: run \w+: 30/30 docs, shards 3/3, [\d,]+ tok/s, ETA 0s", first.stdout
    )
    # the S3 settings of this shell reached the job's runtime_env (s3:// outputs under submit)
    from ray.job_submission import JobSubmissionClient

    (sid,) = re.findall(r"submitted (\S+) to", first.stderr)
    forwarded = JobSubmissionClient(address).get_job_info(sid).runtime_env["env_vars"]
    assert {k: forwarded.get(k) for k in aws} == aws
    runs = list((out / "_mixscope" / "runs").iterdir())
    assert len(runs) == 1
    record = json.loads((runs[0] / "run.json").read_text())
    assert record["status"] == "complete" and record["shards_done"] == 3
    assert len(record["invocations"]) == 1

    second = subprocess.run(args, env=env, capture_output=True, text=True, timeout=200)
    assert second.returncode == 0
    assert "already submitted" in second.stderr and "not submitting it again" in second.stderr
    record = json.loads((runs[0] / "run.json").read_text())
    assert len(record["invocations"]) == 1  # it did not run again


def test_submit_needs_an_address(monkeypatch):
    from click.testing import CliRunner

    from mixscope.cli import main

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    result = CliRunner().invoke(main, ["submit", "--corpus", str(DEMO), "--out", "o"])
    assert result.exit_code == 1 and "submit needs --address" in result.output


def _submit(address: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    args = ["submit", "--corpus", str(DEMO), "--out", "o", "--address", address]
    return subprocess.run(
        [sys.executable, "-m", "mixscope.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_refused_submit_says_which_token_and_a_dead_address_does_not(tmp_path):
    """A head with its token in its own HOME (so token authentication, as Ray's defaults
    give it): the Jobs API refuses a wrong token and a missing one by name, one line each,
    and an address where nothing listens is not blamed on a token."""
    import secrets

    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text(secrets.token_hex(32))
    bare = tmp_path / "shell"
    bare.mkdir()
    wrong = tmp_path / "wrong"
    wrong.write_text(secrets.token_hex(32))
    drop = ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
    base = {k: v for k, v in os.environ.items() if k not in drop}
    dash = free_port()
    args = [f"--dashboard-port={dash}", "--dashboard-host=127.0.0.1", "--num-cpus=0"]
    args += ["--include-dashboard=true"]
    with default_head(tmp_path / "head.log", args, {**base, "HOME": str(home)}):
        address = f"http://127.0.0.1:{dash}"
        _wait_for_jobs_api(address, time.time() + 120)
        said = {
            f"it refused the token in {wrong} (the head's token is its ~/.ray/auth_token)": {
                "RAY_AUTH_TOKEN_PATH": str(wrong)
            },
            "it uses token authentication and this shell has no token: put it in ": {},
        }
        for line, env in said.items():
            result = _submit(address, {**base, "HOME": str(bare), **env})
            assert result.returncode == 1, result.stderr[-2000:]
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1, result.stderr[-2000:]
            assert lines[0].startswith(f"Error: cannot reach the Ray Jobs API at {address}: ")
            assert line in lines[0], lines[0]
    result = _submit(address, {**base, "HOME": str(home)})  # the head is gone now
    assert result.returncode == 1
    assert result.stderr.strip().endswith("(is it up?)"), result.stderr
    assert "token" not in result.stderr


def test_job_env_forwards_hub_and_s3_settings():
    from mixscope.runtime.environment import job_env, worker_env

    shell = {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_PROFILE": "lab",
        "HF_HUB_OFFLINE": "1",
        "MIXSCOPE_PROGRESS_INTERVAL": "30",
        "HF_HOME": "/home/me/.cache/hf",  # a local path: not carried
        "HOME": "/home/me",
        "XAWS_KEY": "no",
    }
    assert job_env(shell) == {
        k: v for k, v in shell.items() if k not in ("HF_HOME", "HOME", "XAWS_KEY")
    }
    assert job_env({}) == {}
    # the actors get the same list, this machine's paths included, and their defaults
    assert worker_env(shell) == {
        "TRANSFORMERS_VERBOSITY": "error",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        **{k: v for k, v in shell.items() if k not in ("HOME", "XAWS_KEY")},
    }
    assert worker_env({"TRANSFORMERS_VERBOSITY": "info"})["TRANSFORMERS_VERBOSITY"] == "info"
