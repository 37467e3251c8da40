"""Progress of a run for the operator watching it: tokens/s, shards done and failed, ETA.

On a terminal it is a tqdm bar (documents, with the bar's own ETA) whose postfix carries
the shard counts and the token rate. Anywhere else — a Ray job's log, a file, a pipe — a
bar is noise (carriage returns, one redraw per update), so it writes one plain line at most
every ``interval`` seconds (``MIXSCOPE_PROGRESS_INTERVAL``, default 10), a line at once when
a shard fails (the operator should not wait for the next tick to learn it), and a last line
when the run's invocation ends.

The counts start from what earlier invocations committed (``done_docs`` / ``done_shards``),
the rates and the ETA only from this invocation's work, so a resumed run's ETA is not
inflated by shards it skipped.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from mixscope.errors import MixscopeError, first_line

#: seconds between two progress lines when stderr is not a terminal
INTERVAL_ENV = "MIXSCOPE_PROGRESS_INTERVAL"
DEFAULT_INTERVAL = 10.0


def interval_from_env() -> float:
    raw = os.environ.get(INTERVAL_ENV, "").strip()
    if not raw:
        return DEFAULT_INTERVAL
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also NaN
        raise MixscopeError(f"{INTERVAL_ENV}={raw!r}: expected seconds >= 0")
    return value


def duration(seconds: float) -> str:
    """``42s``, ``3m07s``, ``2h05m``: what an operator reads at a glance."""
    if seconds != seconds or seconds == float("inf"):
        return "?"
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Progress:
    """Fed by the driver: ``shard_done`` per commit, ``shard_failed`` per shard given up."""

    def __init__(
        self,
        *,
        total_docs: int,
        done_docs: int,
        total_shards: int,
        done_shards: int,
        label: str,
        enabled: bool = True,
        interval: float | None = None,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total_docs, self.done_docs = total_docs, done_docs
        self.total_shards, self.done_shards = total_shards, done_shards
        self.failed_shards = 0
        self.retries = 0
        self.session_docs = 0
        self.tokens = 0
        self.label = label
        self.enabled = enabled
        self.interval = interval_from_env() if interval is None else interval
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.start = clock()
        self.last_line = self.start
        self._printed: tuple[int, int] | None = None  # (done, failed) of the last line
        self.bar: Any = None
        if enabled and _isatty(self.stream):
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=total_docs,
                initial=done_docs,
                unit="doc",
                desc=label,
                dynamic_ncols=True,
                file=self.stream,
            )
            self.bar.set_postfix_str(self._postfix(), refresh=False)

    # -- what the driver reports --------------------------------------------------------

    def shard_done(self, docs: int, tokens: int) -> None:
        self.done_docs += docs
        self.session_docs += docs
        self.done_shards += 1
        self.tokens += tokens
        if self.bar is not None:
            self.bar.set_postfix_str(self._postfix(), refresh=False)
            self.bar.update(docs)
        else:
            self._tick(final=self.done_shards + self.failed_shards >= self.total_shards)

    def shard_retry(self) -> None:
        self.retries += 1
        if self.bar is not None:
            self.bar.set_postfix_str(self._postfix())

    def shard_failed(self, shard_id: int, error: str) -> None:
        self.failed_shards += 1
        if not self.enabled:
            return
        message = f"mixscope: {self.label}: shard {shard_id} failed: {first_line(error)}"
        if self.bar is not None:
            self.bar.set_postfix_str(self._postfix(), refresh=False)
            self.bar.write(message, file=self.stream)
        else:
            self._print(message)
            self._tick(force=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elif (self.session_docs or self.failed_shards) and self._printed != self._state():
            self._tick(force=True)  # the last state, unless the last line already said it

    # -- the text -----------------------------------------------------------------------

    def tokens_per_second(self) -> float:
        return self.tokens / max(self.clock() - self.start, 1e-9)

    def eta_seconds(self) -> float:
        """Remaining documents at this invocation's document rate (inf before the first)."""
        remaining = self.total_docs - self.done_docs
        if remaining <= 0:
            return 0.0
        elapsed = self.clock() - self.start
        if self.session_docs == 0 or elapsed <= 0:
            return float("inf")
        return remaining * elapsed / self.session_docs

    def _postfix(self) -> str:
        text = f"shards {self.done_shards}/{self.total_shards}"
        if self.failed_shards:
            text += f", {self.failed_shards} failed"
        if self.retries:
            text += f", {self.retries} retried"
        return text + f", {self.tokens_per_second():,.0f} tok/s"

    def line(self) -> str:
        """One self-contained log line: a reader of a job log sees the state in any line."""
        return (
            f"mixscope: {self.label}: {self.done_docs}/{self.total_docs} docs, "
            f"{self._postfix()}, ETA {duration(self.eta_seconds())}"
        )

    def _tick(self, *, force: bool = False, final: bool = False) -> None:
        if not self.enabled:
            return
        t = self.clock()
        if force or final or t - self.last_line >= self.interval:
            self.last_line = t
            self._printed = self._state()
            self._print(self.line())

    def _state(self) -> tuple[int, int]:
        return (self.done_shards, self.failed_shards)

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)


def size(n: float) -> str:
    """``512 B``, ``3.4 MB``, ``1.2 GB`` (powers of 1000, as a bar's unit_scale shows them)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    raise AssertionError  # pragma: no cover


class ByteProgress:
    """Bytes read of a known total (``status --verify``, ``run --repair`` hashing every
    committed file): a bar on a terminal, else a line at most every ``interval`` seconds
    and a last one if any was written, so a small root prints nothing and a large one is
    never silent for long. ``read`` may be called from several threads at once."""

    def __init__(
        self,
        total: int,
        label: str,
        *,
        enabled: bool = True,
        interval: float | None = None,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        import threading

        self.total, self.label, self.enabled = total, label, enabled
        if interval is None:  # a bad variable fails only where progress is shown
            interval = interval_from_env() if enabled else 0.0
        self.interval = interval
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.start = self.last_line = clock()
        self.done = 0
        self.lines = 0
        self._printed = -1  # bytes done at the last line
        self._lock = threading.Lock()
        self.bar: Any = None
        if enabled and _isatty(self.stream):
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=total, unit="B", unit_scale=True, desc=label, file=self.stream, leave=False
            )

    def read(self, n: int) -> None:
        with self._lock:
            self.done += n
            if self.bar is not None:
                self.bar.update(n)
            elif self.enabled and self.clock() - self.last_line >= self.interval:
                self._line()

    def close(self) -> None:
        with self._lock:
            if self.bar is not None:
                self.bar.close()
                self.bar = None
            elif self.lines and self._printed != self.done:
                self._line()

    def line(self) -> str:
        elapsed = max(self.clock() - self.start, 1e-9)
        rate = self.done / elapsed
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        return (
            f"mixscope: {self.label}: {size(self.done)} of {size(self.total)} "
            f"({size(rate)}/s), ETA {duration(max(eta, 0.0))}"
        )

    def _line(self) -> None:
        self.last_line = self.clock()
        self.lines += 1
        self._printed = self.done
        print(self.line(), file=self.stream, flush=True)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
