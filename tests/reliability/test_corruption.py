"""Corruption after commit: status reports it, queries refuse it, ``--repair`` redoes
exactly the affected shards, and the repaired results equal a clean run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from mixscope.cli import main
from mixscope.errors import MixscopeError
from mixscope.runtime.driver import run_job
from mixscope.runtime.status import run_status, shard_status
from mixscope.sql.views import connect
from mixscope.stats.consolidate import latest
from mixscope.store import manifest
from mixscope.store.layout import Layout
from run_helpers import cli_args, content_hash, job_spec


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _damage(layout: Layout, run_id: str, case: str) -> tuple[set[int], str]:
    """Damage the copied root; (the shards a repair must redo, the damage's words)."""
    commits = manifest.commits(layout, run_id)
    if case == "tokens file deleted":
        Path(layout.absolute(commits[2].files["tokens"].path)).unlink()
        return {2}, "tokens file missing"
    if case == "tokens file truncated":
        _truncate(Path(layout.absolute(commits[5].files["tokens"].path)))
        return {5}, "tokens file truncated"
    if case == "commit record truncated":
        _truncate(Path(layout.commit_file(run_id, 4)))
        return {4}, "commit record unreadable"
    if case == "consolidated statistics truncated":
        gen = latest(layout, run_id)
        _truncate(Path(layout.absolute(gen.files["token_stats"]["path"])))
        return set(gen.shards), "token_stats file truncated"
    raise AssertionError(case)


CASES = [
    "tokens file deleted",
    "tokens file truncated",
    "commit record truncated",
    "consolidated statistics truncated",
]


@pytest.mark.scenario(
    "Corruption after commit",
    injected="after a complete run: the damage named in the test id",
    checked="status names the damage; SQL and `run` refuse with one line; `run --repair` "
    "redoes exactly the affected shards (all of a generation's for its statistics) and "
    "the results equal a clean run",
)
@pytest.mark.parametrize("case", CASES)
def test_corruption_is_reported_refused_and_repaired(case, tiny_bert_dir, tmp_path, clean_run):
    summary, clean_root, clean_hash = clean_run
    root = tmp_path / "root"
    shutil.copytree(clean_root, root)
    layout = Layout.open(str(root))
    run_id = summary.run_id
    redo, words = _damage(layout, run_id, case)

    (status,) = run_status(str(root))
    assert status["damaged"] and words in status["damaged"][0]["what"], status["damaged"]
    states = {s["shard"]: s["state"] for s in shard_status(str(root), run_id)}
    shard_damage = {k for k, v in states.items() if v == "damaged"}
    assert shard_damage == (redo if case != "consolidated statistics truncated" else set())
    with pytest.raises(MixscopeError, match=f"run {run_id} has damaged results .*{words}"):
        connect(str(root))
    result = CliRunner().invoke(main, ["sql", str(root), "SELECT count(*) FROM tokens"])
    assert result.exit_code == 1 and len(result.stderr.strip().splitlines()) == 1
    result = CliRunner().invoke(main, ["run", *cli_args(tiny_bert_dir, root), "--no-progress"])
    assert result.exit_code == 1 and "--repair" in result.stderr.strip().splitlines()[-1]

    repaired = run_job(job_spec(tiny_bert_dir, root), show_progress=False, repair=True)
    assert repaired.status == "complete"
    assert repaired.shards_skipped == summary.shards_total - len(redo)
    assert run_status(str(root))[0]["damaged"] == []
    assert content_hash(str(root)) == clean_hash
