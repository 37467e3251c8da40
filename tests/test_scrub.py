"""The scrub (issue 29): ``status --verify`` re-hashes every committed file and names what
changed in place; an unreadable committed Parquet is one line naming it in ``sql``,
``query`` and ``report``. On the synthetic results directory (tests/sql_fixtures.py): three
consolidated checkpoint runs, one more, and the ``edge`` run left as per-shard partials.
Repairs and their results against a clean run are the reliability matrix's
(tests/reliability/test_corruption.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from mixscope.cli import main
from mixscope.store import verify
from mixscope.store.generations import latest
from mixscope.store.layout import Layout
from run_helpers import arrow_read, flip_byte, flip_unreadable

#: the damaged file of each case: (kind, run, shard or None for the run's generation)
CASES = {
    "detail": ("tokens", "ckpt-100", 1),
    "documents": ("documents", "other-50", 0),
    "statistics partial": ("token_stats", "edge", 1),
    "generation": ("layer_stats", "ckpt-200", None),
}


def _copy(synth_root, tmp_path) -> tuple[Path, Layout]:
    root = tmp_path / "root"
    shutil.copytree(synth_root["root"], root)
    return root, Layout.open(str(root))


def _file(layout: Layout, case: str) -> Path:
    kind, run_id, shard = CASES[case]
    if shard is None:
        return Path(layout.absolute(latest(layout, run_id).files[kind]["path"]))
    return Path(layout.shard_file(kind, run_id, shard))


def _status(*args: str):
    return CliRunner().invoke(main, ["status", *args, "--no-progress"])


def test_verify_names_every_file_changed_in_place(synth_root, tmp_path):
    """One flipped byte in a detail file, a documents file, a statistics partial and a
    generation: sizes unchanged, so the plain status sees nothing; ``--verify`` names
    each file, its shard or generation, exits 1; the repair plan is exactly those."""
    root, layout = _copy(synth_root, tmp_path)
    assert _status(str(root), "--verify").exit_code == 0
    flipped = {}
    for case in CASES:
        flip_byte(_file(layout, case))
        flipped[case] = layout.relative(str(_file(layout, case)))

    plain = json.loads(_status(str(root), "--json").stdout)
    assert not plain["verified"] and all(r["damaged"] == [] for r in plain["runs"])

    result = _status(str(root), "--json", "--verify")
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert doc["verified"]
    damaged = {r["run_id"]: r["damaged"] for r in doc["runs"] if r["damaged"]}
    want = {}
    for case, (kind, run_id, shard) in CASES.items():
        generation = None if shard is not None else latest(layout, run_id).generation
        what = f"{kind} file changed: sha256 differs from its record ({flipped[case]})"
        want[run_id] = [{"shard": shard, "generation": generation, "what": what,
                         "file": flipped[case]}]  # fmt: skip
    assert damaged == want
    verdict = result.stderr.strip().splitlines()[-1]
    assert "run ckpt-100: shard 1" in verdict and "run edge: shard 1" in verdict
    assert "run ckpt-200: statistics generation 1" in verdict and "--repair" in verdict

    table = _status(str(root), "--verify")
    assert table.exit_code == 1
    for case in CASES:
        assert flipped[case] in table.stdout, case  # each damaged file, on its DAMAGED line
    for run_id, (redo, withdraw) in {
        "ckpt-100": ({1}, False),
        "other-50": ({0}, False),
        "edge": ({1}, False),
        "ckpt-200": ({0, 1}, True),  # its generation: the shards it covers
    }.items():
        damage = verify.check_run(layout, run_id, deep=True)
        assert verify.repair_plan(layout, run_id, damage) == (redo, withdraw), run_id
    only = _status(str(root), "--verify", "--run", "ckpt-300")
    assert only.exit_code == 0 and "every committed file matches" in only.stderr


def test_verify_shows_progress_on_a_large_root(synth_root, tmp_path, monkeypatch):
    """Where stderr is a log, a line per interval (here: every chunk) with the bytes hashed
    of the root's total; ``--no-progress`` none."""
    root, layout = _copy(synth_root, tmp_path)
    total = sum(
        c.bytes for run in synth_root["runs"] for c in verify.promised(layout, run).files(layout)
    )
    monkeypatch.setenv("MIXSCOPE_PROGRESS_INTERVAL", "0")
    result = CliRunner().invoke(main, ["status", str(root), "--verify"])
    lines = [s for s in result.stderr.splitlines() if s.startswith(f"mixscope: verify {root}")]
    assert result.exit_code == 0 and lines, result.stderr
    from mixscope.runtime.progress import size

    assert lines[-1].startswith(f"mixscope: verify {root}: {size(total)} of {size(total)} ")
    quiet = _status(str(root), "--verify")
    assert "mixscope: verify" not in quiet.stderr


