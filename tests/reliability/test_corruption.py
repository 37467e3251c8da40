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
from mixscope.sql.views import connect
from mixscope.status import run_status, shard_status
from mixscope.store import manifest
from mixscope.store.generations import latest
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


# -- the scrub: one flipped byte (issue 29) -------------------------------------------------

FLIPS = ["detail file", "documents file", "statistics partial", "generation"]


@pytest.fixture(scope="module")
def partial_root(tiny_bert_dir, tmp_path_factory):
    """(root, run id) of the demo job whose driver died (exit 137) before shard 7's commit,
    in plan order on one actor holding one shard at a time: shards 0-6 committed, their
    statistics still per-shard partials (no consolidation ran: it does every 32 commits and
    at a run's end)."""
    import json

    from run_helpers import driver_process

    out = tmp_path_factory.mktemp("partials") / "out"
    fault = {"crash_before_commit": {"shard": 7, "once": str(out.parent / "m")}}
    args = [
        *cli_args(tiny_bert_dir, out),
        *("--workers", "1", "--set", "runtime.shard_order=plan"),
        *("--set", "runtime.shards_in_flight=1"),
    ]
    proc = driver_process(args, {"MIXSCOPE_FAULTS": json.dumps(fault)})
    proc.wait(timeout=300)
    assert proc.returncode == 137
    layout = Layout.open(str(out))
    (run_id,) = layout.list_dirs(layout.runs_dir())
    # shards 0-6 committed in order (the flips below read shards 2 and 5), none merged
    assert latest(layout, run_id).generation == 0
    assert sorted(manifest.commits(layout, run_id)) == list(range(7))
    return str(out), run_id


def _documents(root: str) -> list[dict]:
    """Every committed documents row, by doc_id."""
    layout = Layout.open(root)
    rows = []
    for path in manifest.committed_files(layout, "documents"):
        rows += layout.read_table(path).to_pylist()
    return sorted(rows, key=lambda r: r["doc_id"])


def _flip(layout: Layout, run_id: str, case: str) -> tuple[Path, set[int], list[str]]:
    """One unreadable byte in the case's file; (the file, the shards a repair must redo,
    the command that reads it)."""
    from run_helpers import arrow_read, flip_unreadable

    commits = manifest.commits(layout, run_id)
    root = layout.root
    if case == "detail file":
        path = Path(layout.absolute(commits[2].files["tokens"].path))
        flip_unreadable(path, names_file=False)  # DuckDB's riddle, no file named
        return path, {2}, ["sql", root, "SELECT * FROM tokens"]
    if case == "documents file":
        path = Path(layout.absolute(commits[5].files["documents"].path))
        flip_unreadable(path, arrow_read)  # read by the report's example
        return path, {5}, ["report", root, "-o", str(Path(root).parent / "r.html")]
    if case == "statistics partial":
        sid = min(commits)  # a committed shard of the run whose driver died
        path = Path(layout.absolute(commits[sid].files["token_stats"].path))
        assert "/_partial/" in str(path)
        flip_unreadable(path, column="token_id")
        return path, {sid}, ["query", root, "top_tokens"]
    gen = latest(layout, run_id)
    path = Path(layout.absolute(gen.files["layer_stats"]["path"]))
    flip_unreadable(path, column="layer")
    return path, set(gen.shards), ["query", root, "layer_profile"]


@pytest.mark.scenario(
    "One flipped byte in a committed file (the scrub)",
    injected="after the commit, one bit of one byte of the file named in the test id "
    "(size unchanged; a byte its reader fails on); the statistics partial in a run whose "
    "driver died before its last commit",
    checked="plain `status` sees nothing (same size); `status --verify` exits 1 naming the "
    "shard (or generation) and the file; sql / query / report fail on one line naming the "
    "file and pointing at `status --verify`; `run --repair` redoes exactly that shard (a "
    "generation: the shards it covers); then `status --verify` passes and detail, "
    "statistics and documents equal a clean run",
)
@pytest.mark.parametrize("case", FLIPS)
def test_flipped_byte_is_found_named_and_repaired(
    case, tiny_bert_dir, tmp_path, clean_run, request
):
    summary, clean_root, clean_hash = clean_run
    source, run_id = (
        request.getfixturevalue("partial_root")
        if case == "statistics partial"
        else (clean_root, summary.run_id)
    )
    root = tmp_path / "root"
    shutil.copytree(source, root)
    layout = Layout.open(str(root))
    committed = set(manifest.commits(layout, run_id))
    path, redo, reader = _flip(layout, run_id, case)
    rel = layout.relative(str(path))

    assert run_status(str(root))[0]["damaged"] == []  # same size: only the hash can tell
    found = CliRunner().invoke(main, ["status", str(root), "--verify", "--no-progress"])
    assert found.exit_code == 1, found.output
    owner = "statistics generation 1" if case == "generation" else f"shard {min(redo)}"
    assert f"{run_id} DAMAGED {owner}: " in found.stdout and rel in found.stdout
    assert f"run {run_id}: {owner}" in found.stderr.strip().splitlines()[-1]
    read = CliRunner().invoke(main, reader)
    assert read.exit_code == 1, read.output
    (line,) = read.stderr.strip().splitlines()
    assert line.startswith(f"Error: cannot read {rel} ({owner} of run {run_id})"), line
    assert f"mixscope status {root} --verify" in line

    repaired = run_job(job_spec(tiny_bert_dir, root), show_progress=False, repair=True)
    assert repaired.status == "complete"
    assert repaired.shards_skipped == len(committed - redo)  # exactly those (+ the pending)
    assert len(manifest.commits(layout, run_id)) == summary.shards_total
    clean = CliRunner().invoke(main, ["status", str(root), "--verify", "--no-progress"])
    assert clean.exit_code == 0, clean.output
    assert content_hash(str(root)) == clean_hash
    assert _documents(str(root)) == _documents(clean_root)
