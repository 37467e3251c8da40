"""The run record is typed and versioned (store/run_record.py): older records read, unknown
keys survive a rewrite, and a damaged record is one line of damage, not a KeyError."""

import json

import pytest
from click.testing import CliRunner

from mixscope.cli import main
from mixscope.errors import CorruptRecordError
from mixscope.store.layout import Layout
from mixscope.store.run_record import RUN_FORMAT, RunRecord
from mixscope.store.runs import load_run, load_runs, write_run


def _put(root, run_id, record):
    folder = root / "_mixscope" / "runs" / run_id
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps(record))


def test_old_record_reads_as_format_0_and_keeps_unknown_keys(tmp_path):
    _put(tmp_path, "r1", {"run_id": "r1", "status": "complete", "rows": 5, "future": [1, 2]})
    layout = Layout.open(str(tmp_path))
    rec = load_run(layout, "r1")
    assert rec == RunRecord(run_id="r1", status="complete", rows=5, format=0, extra=rec.extra)
    assert rec.extra == {"future": [1, 2]} and rec.detail == "full"
    written = write_run(layout, rec)
    on_disk = json.loads((tmp_path / "_mixscope/runs/r1/run.json").read_text())
    assert on_disk["format"] == RUN_FORMAT == written.format
    assert on_disk["future"] == [1, 2] and on_disk["rows"] == 5 and on_disk["updated_at"]
    assert load_runs(layout)[0].extra["future"] == [1, 2]


def test_a_record_without_run_id_is_damage_not_key_error(tmp_path):
    _put(tmp_path, "r1", {"status": "complete"})
    with pytest.raises(CorruptRecordError, match=r"_mixscope/runs/r1/run.json: no 'run_id'"):
        load_runs(Layout.open(str(tmp_path)))
    result = CliRunner().invoke(main, ["status", str(tmp_path)])
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "no 'run_id'" in lines[0]


def test_a_record_with_a_wrong_kind_is_damage(tmp_path):
    _put(tmp_path, "r1", {"run_id": "r1", "model": "not an object"})
    _put(tmp_path, "r2", {"run_id": "r2", "rows": "many"})
    layout = Layout.open(str(tmp_path))
    with pytest.raises(CorruptRecordError, match="model is not an object"):
        load_run(layout, "r1")
    with pytest.raises(CorruptRecordError, match=r"r2/run\.json"):
        load_run(layout, "r2")


def test_format_1_copies_of_the_spec_read_and_are_not_written_back(tmp_path):
    """Format 1 stored ``runtime`` and ``output`` besides ``spec``; the spec is stored once
    now: an old record reads, and its rewrite keeps the spec and drops the copies."""
    spec = {"runtime": {"workers": 2}, "output": {"detail": "full"}, "model": "m"}
    old = {
        "run_id": "r1",
        "format": 1,
        "spec": spec,
        "runtime": {"workers": 2, "worker_range": [2, 2], "attention": "auto"},
        "output": {"detail": "full"},
        "options": {"output": {"detail": "full"}},
    }
    _put(tmp_path, "r1", old)
    layout = Layout.open(str(tmp_path))
    rec = load_run(layout, "r1")
    assert rec.format == 1 and rec.spec == spec and rec.detail == "full" and not rec.extra
    write_run(layout, rec)
    on_disk = json.loads((tmp_path / "_mixscope/runs/r1/run.json").read_text())
    assert on_disk["spec"] == spec and on_disk["format"] == RUN_FORMAT == 2
    assert "runtime" not in on_disk and "output" not in on_disk
    # a record with no spec keeps what it has (nothing else holds it)
    _put(tmp_path, "r2", {"run_id": "r2", "runtime": {"workers": 3}})
    assert load_run(layout, "r2").extra == {"runtime": {"workers": 3}}
