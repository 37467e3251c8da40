"""Helpers shared by the benchmark scripts (run them as scripts: ``python benchmarks/x.py``)."""

from __future__ import annotations

from pathlib import Path


def source_state() -> str:
    """The commit of the code measured, and whether src/ differs from it (read-only git)."""
    import subprocess

    repo = Path(__file__).resolve().parents[1]
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
