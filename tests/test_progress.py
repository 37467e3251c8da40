"""Progress operators can use (issue 14): tokens/s, shards done/failed, ETA; a bar on a
terminal, one line per interval in a log (runtime/progress.py, fed by the driver)."""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios

import pytest

from mixscope.errors import MixscopeError
from mixscope.runtime.driver import run_job
from mixscope.runtime.faults import ENV as FAULTS
from mixscope.runtime.progress import (
    INTERVAL_ENV,
    ByteProgress,
    Progress,
    duration,
    interval_from_env,
)
from run_helpers import job_spec


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_log_lines_one_per_interval_and_at_once_on_failure():
    clock, out = Clock(), io.StringIO()
    p = Progress(
        total_docs=100,
        done_docs=20,  # committed by an earlier invocation: counted, not in the rates
        total_shards=10,
        done_shards=2,
        label="run abc",
        interval=10,
        stream=out,
        clock=clock,
    )
    clock.t = 104
    p.shard_done(10, 4000)  # 4 s in: no line yet
    assert out.getvalue() == ""
    clock.t = 110
    p.shard_done(10, 1000)  # 10 s in: one line; 20 docs in 10 s, 60 to go → 30 s
    clock.t = 112
    p.shard_retry()
    p.shard_done(10, 1000)  # 2 s after the last line: none
    clock.t = 115
    p.shard_failed(7, "RuntimeError: injected\nTraceback ...")  # at once, with the state
    clock.t = 116
    p.shard_done(10, 1000)  # 1 s after the last line: none
    clock.t = 120
    p.close()  # the last state
    p.close()  # closing twice adds nothing
    assert out.getvalue().splitlines() == [
        "mixscope: run abc: 40/100 docs, shards 4/10, 500 tok/s, ETA 30s",
        "mixscope: run abc: shard 7 failed: RuntimeError: injected",
        "mixscope: run abc: 50/100 docs, shards 5/10, 1 failed, 1 retried, 400 tok/s, ETA 25s",
        "mixscope: run abc: 60/100 docs, shards 6/10, 1 failed, 1 retried, 350 tok/s, ETA 20s",
    ]


def test_final_line_once_and_no_line_for_nothing_done():
    clock, out = Clock(), io.StringIO()
    p = Progress(
        total_docs=8,
        done_docs=0,
        total_shards=2,
        done_shards=0,
        label="run x",
        interval=3600,
        stream=out,
        clock=clock,
    )
    clock.t = 101
    p.shard_done(4, 10)
    clock.t = 102
    p.shard_done(4, 10)  # the last shard: a line whatever the interval
    p.close()  # already said
    want = "mixscope: run x: 8/8 docs, shards 2/2, 10 tok/s, ETA 0s"
    assert out.getvalue().splitlines() == [want]
    idle = io.StringIO()
    Progress(
        total_docs=8, done_docs=8, total_shards=2, done_shards=2, label="r", stream=idle
    ).close()
    off = io.StringIO()
    q = Progress(
        total_docs=8, done_docs=0, total_shards=2, done_shards=0, label="r", stream=off,
        enabled=False, interval=0,
    )  # fmt: skip
    q.shard_done(4, 1)
    q.shard_failed(1, "boom")
    q.close()
    assert idle.getvalue() == "" and off.getvalue() == ""


def test_bytes_hashed_one_line_per_interval_and_none_for_a_quick_pass():
    """``status --verify`` hashing a large root: a line per interval with the bytes, rate
    and ETA, a last one at the end; a root hashed within the interval prints nothing."""
    clock, out = Clock(), io.StringIO()
    p = ByteProgress(4_000_000_000, "verify R", interval=10, stream=out, clock=clock)
    clock.t = 105
    p.read(1_000_000_000)  # within the interval: no line
    clock.t = 110
    p.read(1_000_000_000)
    clock.t = 120
    p.read(2_000_000_000)
    p.close()
    assert out.getvalue().splitlines() == [
        "mixscope: verify R: 2.0 GB of 4.0 GB (200.0 MB/s), ETA 10s",
        "mixscope: verify R: 4.0 GB of 4.0 GB (200.0 MB/s), ETA 0s",
    ]
    quick = io.StringIO()
    q = ByteProgress(1000, "verify R", interval=10, stream=quick, clock=clock)
    q.read(1000)
    q.close()
    off = io.StringIO()
    r = ByteProgress(1000, "verify R", enabled=False, interval=0, stream=off, clock=clock)
    r.read(10)
    r.close()
    assert quick.getvalue() == "" and off.getvalue() == ""


