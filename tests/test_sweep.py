"""What interrupted work leaves in a run's folders is deleted once the run is complete, and
only then (store/sweep.py), on a real local root: a job run in-process, then the files a
killed writer or consolidation leaves planted beside its own."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from mixscope.runtime.driver import run_job
from mixscope.store import generations, manifest, sweep
from mixscope.store.layout import Layout
from run_helpers import content_hash, job_spec


def _spec(model: str, out: Path):
    return job_spec(model, out, **{"runtime.executor": "local", "runtime.workers": 1})


def _plant(layout: Layout, run_id: str) -> list[str]:
    """One of each leftover: a temporary data file and commit record (a process killed
    between write and rename), a statistics file of a consolidation killed before its
    record, a partial of a shard the newest consolidation covers."""
    gen = generations.latest(layout, run_id)
    kind, entry = next(iter(gen.files.items()))
    real_gen = Path(layout.absolute(entry["path"]))
    tokens = Path(layout.data_file("tokens", run_id, 1))
    planted = [
        tokens.with_name(".part-000001.parquet.1a2b3c4d.tmp"),
        Path(layout.commit_file(run_id, 2)).with_name(".000002.json.5e6f7a8b.tmp"),
        real_gen.with_name("gen-000009-deadbeef.parquet"),
        Path(layout.shard_file(kind, run_id, 3)),
    ]
    assert 3 in gen.shards and not planted[3].exists()  # consolidated: its partial deleted
    for path in planted:
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tokens if path.suffix == ".tmp" else real_gen, path)
    return sorted(str(p) for p in planted)


def test_a_complete_run_deletes_exactly_what_no_record_names(tiny_bert_dir, tmp_path):
    out = tmp_path / "out"
    first = run_job(_spec(tiny_bert_dir, out), show_progress=False)
    assert first.status == "complete"
    layout = Layout.open(str(out))
    assert sweep.leftovers(layout, first.run_id) == []
    before = content_hash(str(out))
    commits = {s: c.to_json() for s, c in manifest.commits(layout, first.run_id).items()}
    planted = _plant(layout, first.run_id)
    assert sweep.leftovers(layout, first.run_id) == planted
    again = run_job(_spec(tiny_bert_dir, out), show_progress=False)  # nothing to compute
    assert again.status == "complete" and again.shards_skipped == again.shards_total
    assert not [p for p in planted if Path(p).exists()]
    assert sweep.leftovers(layout, first.run_id) == []
    assert content_hash(str(out)) == before
    assert {s: c.to_json() for s, c in manifest.commits(layout, first.run_id).items()} == commits


def test_an_incomplete_run_is_not_swept(tiny_bert_dir, tmp_path, monkeypatch):
    """A failed shard: the run may still be resumed, so nothing is deleted yet."""
    out = tmp_path / "out"
    complete = run_job(_spec(tiny_bert_dir, out), show_progress=False)
    layout = Layout.open(str(out))
    planted = _plant(layout, complete.run_id)
    # withdraw shard 5's commit: the rerun must compute it, and it fails every time
    Path(layout.commit_file(complete.run_id, 5)).unlink()
    monkeypatch.setenv("MIXSCOPE_FAULTS", json.dumps({"fail": {"shard": 5}}))
    failed = run_job(_spec(tiny_bert_dir, out), show_progress=False)
    assert failed.status == "failed" and failed.shards_failed == 1
    # the consolidated shard's partial goes with the consolidation at the start (its own
    # rule, stats/consolidate.py); what only the sweep deletes stays
    gone = [p for p in planted if not Path(p).exists()]
    assert gone == [p for p in planted if "/_partial/part-000003" in p], gone
