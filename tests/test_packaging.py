"""The wheel ships what a source checkout has: the top-level ``queries/`` as ``mixscope/queries``.

The named queries are a top-level folder of the repository (people read them), not a link
into the package; the build copies them into the wheel (pyproject's force-include). These
tests build the real wheel and import mixscope from it, so a query that would be missing
from an installed mixscope fails here, not on a user's machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(REPO)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (built,) = out.glob("mixscope-*.whl")
    return built


def test_the_wheel_holds_every_query_byte_for_byte(wheel: Path) -> None:
    queries = sorted((REPO / "queries").glob("*.sql"))
    assert len(queries) >= 10
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        for q in queries:
            assert z.read(f"mixscope/queries/{q.name}") == q.read_bytes(), q.name
        shipped = {n for n in names if n.startswith("mixscope/queries/")}
    assert shipped == {f"mixscope/queries/{q.name}" for q in queries}  # nothing else there
    assert "mixscope/py.typed" in names
    assert not any(n.startswith("queries/") for n in names)  # no stray top-level package


def test_an_installed_wheel_reads_its_queries(wheel: Path, tmp_path: Path) -> None:
    """mixscope imported from the unpacked wheel (first on the path) finds the shipped
    folder, not the checkout's, and parses the same queries."""
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    probe = (
        "import json, mixscope.sql.named as n; "
        "print(json.dumps([str(n.query_folder()), sorted(n.all_queries())]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(site)},
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    folder, names = json.loads(done.stdout)
    assert Path(folder) == site / "mixscope" / "queries"
    assert names == sorted(p.stem for p in (REPO / "queries").glob("*.sql"))
