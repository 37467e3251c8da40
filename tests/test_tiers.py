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


def test_every_declared_test_exists() -> None:
    """A renamed test must not drop out of its tier silently."""
    import conftest

    for name in conftest.E2E_TESTS | conftest.SLOW_TESTS:
        module, func = name.split("::")
        text = (TESTS / f"{module}.py").read_text(encoding="utf-8")
        assert re.search(rf"^def {func}\(", text, re.MULTILINE), name
    for module in conftest.E2E_MODULES | conftest.SLOW_MODULES | conftest.GPU_MODULES:
        assert (TESTS / f"{module}.py").exists(), module
