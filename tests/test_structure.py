"""The shape of the code base, checked: what a newcomer relies on without reading everything.

- no module in ``src/`` over 400 lines (one concept per file);
- one home per measure: its name is spelled only in the registry (``registry.py``, every
  group's metadata), its group's tensor file (``mixing/measures/<group>.py``) and that
  group's named queries; every group states its contract (definition, columns with label
  and colour, tensor code, exactness check);
- Ray is imported only by the Ray executor modules (the worker is a plain class);
- the layering is one-way: every package and top-level module has a rank and imports only
  lower ranks (``RANKS``; lazy imports inside functions count too), storage, statistics,
  SQL and the report read the registry, never the tensor package (``NEVER``), and no circle
  of imports runs inside a package;
- the package root and the CLI stay import-light (no torch, ray or pyarrow at load).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mixscope.mixing.measures import GROUPS
from mixscope.mixing.measures.base import MeasureGroup
from mixscope.registry import CODES, all_columns, group_of
from mixscope.store.schema import STORED_MEASURES

SRC = Path(__file__).resolve().parents[1] / "src" / "mixscope"
MODULES = sorted(SRC.rglob("*.py"))
QUERIES = sorted((SRC.parents[1] / "queries").glob("*.sql"))  # the top-level folder
MAX_LINES = 400
#: the only modules that may import ray (runtime/executor.py is the contract they implement;
#: runtime/auth.py re-reads Ray's settings before a driver attaches)
RAY_MODULES = {
    "runtime/actor_pool.py",
    "runtime/auth.py",
    "runtime/ray_executor.py",
    "runtime/submit.py",
}


def _rel(path: Path) -> str:
    """A module's path in the package; a query's in the repository (``queries/x.sql``)."""
    if path.suffix == ".sql":
        return path.relative_to(SRC.parents[1]).as_posix()
    return path.relative_to(SRC).as_posix()


def test_the_tree_was_found() -> None:
    assert len(MODULES) > 50 and len(QUERIES) >= 10


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_no_module_over_the_line_limit(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{_rel(path)} has {lines} lines (> {MAX_LINES}): split it"


#: example command lines in ``--help`` texts may spell a measure (what a user types)
EXAMPLE = re.compile(r"^\s*mixscope (sql|query|analyze) ")
GROUP_HEADER = re.compile(r"^--\s*(?:group|also):\s*(.+)$", re.MULTILINE)


def _home(path: Path) -> set[str]:
    """The groups whose measures ``path`` may spell: the registry (all), a group's own
    file, or a named query that declares its groups (``-- group: sink``, ``-- group: paper,
    ff``)."""
    rel = _rel(path)
    if rel == "registry.py":
        return set(GROUPS)
    if rel.startswith("mixing/measures/") and path.stem in GROUPS:
        return {path.stem}
    if path.suffix == ".sql":
        found = GROUP_HEADER.findall(path.read_text(encoding="utf-8"))
        return {g.strip() for line in found for g in line.split(",")}
    return set()


def test_a_measure_is_spelled_only_in_its_groups_file() -> None:
    """One home per measure: its name appears in the package only in the registry, its
    group's file (and the named queries of that group), never in a schema, a view, a query
    or a figure that lists measures (those are generated from the registry); --help
    examples aside."""
    files = MODULES + QUERIES
    names = {c.name: group_of(c.name) for c in all_columns()}
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    found = []
    for path in files:
        home = _home(path)
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if EXAMPLE.match(line):
                continue
            for m in pattern.findall(line):
                if names[m] not in home:
                    found.append(f"{_rel(path)}:{n}: {m}")
    assert not found, found


@pytest.mark.parametrize("name", list(GROUPS))
def test_every_group_states_its_contract(name: str) -> None:
    g = GROUPS[name]
    module = sys.modules[type(g).__module__]
    assert module.__doc__ and len(module.__doc__.splitlines()) >= 5  # definition and source
    assert g.name == name and g.title and g.columns and g.needs
    assert all(c.label and re.fullmatch(r"#[0-9a-f]{6}", c.color) for c in g.columns)
    assert type(g).compute is not MeasureGroup.compute and type(g).check is not MeasureGroup.check
    colors = [c.color for c in all_columns()]
    assert len(set(colors)) == len(colors)  # every measure its own colour in every figure


def test_stored_codes_are_append_only() -> None:
    """The histogram files store each measure's code: the paper's four keep 0-3."""
    assert list(CODES)[:4] == list(STORED_MEASURES) and list(CODES.values()) == list(
        range(len(CODES))
    )


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


#: every package and top-level module of mixscope, lowest first: a unit imports only units
#: of a lower rank (at module level or lazily: a lazy import still couples the two), so
#: data flows one way and no cycle can form. Equal ranks do not import each other.
RANKS: dict[str, int] = {
    "errors": 0,
    "_version": 0,
    "format": 0,
    "frames": 1,
    "registry": 1,  # the measure groups' metadata (torch-free): every layer above reads it
    "choices": 2,  # the spec fields' closed sets (the group names: the registry's)
    "models": 2,  # architecture adapters and config reading: what a model is
    "config": 3,  # job specs (the model's defaults: models)
    "store": 3,  # takes what it stores (plain values, typed records), never a job spec
    "corpus": 4,
    "mixing": 5,  # the engine and the measure groups' tensor code
    "stats": 8,
    "api": 8,
    "sql": 9,
    "runtime": 9,
    "compare": 10,
    "status": 10,
    "report": 11,
    "checkpoints": 11,
    "results": 12,
    "cli": 13,
    "__init__": 14,  # the package root: lazy faces of the API
}


#: what a unit may not import whatever its rank: storage, statistics, SQL and the report
#: read the measures' metadata from the registry, never from the tensor code (nor torch's
#: model side: they must read results without a model)
NEVER: dict[str, set[str]] = {
    "stats": {"mixing", "models", "config"},
    "sql": {"mixing", "models", "config"},
    "report": {"mixing", "models"},
}


def _unit(path: Path) -> str:
    rel = _rel(path)
    return rel.split("/")[0] if "/" in rel else rel.removesuffix(".py")


def test_every_unit_has_a_rank() -> None:
    assert {_unit(p) for p in MODULES} == set(RANKS)


def _mixscope_imports(path: Path) -> set[str]:
    """The mixscope packages and top-level modules a module imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
            if node.module == "mixscope":  # from mixscope import errors, … (not __version__)
                names = [f"mixscope.{a.name}" for a in node.names if a.name in RANKS]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        found |= {n.split(".")[1] for n in names if n.startswith("mixscope.")}
    return found


