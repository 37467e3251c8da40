"""Queries do not re-read an unchanged run's records (``store.verify.check_run_cached``),
re-read them once they change (a commit, a consolidation, a damaged record), and still see
every data file missing or truncated behind unchanged records."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mixscope.errors import MixscopeError
from mixscope.sql.views import connect
from mixscope.store import manifest, verify
from mixscope.store.layout import Layout


@pytest.fixture
def reads(monkeypatch):
    """The runs whose records were read (the real ``_expected``), in order."""
    seen: list[str] = []
    real = verify._expected

    def counting(layout, run_id):
        seen.append(run_id)
        return real(layout, run_id)

    monkeypatch.setattr(verify, "_expected", counting)
    monkeypatch.setattr(verify, "_SEEN", {})
    return seen


def _count(root) -> int:
    return connect(str(root)).execute("SELECT count(*) FROM tokens").fetchone()[0]


def test_unchanged_records_are_read_once(real_root, tmp_path, reads):
    root = tmp_path / "root"
    shutil.copytree(real_root["root"], root)
    a, b = real_root["runs"]
    n = _count(root)
    assert sorted(reads) == sorted([a, b])
    for _ in range(3):  # a notebook's refresh(), a report's second connection, …
        assert _count(root) == n
    assert len(reads) == 2
    other = tmp_path / "other"  # another root is its own
    shutil.copytree(real_root["root"], other)
    connect(str(other))
    assert len(reads) == 4

    layout = Layout.open(str(root))
    record = Path(layout.commit_file(a, min(manifest.commits(layout, a))))
    text = record.read_text()
    record.write_text(text[: len(text) // 2])  # a commit record truncated: listing changes
    with pytest.raises(MixscopeError, match=f"run {a} has damaged results"):
        connect(str(root))
    assert reads[-1] == a and len(reads) == 5  # a's records only
    with pytest.raises(MixscopeError, match=f"run {a} has damaged results"):
        connect(str(root))  # same listing: not re-read, still refused
    assert len(reads) == 5
    record.write_text(text)  # restored (a new mtime): read again, clean again
    assert _count(root) == n and len(reads) == 6


def test_a_data_file_lost_behind_unchanged_records_is_still_refused(real_root, tmp_path, reads):
    root = tmp_path / "root"
    shutil.copytree(real_root["root"], root)
    a, _ = real_root["runs"]
    _count(root)
    layout = Layout.open(str(root))
    commit = manifest.commits(layout, a)[min(manifest.commits(layout, a))]
    Path(layout.absolute(commit.files["tokens"].path)).unlink()
    with pytest.raises(MixscopeError, match=f"run {a} has damaged results .*tokens file missing"):
        connect(str(root))
    assert len(reads) == 2  # from the remembered records, by listing the data folders
