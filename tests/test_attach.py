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
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mixscope.errors import MixscopeError
from mixscope.runtime.gcs_probe import check_gcs, probed
from ray_cluster import default_head, free_port
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


def _refused(result: subprocess.CompletedProcess, address: str) -> str:
    """The error line of a refused attach: mixscope's one line and nothing else (Ray's
    client, had it been started, would have logged a line a second)."""
    assert result.returncode == 1, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-3000:]
    assert lines[0].startswith(f"Error: cannot reach the Ray cluster at {address}: "), lines
    return lines[0]


def test_a_wrong_token_is_named_in_the_one_line_error(head, tmp_path):
    wrong = tmp_path / "token"
    wrong.write_text(secrets.token_hex(32))
    empty_home = tmp_path / "home"
    empty_home.mkdir()
    result = _run(head, tmp_path / "out", _shell(empty_home, RAY_AUTH_TOKEN_PATH=str(wrong)))
    line = _refused(result, head["address"])
    assert line.endswith(
        f"it refused the token in {wrong} (the head's token is its ~/.ray/auth_token)"
    )
    # the refusal holds nothing: the same run with the head's token goes through
    assert _run(head, tmp_path / "out", _shell(head["home"])).returncode == 0


def test_a_shell_without_a_token_is_told_where_one_goes(head, tmp_path):
    empty_home = tmp_path / "home"
    empty_home.mkdir()
    line = _refused(_run(head, tmp_path / "out", _shell(empty_home)), head["address"])
    assert "it uses token authentication and this shell has no token: put it in " in line
    assert "~/.ray/auth_token, RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH" in line


def test_an_address_where_nothing_answers_fails_in_one_line(head, tmp_path):
    """Ray's client retries such an address for as long as the driver lives (a line every
    40 s); the probe gives up after ``WAIT_SECONDS`` (10 s; the test shortens it through
    its setting, ``MIXSCOPE_ATTACH_WAIT_SECONDS``) and says what grpc saw."""
    address = f"127.0.0.1:{free_port()}"  # nobody listens on it once it is closed
    shell = _shell(head["home"], MIXSCOPE_ATTACH_WAIT_SECONDS="2")
    line = _refused(_run({**head, "address": address}, tmp_path / "out", shell), address)
    assert line.endswith(
        f"nothing answered there in 2 s (Connection refused); is it up? "
        f"(`ray status --address {address}`)"
    )


def test_auto_is_probed_where_ray_resolves_it(head, tmp_path):
    """``--address auto`` attaches where Ray resolves it (its address file, else a running
    GCS); the probe asks that address too, so a refused token is one line naming both,
    not Ray's 20 s of warnings. (A stale address file with no GCS running anywhere, which
    Ray waits on without end, is the case this exists for; the test session's own clusters
    keep it from being staged here.) The file is in this test's RAY_TMPDIR, not the
    machine's."""
    port = head["address"].rsplit(":", 1)[1]
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text(head["address"])
    wrong = tmp_path / "token"
    wrong.write_text(secrets.token_hex(32))
    env = _shell(tmp_path, RAY_TMPDIR=str(tmp_path), RAY_AUTH_TOKEN_PATH=str(wrong))
    result = _run({**head, "address": "auto"}, tmp_path / "out", env)
    assert result.returncode == 1, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        rf"Error: cannot reach the Ray cluster at auto \(\S+:{port}\): it refused the token "
        rf"in {re.escape(str(wrong))} \(the head's token is its ~/.ray/auth_token\)",
        last,
    ), last
    assert "gcs_client" not in result.stderr  # Ray's client was never started


def test_an_explicit_auth_mode_wins_over_the_token_file(head, tmp_path):
    result = _run(head, tmp_path / "out", _shell(head["home"], RAY_AUTH_MODE="disabled"))
    line = _refused(result, head["address"])
    assert line.endswith(
        "it uses token authentication and RAY_AUTH_MODE=disabled sends none: unset it"
    )


def test_the_probe_sends_the_token_ray_would(token_head, tmp_path):
    """``check_gcs`` in this process, against the real head, with each shell's environment:
    the head's token (in HOME, in RAY_AUTH_TOKEN with the newline a file keeps) passes; a
    wrong one, none, and RAY_AUTH_MODE=disabled are each refused with what to fix."""
    address, home = token_head["address"], str(token_head["home"])
    empty = tmp_path / "home"
    empty.mkdir()
    wrong = tmp_path / "wrong"
    wrong.write_text(secrets.token_hex(32))
    check_gcs(address, {"HOME": home})
    check_gcs(address, {"HOME": str(empty), "RAY_AUTH_TOKEN": token_head["token"] + "\n"})
    refused = {
        f"it refused the token in {wrong}": {"HOME": home, "RAY_AUTH_TOKEN_PATH": str(wrong)},
        "it refused the token in RAY_AUTH_TOKEN": {"HOME": home, "RAY_AUTH_TOKEN": "x" * 64},
        "this shell has no token": {"HOME": str(empty)},
        "RAY_AUTH_MODE=disabled sends none": {"HOME": home, "RAY_AUTH_MODE": "disabled"},
    }
    for says, environ in refused.items():
        with pytest.raises(MixscopeError, match=re.escape(says)):
            check_gcs(address, environ)


def test_an_http_server_is_named_as_not_a_gcs():
    """The dashboard's port (``submit``'s address) given to ``run``: an HTTP/1 server
    answers, so the line says that, at once, instead of waiting for a GCS to listen."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        address = f"127.0.0.1:{server.server_address[1]}"
        with pytest.raises(MixscopeError) as refused:
            check_gcs(address, {})
    finally:
        server.shutdown()
        server.server_close()
    assert str(refused.value).startswith(
        f"cannot reach the Ray cluster at {address}: what answers there is not a Ray GCS "
        "(it does not speak gRPC: a dashboard port?"
    )


def test_a_port_that_takes_the_connection_and_never_answers_ends_in_one_line():
    """What an unroutable head or a firewall that drops packets looks like from here: the
    connection never turns into an answer. The probe gives up at its deadline."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel completes the handshake; nobody ever speaks
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(MixscopeError) as refused:
            check_gcs(address, {})
    assert str(refused.value) == (
        f"cannot reach the Ray cluster at {address}: no answer in 10 s "
        "(is it up, and is the port open to this machine?)"
    )


def test_only_a_gcs_host_and_port_is_probed():
    assert probed("127.0.0.1:6379") and probed("head.example:6379") and probed("[::1]:6379")
    for address in ("auto", "ray://head:10001", "http://head:8265", "head", "head:port"):
        assert not probed(address), address


def test_the_probe_passes_a_cluster_without_token_authentication(token_head, tmp_path):
    """A head started with ``RAY_AUTH_MODE=disabled`` takes the driver with or without a
    token, so the probe must too: it refuses only what the GCS itself refused."""
    home = tmp_path / "home"
    home.mkdir()
    args = ["--num-cpus", "0", "--include-dashboard", "false"]
    with default_head(tmp_path / "head.log", args, _shell(home, RAY_AUTH_MODE="disabled")) as at:
        check_gcs(at, {"HOME": str(token_head["home"])})  # a token, sent and not needed
        check_gcs(at, {"HOME": str(home)})