def test_interval_from_the_environment(monkeypatch):
    monkeypatch.delenv(INTERVAL_ENV, raising=False)
    assert interval_from_env() == 10.0
    monkeypatch.setenv(INTERVAL_ENV, "2.5")
    assert interval_from_env() == 2.5
    for bad in ("-1", "soon", "nan"):
        monkeypatch.setenv(INTERVAL_ENV, bad)
        with pytest.raises(MixscopeError, match=f"{INTERVAL_ENV}='{bad}': expected seconds"):
            interval_from_env()
    assert [duration(s) for s in (0, 59.4, 61, 3599, 7500, float("inf"))] == [
        "0s",
        "59s",
        "1m01s",
        "59m59s",
        "2h05m",
        "?",
    ]


_TTY_SCRIPT = """
import sys, time
from mixscope.runtime.progress import Progress
p = Progress(total_docs=12, done_docs=0, total_shards=3, done_shards=0, label="run tty",
             interval=0)
p.shard_done(4, 400)
p.shard_failed(1, "RuntimeError: injected")
p.shard_done(4, 400)
p.close()
print("END", file=sys.stderr, flush=True)
"""


def test_terminal_gets_a_bar_not_log_lines():
    """A pseudo-terminal as stderr: tqdm's bar (docs, its ETA) with the shard counts and
    the token rate as postfix, the failure written above it, no periodic log lines."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 160, 0, 0))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _TTY_SCRIPT], stderr=follower, stdout=subprocess.DEVNULL, env=env
    )
    os.close(follower)
    chunks = []
    while True:
        ready, _, _ = select.select([leader], [], [], 60)
        if not ready:
            break
        try:
            data = os.read(leader, 4096)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(60) == 0
    os.close(leader)
    text = b"".join(chunks).decode("utf-8", "replace")
    assert "END" in text
    assert "\r" in text  # redrawn in place: a bar
    assert "mixscope: run tty: shard 1 failed: RuntimeError: injected" in text
    bar = r"run tty: +\d+%.*\| 8/12 \[.*<.*doc/s, shards 2/3, 1 failed, [\d,]+ tok/s"
    assert re.search(bar, text)
    assert "docs, shards" not in text  # not the log line format


def test_a_real_job_logs_its_shards_and_failures(tiny_bert_dir, tmp_path, capfd, monkeypatch):
    """A real job (local executor, 8 shards of 4 documents, shard 2 always failing) with
    stderr not a terminal: one line per commit at interval 0, the failure when it happens,
    and the counts of the run's summary in the last line. One shard in flight, so the
    lines come in plan order (with two, shard 2's failure may come before shard 1's commit)."""
    monkeypatch.setenv(INTERVAL_ENV, "0")
    monkeypatch.setenv(FAULTS, json.dumps({"fail": {"shard": 2}}))
    local = {"runtime.executor": "local", "runtime.shards_in_flight": 1}
    spec = job_spec(tiny_bert_dir, tmp_path / "out", **local)
    summary = run_job(spec)
    assert summary.shards_done == 7 and summary.shards_failed == 1
    lines = [x for x in capfd.readouterr().err.splitlines() if x.startswith("mixscope: run")]
    label = f"mixscope: run {summary.run_id}: "
    failed = [x for x in lines if " failed: " in x]
    assert failed == [label + "shard 2 failed: RuntimeError: injected failure in shard 2"]
    state = r".*: (\d+)/30 docs, shards (\d)/8(, 1 failed)?(, 1 retried)?"
    states = [re.match(state, x) for x in lines]
    assert all(states[i] for i, x in enumerate(lines) if x not in failed)
    done = [int(m.group(2)) for m in states if m]
    assert done == [1, 2, 2, 3, 4, 5, 6, 7]  # one line per commit, one with the failure
    assert lines[-1].startswith(label + "26/30 docs, shards 7/8, 1 failed, 1 retried, ")
    # resumed with the cause fixed: counts start from the 7 committed shards
    monkeypatch.delenv(FAULTS)
    again = run_job(spec)
    assert again.shards_done == 8 and again.shards_skipped == 7
    lines = [x for x in capfd.readouterr().err.splitlines() if x.startswith("mixscope: run")]
    assert len(lines) == 1
    assert lines[0].startswith(label + "30/30 docs, shards 8/8, ") and lines[0].endswith("ETA 0s")
