"""Helpers shared by the benchmark scripts (run them as scripts: ``python benchmarks/x.py``)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: the full WikiText-2 test split, beside the repository (the project's shared data folder)
SHARED_WIKITEXT = REPO.parent / "shared" / "data" / "wikitext-2" / "test.txt"
#: its first 700 paragraphs, bundled (benchmarks/data/README.md)
BUNDLED_WIKITEXT = REPO / "benchmarks" / "data" / "wikitext-2-test-head.txt"


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
