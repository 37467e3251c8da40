"""Tiers are declared in one place, tests/conftest.py: no test file marks its own."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
TIER_MARK = re.compile(r"\bmark\.(slow|e2e|gpu|chaos)\b")


def test_no_test_file_marks_its_own_tier() -> None:
    found = [
        f"{p.relative_to(TESTS)}:{n}"
        for p in sorted(TESTS.rglob("*.py"))
        if p.name not in ("conftest.py", "test_tiers.py")
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if TIER_MARK.search(line)
    ]
    assert not found, f"declare the tier in tests/conftest.py's lists instead: {found}"


def _tier_lists():
    """tests/conftest.py, loaded from its file: ``import conftest`` may give another
    folder's conftest (tests/reliability/ has one) when the whole suite runs."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("tier_lists", TESTS / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_declared_test_exists() -> None:
    """A renamed test must not drop out of its tier silently."""
    lists = _tier_lists()
    for name in lists.E2E_TESTS | lists.SLOW_TESTS:
        module, func = name.split("::")
        text = (TESTS / f"{module}.py").read_text(encoding="utf-8")
        assert re.search(rf"^def {func}\(", text, re.MULTILINE), name
    modules = lists.E2E_MODULES | lists.SLOW_MODULES | lists.GPU_MODULES | lists.CHAOS_MODULES
    for module in modules:
        assert any(TESTS.rglob(f"{module}.py")), module
