"""Timing and memory helpers shared by the benchmark scripts.

Interleaved repetitions (the order rotates every repetition) with medians of paired
ratios, so slow drifts and noisy neighbours hit every method alike; peak RSS sampled from
/proc on CPU (run each configuration in a fresh process, with :data:`MALLOC_ENV`).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from common import progress
from models import resolve_device

MALLOC_ENV = {
    # fixed thresholds (dynamic adjustment off): every allocation >= 128 KiB is its own
    # mmap and goes back to the OS when freed, so RSS follows the live tensors
    "MALLOC_MMAP_THRESHOLD_": "131072",
    "MALLOC_TRIM_THRESHOLD_": "131072",
}


def synchronizer(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return torch.cuda.synchronize
    return lambda: None


class Start(NamedTuple):
    """What :func:`start` set up for a timed benchmark's main."""

    device: torch.device
    sync: Callable[[], None]
    t0: float  # time.perf_counter() at the start: the zero of common.progress
    mem_rows: list[dict[str, Any]]  # CPU: measured already; CUDA: none yet


def start(
    args: argparse.Namespace,
    memory_cpu: Callable[[argparse.Namespace], list[dict[str, Any]]],
    what: str,
) -> Start:
    """The first steps of engine.py's and decoder.py's main, one order for both:
    transformers' weight-loading bars off, ``args.threads`` torch threads, ``args.device``
    and its synchronizer, the clock; then on CPU (unless ``args.no_memory``) the memory
    rows of ``memory_cpu``, announced as ``what``. They run *first*, in fresh subprocesses
    while this process is idle, so the children never share the machine with the timing;
    on CUDA the caller measures memory after the timing, on the model it loaded."""
    import transformers

    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    sync = synchronizer(device)
    t0 = time.perf_counter()
    mem_rows: list[dict[str, Any]] = []
    if not args.no_memory and device.type == "cpu":
        progress(what, t0)
        mem_rows = memory_cpu(args)
    return Start(device, sync, t0, mem_rows)


def interleaved(
    methods: dict[str, Callable[[], Any]],
    reps: int,
    sync: Callable[[], None],
    warmup: int = 2,
) -> dict[str, list[float]]:
    """Seconds per call of every method; the order rotates each repetition."""
    names = list(methods)
    for _ in range(warmup):
        for name in names:
            methods[name]()
    sync()
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(reps):
        k = r % len(names)
        order = names[k:] + names[:k]
        if r % 2:
            order.reverse()
        for name in order:
            gc.collect()
            sync()
            t0 = time.perf_counter()
            methods[name]()
            sync()
            times[name].append(time.perf_counter() - t0)
    return times


def paired_ratio(num: list[float], den: list[float]) -> float:
    """Median of the per-repetition ratios (the two ran back to back each time)."""
    return statistics.median(a / b for a, b in zip(num, den, strict=True))


def quartiles(xs: list[float]) -> tuple[float, float]:
    if len(xs) < 4:
        return min(xs), max(xs)
    q = statistics.quantiles(xs, n=4)
    return q[0], q[2]


def current_rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class RssSampler:
    """Peak RSS of this process while active, sampled every ~1 ms from /proc/self/statm."""

    def __init__(self, interval: float = 0.001) -> None:
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, current_rss())
            time.sleep(self.interval)

    def __enter__(self) -> RssSampler:
        self.peak = current_rss()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, current_rss())


def rss_peak_increase(fn: Callable[[], Any]) -> tuple[int, int]:
    """(RSS before, peak RSS increase) in bytes of one call of ``fn``, after a warm-up call.

    Run it in a fresh process (with :data:`MALLOC_ENV`) so the increase is the call's own.
    """
    with torch.inference_mode():
        fn()  # warm-up: lazy library initialization, code pages
        gc.collect()
        base = current_rss()
        with RssSampler() as sampler:
            out = fn()
        del out
    return base, sampler.peak - base


def cuda_peak_mib(fn: Callable[[], Any]) -> float:
    """Peak CUDA MiB of one call of ``fn`` above what was allocated before (after a warm-up)."""
    with torch.inference_mode():
        fn()
        torch.cuda.synchronize()
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        out = fn()
        torch.cuda.synchronize()
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
        del out
    return peak


def mem_available_mb() -> float:
    """MemAvailable from /proc/meminfo, in MiB (0 where unknown)."""
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return 0.0


def child_env() -> dict[str, str]:
    """The environment of a memory child: :data:`MALLOC_ENV`, no tokenizer threads."""
    return {**os.environ, **MALLOC_ENV, "TOKENIZERS_PARALLELISM": "false"}


def run_child(cmd: list[str], what: str) -> dict[str, Any]:
    """Run one memory child (``cmd``) and return the JSON object of its last stdout line."""
    res = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise SystemExit(f"memory child {what} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])
