"""An S3 endpoint that cannot be reached is said so in one line, after a bounded time
(store/reach.py), against real sockets: a closed loopback port and moto's HTTP server
stopped under a command that already reached it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from itertools import pairwise

import pytest
from click.testing import CliRunner

from mixscope.cli import main
from mixscope.store import reach
from mixscope.store.layout import Layout
from s3_server import AWS_ENV, moto_server, new_bucket, s3_client

PROBE = 1.5  # seconds: MIXSCOPE_STORE_PROBE_SECONDS in these tests (5 s by default)


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed: refused from then on)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def aws(monkeypatch):
    for k, v in AWS_ENV.items():
        monkeypatch.setenv(k, v)
    for k in ("AWS_PROFILE", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv(reach.PROBE_ENV, str(PROBE))
    reach._reset()
    yield monkeypatch
    reach._reset()


@pytest.mark.parametrize(
    "command",
    [
        ["status", "s3://results/job"],
        ["sql", "s3://results/job", "SELECT count(*) FROM tokens"],
        ["run", "--model", "minilm", "--corpus", "jobs/data/demo.txt", "--out", "s3://r/j"],
    ],
    ids=["status", "sql", "run"],
)
def test_a_closed_endpoint_is_one_line_after_the_stated_time(aws, command):
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    env = {**os.environ, "AWS_ENDPOINT_URL": endpoint, "HF_HUB_OFFLINE": "1"}
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "mixscope.cli", *command, "--no-progress"]
        if command[0] == "run"
        else [sys.executable, "-m", "mixscope.cli", *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    seconds = time.monotonic() - t0
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 1, out.stderr
    assert lines == [
        f"Error: cannot reach the object store at {endpoint} (could not connect; tried for "
        f"{PROBE:g} s): check the endpoint (AWS_ENDPOINT_URL or the root's endpoint_override) "
        "and the network"
    ], out.stderr
    assert "curlCode" not in out.stderr and "AWS Error" not in out.stderr
    assert PROBE <= seconds < PROBE + 20  # the probe's time, plus the CLI's start-up


class _Clock:
    """``reach``'s ``time``: monotonic seconds that only ``sleep`` advances."""

    def __init__(self) -> None:
        self.t = 0.0

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


@pytest.mark.parametrize("seconds", [PROBE, 1.0, 0.2, 5.0])
def test_the_probe_tries_for_the_time_it_states(monkeypatch, seconds):
    """A refused endpoint is tried until the stated time has passed, never less: the test
    above timed the CLI's start-up plus the probe against PROBE, and the probe used to give
    up as soon as one more 0.5 s wait would pass the deadline (after 1.0 s of a stated
    1.5 s), so a quick start-up failed it. On a clock that only the waits advance (an
    instant refusal), the last try is at the deadline."""
    clock, tries = _Clock(), []
    monkeypatch.setattr(reach, "time", clock)

    def refused(uri, timeout):
        tries.append(clock.t)
        return "could not connect"

    monkeypatch.setattr(reach, "_head", refused)
    assert reach.unreachable("s3://results/job", seconds) == "could not connect"
    assert clock.t == pytest.approx(seconds) and tries[-1] == pytest.approx(seconds)
    assert all(b - a <= 0.5 + 1e-9 for a, b in pairwise(tries))  # every 0.5 s


def test_a_live_endpoint_answers_the_probe_at_once(aws):
    with moto_server() as endpoint:
        aws.setenv("AWS_ENDPOINT_URL", endpoint)
        t0 = time.monotonic()
        assert reach.unreachable("s3://no-such-bucket/x") is None  # a 404 is an answer
        assert time.monotonic() - t0 < PROBE


def test_a_store_lost_during_a_command_is_the_same_one_line(aws, tmp_path):
    """The probe passed when the root was opened; the endpoint then stops: the command's own
    request fails in pyarrow, and the CLI says the line above, not pyarrow's text."""
    with moto_server() as endpoint:
        aws.setenv("AWS_ENDPOINT_URL", endpoint)
        bucket = new_bucket(s3_client(endpoint))
        root = f"s3://{bucket}/results"
        Layout.open(root)  # probed: the endpoint answered
    # the server is stopped here (its port closed)
    result = CliRunner().invoke(main, ["status", root])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"Error: cannot reach the object store at {endpoint} (could not connect; tried for"
    ), result.output


def test_other_errors_are_not_called_unreachable():
    assert not reach.network_error(ValueError("Parser Error: syntax error at or near FROM"))
    assert reach.explain(KeyError("tokens")) is None