@pytest.mark.parametrize(
    ("case", "command", "names_file", "column"),
    [
        ("detail", ["sql", "{root}", "SELECT * FROM tokens"], False, None),
        ("detail", ["query", "{root}", "frequency_correlation_exact"], True, "original_id"),
        ("statistics partial", ["query", "{root}", "top_tokens"], None, "token_id"),
        ("generation", ["sql", "{root}", "SELECT * FROM layer_stats"], False, None),
        ("generation", ["query", "{root}", "layer_profile"], True, "layer"),
    ],
)
def test_an_unreadable_committed_file_is_one_line_naming_it(
    synth_root, tmp_path, case, command, names_file, column
):
    """A flipped byte that breaks the reader — with an error that names the file or one
    that does not ("don't know what type:", thrift): one line on stderr, exit 1, naming
    the file and its shard or generation and pointing at ``status --verify``."""
    root, layout = _copy(synth_root, tmp_path)
    path = _file(layout, case)
    flip_unreadable(path, names_file=names_file, column=column)
    result = CliRunner().invoke(main, [a.format(root=root) for a in command])
    assert result.exit_code == 1, result.output
    (line,) = result.stderr.strip().splitlines()
    _, run_id, shard = CASES[case]
    owner = f"shard {shard}" if shard is not None else "statistics generation 1"
    where = f"({owner} of run {run_id})"
    assert line.startswith(f"Error: cannot read {layout.relative(str(path))} {where}")
    assert f"mixscope status {root} --verify" in line and "Traceback" not in result.output


def test_an_unreadable_documents_file_fails_the_report_on_one_line(synth_root, tmp_path):
    """The report's example reads the run's documents files (pyarrow): a damaged one is
    the report's error, one line naming it, not a note in the example section."""
    root, layout = _copy(synth_root, tmp_path)
    path = _file(layout, "documents")
    flip_unreadable(path, arrow_read)
    args = ["report", str(root), "--run", "other-50", "-o", str(tmp_path / "r.html")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"Error: cannot read {layout.relative(str(path))} (shard 0 of run")
    assert "--verify" in line


def test_errors_that_are_not_damage_stay_as_they_were(synth_root):
    """A query's own runtime error (DuckDB's invalid input, raised while fetching) on an
    intact root: the probe finds every file as committed, the error is one ``SQL error``
    line; a detail view's refusal is never probed."""
    root = synth_root["root"]
    result = CliRunner().invoke(main, ["sql", root, "SELECT error('boom') FROM tokens LIMIT 1"])
    assert result.exit_code == 1
    (line,) = result.stderr.strip().splitlines()
    assert "boom" in line and "cannot read" not in line
    from mixscope.errors import MixscopeError
    from mixscope.store.unreadable import read_failure

    refusal = RuntimeError  # not DuckDB's nor pyarrow's
    assert not read_failure(refusal("x")) and not read_failure(MixscopeError("x"))
    assert not read_failure(BrokenPipeError(32, "Broken pipe"))  # the OS's: errno set
    assert read_failure(OSError("Malformed levels"))  # pyarrow's decoder: no errno


@pytest.mark.parametrize("method", ["sql", "query"])
def test_the_results_api_names_an_unreadable_file_too(synth_root, tmp_path, method):
    """``mixscope.open(root).sql/.query`` on a damaged root: the CLI's line, as an
    ``UnreadableFileError`` (a ``MixscopeError``), not the decoder's riddle; an intact
    root's own query error stays a ``SQL error`` line."""
    import mixscope
    from mixscope.errors import MixscopeError
    from mixscope.store.unreadable import UnreadableFileError

    root, layout = _copy(synth_root, tmp_path)
    path = _file(layout, "generation")
    flip_unreadable(path, names_file=False, column="layer")
    with mixscope.open(root) as res, pytest.raises(UnreadableFileError) as err:
        if method == "sql":
            res.sql("SELECT * FROM layer_stats")
        else:
            res.query("layer_profile")
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith(f"cannot read {layout.relative(str(path))} (statistics generation 1")
    assert f"mixscope status {root} --verify" in line

    with mixscope.open(synth_root["root"]) as res, pytest.raises(MixscopeError) as err:
        res.sql("SELECT error('boom') FROM tokens LIMIT 1")
    assert "boom" in str(err.value) and "cannot read" not in str(err.value)
