"""Queries do not re-verify an unchanged run (``store.verify.check_run_cached``), and do
re-verify once its records change (a commit, a consolidation, a damaged record)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mixscope.errors import MixscopeError
from mixscope.sql.views import connect
from mixscope.store import manifest, verify
from mixscope.store.layout import Layout


@pytest.fixture
def checks(monkeypatch):
    """The runs that ``check_run`` (the real one) verified, in order."""
    seen: list[str] = []
    real = verify.check_run

    def counting(layout, run_id, **kw):
        seen.append(run_id)
        return real(layout, run_id, **kw)

    monkeypatch.setattr(verify, "check_run", counting)
    monkeypatch.setattr(verify, "_CLEAN", {})
    return seen


def test_unchanged_runs_are_verified_once(real_root, tmp_path, checks):
    root = tmp_path / "root"
    shutil.copytree(real_root["root"], root)
    a, b = real_root["runs"]
    n = connect(str(root)).execute("SELECT count(*) FROM tokens").fetchone()[0]
    assert sorted(checks) == sorted([a, b])
    for _ in range(3):  # a notebook's refresh(), a report's second connection, …
        assert connect(str(root)).execute("SELECT count(*) FROM tokens").fetchone()[0] == n
    assert len(checks) == 2

    other = tmp_path / "other"  # another root is its own
    shutil.copytree(real_root["root"], other)
    connect(str(other))
    assert len(checks) == 4

    layout = Layout.open(str(root))
    (first, *_) = sorted(manifest.commits(layout, a))
    record = Path(layout.commit_file(a, first))
    text = record.read_text()
    record.write_text(text[: len(text) // 2])  # a commit record truncated: listing changes
    with pytest.raises(MixscopeError, match=f"run {a} has damaged results"):
        connect(str(root))
    assert checks[-1] == a and len(checks) == 5  # re-verified a only
    with pytest.raises(MixscopeError, match=f"run {a} has damaged results"):
        connect(str(root))  # damage is never cached
    record.write_text(text)  # restored (a new mtime): verified again, clean again
    assert connect(str(root)).execute("SELECT count(*) FROM tokens").fetchone()[0] == n
    assert checks[-1] == a and len(checks) == 7
    connect(str(root))
    assert len(checks) == 7
