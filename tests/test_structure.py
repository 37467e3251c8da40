"""The shape of the code base, checked: what a newcomer relies on without reading everything.

- no module in ``src/`` over 400 lines (one concept per file);
- the measure names are defined once (``mixscope/measures.py``): no other module spells
  the five-name tuple out, and every named query that lists measures lists exactly the
  schema's (so adding a measure fails here until each query knows it);
- Ray is imported only by the Ray executor modules (the worker is a plain class);
- the package root and the CLI stay import-light (no torch, ray or pyarrow at load).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mixscope.store.schema import MEASURE_COLUMNS, STORED_MEASURES

SRC = Path(__file__).resolve().parents[1] / "src" / "mixscope"
MODULES = sorted(SRC.rglob("*.py"))
QUERIES = sorted((SRC / "queries").glob("*.sql"))
MAX_LINES = 400
#: the only modules that may import ray (runtime/executor.py is the contract they implement)
RAY_MODULES = {"runtime/actor_pool.py", "runtime/ray_executor.py", "runtime/submit.py"}


def _rel(path: Path) -> str:
    return path.relative_to(SRC).as_posix()


def test_the_tree_was_found() -> None:
    assert len(MODULES) > 50 and len(QUERIES) >= 10


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_no_module_over_the_line_limit(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{_rel(path)} has {lines} lines (> {MAX_LINES}): split it"


def _string_tuples(path: Path) -> list[tuple[str, ...]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        strings = isinstance(node, ast.Tuple | ast.List) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts
        )
        if strings and node.elts:  # type: ignore[attr-defined]
            out.append(tuple(e.value for e in node.elts))  # type: ignore[attr-defined]
    return out


def test_measure_names_are_defined_once() -> None:
    owners = [
        _rel(p)
        for p in MODULES
        for t in _string_tuples(p)
        if set(t) >= set(STORED_MEASURES) and set(t) <= set(MEASURE_COLUMNS)
    ]
    assert owners == ["measures.py"], owners


MEASURE_NAME = re.compile(r"\b(attn\w*_[wn])\b")


@pytest.mark.parametrize("path", QUERIES, ids=lambda p: p.name)
def test_named_queries_list_the_schemas_measures(path: Path) -> None:
    body = "\n".join(
        line.split("--", 1)[0] for line in path.read_text(encoding="utf-8").splitlines()
    )
    named = set(MEASURE_NAME.findall(body))
    assert named <= set(MEASURE_COLUMNS), (
        f"{path.name}: unknown measures {named - set(MEASURE_COLUMNS)}"
    )
    if named:  # a query that spells measures out spells out every stored one
        assert named >= set(STORED_MEASURES), f"{path.name} lacks {set(STORED_MEASURES) - named}"


def test_ray_is_imported_only_by_the_ray_executor() -> None:
    importers = set()
    for p in MODULES:
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n == "ray" or n.startswith("ray.") for n in names):
                importers.add(_rel(p))
    assert importers == RAY_MODULES


def test_cli_import_is_light() -> None:
    code = (
        "import sys, mixscope.cli\n"
        "heavy = [m for m in ('torch', 'ray', 'pyarrow', 'transformers', 'duckdb') "
        "if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
