"""Write-to-temp-then-rename: a reader sees the old file or the new one, never a part."""

from __future__ import annotations

import pytest

from mixscope.store.atomic import replacing, temp_name, write_text


def test_temp_name_is_hidden_unique_and_beside_the_target():
    a, b = temp_name("/x/y/part-000001.parquet"), temp_name("/x/y/part-000001.parquet")
    assert a != b
    folder, name = a.rsplit("/", 1)
    assert folder == "/x/y" and name.startswith(".part-000001.parquet.") and name.endswith(".tmp")


def test_write_text_replaces_the_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "sub" / "state.json"
    write_text(target, "one")
    write_text(target, "two")
    assert target.read_text() == "two"
    assert sorted(p.name for p in target.parent.iterdir()) == ["state.json"]


def test_an_error_while_writing_keeps_the_old_content(tmp_path):
    target = tmp_path / "report.html"
    target.write_text("old")
    with pytest.raises(RuntimeError), replacing(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("disk full")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]