@pytest.mark.parametrize("unit", sorted(RANKS))
def test_the_layering_is_one_way(unit: str) -> None:
    wrong = {
        f"{_rel(p)} imports mixscope.{t} (rank {RANKS.get(t)} >= {RANKS[unit]})"
        for p in MODULES
        if _unit(p) == unit
        for t in _mixscope_imports(p) - {unit}
        if RANKS.get(t, 99) >= RANKS[unit]
    }
    assert not wrong, sorted(wrong)


@pytest.mark.parametrize("unit", sorted(NEVER))
def test_results_side_never_imports_the_tensor_code(unit: str) -> None:
    wrong = {
        f"{_rel(p)} imports mixscope.{t}"
        for p in MODULES
        if _unit(p) == unit
        for t in _mixscope_imports(p) & NEVER[unit]
    }
    assert not wrong, sorted(wrong)


def test_no_module_imports_its_own_package_in_a_circle() -> None:
    """Inside a package, modules import each other one way too (a lazy import counts): the
    two circles once found (models/resolve.py and the engine through the registry,
    corpus/hf.py and corpus/readers.py) stay gone."""
    edges: dict[str, set[str]] = {}
    for p in MODULES:
        mod = "mixscope." + _rel(p).removesuffix(".py").replace("/", ".")
        mod = mod.removesuffix(".__init__")
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module != mod
                and node.module.startswith("mixscope.")
            ):
                edges.setdefault(mod, set()).add(node.module)
    seen: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[str] = []

    def visit(node: str, path: list[str]) -> None:
        seen[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if seen.get(nxt) == 1:
                cycles.append(" -> ".join([*path[path.index(nxt) :], nxt]))
            elif nxt not in seen:
                visit(nxt, [*path, nxt])
        seen[node] = 2

    for start in sorted(edges):
        if start not in seen:
            visit(start, [start])
    # a package's __init__ re-exporting its own modules is not a circle of concepts
    cycles = [c for c in cycles if not _only_through_init(c)]
    assert not cycles, cycles


def _only_through_init(cycle: str) -> bool:
    """A circle through a package's ``__init__`` (the registry imports its group files,
    which import the registry's base): a package and its parts, not two concepts."""
    return any(
        (SRC.parent / p.replace(".", "/") / "__init__.py").exists() for p in cycle.split(" -> ")
    )


def test_closed_sets_match_their_owners() -> None:
    """config/ validates against choices.py, which names the registry's groups; every
    registry group has its tensor code (found by name); the executors agree."""
    from mixscope import registry
    from mixscope.choices import EXECUTOR_NAMES, MEASURE_GROUPS
    from mixscope.runtime.executor import EXECUTORS

    assert tuple(GROUPS) == MEASURE_GROUPS == tuple(registry.GROUPS)
    assert all(g.info is registry.GROUPS[n] for n, g in GROUPS.items())
    assert set(EXECUTORS) == set(EXECUTOR_NAMES)


def test_cli_import_is_light() -> None:
    code = (
        "import sys, mixscope.cli\n"
        "heavy = [m for m in ('torch', 'ray', 'pyarrow', 'transformers', 'duckdb') "
        "if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_what_crosses_ray_unpickles_without_hugging_face() -> None:
    """The spec and the shards go to a Ray actor as their frozen dataclasses, unpickled
    before ``ray_actor.RayShardWorker`` sets the driver's environment: that must import
    nothing that reads ``HF_HUB_OFFLINE`` and friends on import (ray_actor.py says why)."""
    code = (
        "import pickle, sys\n"
        "from mixscope.config import load_spec\n"
        "from mixscope.corpus.plan import Shard\n"
        "data = pickle.dumps((load_spec(None, {'corpus.paths': ['x']}), Shard(0, 'f', 0, 0, 1)))\n"
        "for m in [m for m in sys.modules if m.startswith('mixscope')]:\n"
        "    del sys.modules[m]\n"
        "pickle.loads(data)\n"
        "print(','.join(m for m in ('transformers', 'huggingface_hub', 'torch') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_the_engine_names_no_capture_point() -> None:
    """Capture points bring their modules and the weights they are read with
    (mixing/points.py), so the engine holds nothing point-specific: it names none of them
    (a new point, an MoE's experts say, is one entry there and its keep in capture.py)."""
    points = re.findall(r'"(\w+)": Point\(', (SRC / "mixing" / "points.py").read_text())
    assert {"attn_norm", "ff_in", "ff_norm"} <= set(points)
    from mixscope.mixing.points import BASE  # every block's own: the engine may say "attention"

    engine = (SRC / "mixing" / "engine.py").read_text(encoding="utf-8")
    spelled = lambda p: any(s in engine for s in (f'"{p}"', f"_{p}", f".{p}"))  # noqa: E731
    named = [p for p in set(points) - BASE if spelled(p)]
    assert named == []
