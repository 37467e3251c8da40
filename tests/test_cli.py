"""The CLI: tables, output files, one-line errors with non-zero exits, a fast --help."""

from __future__ import annotations

import subprocess
import sys

import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import mixscope
from mixscope.cli import main


@pytest.fixture()
def run():
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(main, list(args), catch_exceptions=False)

    return invoke


def test_help_does_not_import_torch():
    code = (
        "import sys; from mixscope.cli import main; "
        "print('torch' in sys.modules, 'ray' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


def test_layer_table(run, minilm_path):
    result = run("analyze", "-m", minilm_path, "The cat sat on the mat.", "Dogs bark.")
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert lines[0].split() == ["layer", "tokens", *mixscope.MEASURES]
    assert [ln.split()[0] for ln in lines[2:]] == ["1", "2", "3", "4", "5", "6", "all"]
    # 9 + 5 tokens per layer ([CLS] the cat sat on the mat . [SEP]; [CLS] dogs bark . [SEP])
    assert lines[2].split()[1] == "14"


def test_token_table_and_outputs(run, minilm_path, tmp_path):
    pq_out, csv_out = tmp_path / "t.parquet", tmp_path / "t.csv"
    result = run("analyze", "-m", minilm_path, "--tokens", "Dogs bark.", "-o", str(pq_out))
    assert result.exit_code == 0
    rows = result.stdout.strip().splitlines()[2:]
    assert "wrote 30 rows" in result.stderr
    assert [r.split()[3] for r in rows] == ["[CLS]", "dogs", "bark", ".", "[SEP]"]
    table = pq.read_table(pq_out)
    assert (
        table.num_rows == 5 * 6 and table.column_names == mixscope.store.schema.TOKENS_SCHEMA.names
    )
    assert (
        run("analyze", "-m", minilm_path, "--pair", "A b.", "C d.", "-o", str(csv_out)).exit_code
        == 0
    )
    assert pcsv.read_csv(csv_out).num_rows == 9 * 6  # [CLS] a b . [SEP] c d . [SEP]
    assert not list(tmp_path.glob("*.tmp"))


def test_distance_buckets_no_token_reaches_are_left_out_of_the_table(run, minilm_path, tmp_path):
    """9 tokens reach at most 8 away (buckets 0-3: 1, 2-3, 4-7, 8-15): the table shows those
    four by norm and by weight, says the rest were left out, and the file keeps all 24."""
    out = tmp_path / "d.parquet"
    text = "The cat sat on the mat."  # [CLS] the cat sat on the mat . [SEP]
    result = run("analyze", "-m", minilm_path, "--measures", "paper,distance", text, "-o", str(out))
    assert result.exit_code == 0, result.output
    header = result.stdout.strip().splitlines()[0].split()
    shown = [f"dist_{side}_{b}" for side in "nw" for b in range(4)]
    assert header == ["layer", "tokens", *mixscope.MEASURES, *shown]
    assert "distance buckets 4–11 left out" in result.stderr
    assert "no context 16 tokens away or more" in result.stderr
    table = pq.read_table(out)
    dist = [c for c in table.column_names if c.startswith("dist_")]
    assert len(dist) == 24
    assert all(pc.max(table[c]).as_py() == 0 for c in dist if c not in shown)
    assert all(pc.max(table[c]).as_py() > 0 for c in shown)


def test_verify_flag(run, minilm_path):
    result = CliRunner().invoke(main, ["analyze", "-m", minilm_path, "--verify", "Hello there."])
    assert result.exit_code == 0
    assert "exactness identity: holds" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["analyze"], "Error: no texts given"),
        (["analyze", ""], "Error: text 0 is empty"),
        (
            ["analyze", "-m", "/no/such/model", "x"],
            "Error: model path /no/such/model does not exist",
        ),
        (["analyze", "--max-length", "4096", "x"], "Error: max_length 4096 exceeds"),
        (["analyze", "-o", "x.txt", "x"], "Error: --output must end in .parquet or .csv"),
    ],
)
def test_errors_are_one_line(args, message):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert message in result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_debug_shows_traceback():
    result = CliRunner().invoke(main, ["--debug", "analyze", "-m", "/no/such/model", "x"])
    assert result.exit_code == 1
    assert "Traceback" in result.output


def test_padding_side_changes_no_number(minilm_path, tmp_path):
    texts = ["Dogs bark.", "A much longer sentence with quite a few more words in it."]
    outs = []
    for side in ("left", "right"):
        out = tmp_path / f"{side}.parquet"
        args = ["analyze", "-m", minilm_path, *texts, "--batch-size", "2", "--padding-side", side]
        assert CliRunner().invoke(main, [*args, "-o", str(out)]).exit_code == 0
        outs.append(pq.read_table(out))
    for m in mixscope.MEASURES:
        a, b = outs[0][m].to_numpy(), outs[1][m].to_numpy()
        assert abs(a - b).max() < 1e-5


@pytest.mark.parametrize(
    "command",
    [["run"], ["validate"], ["submit"], ["checkpoints", "sync"], ["checkpoints", "watch"]],
)
def test_every_job_command_takes_a_name(command):
    """``--name`` on every command that starts runs: runs you can tell apart."""
    result = CliRunner().invoke(main, [*command, "--help"])
    assert result.exit_code == 0 and "-n, --name TEXT" in result.output


def test_a_run_s_name_is_given_or_its_model_s(tmp_path):
    """``validate`` shows the name a run gets: ``--name``'s, else the model's last part
    (never one shared default, which would put unrelated runs into one trend)."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("A short document.\n")
    base = ["validate", "--corpus", str(corpus), "--out", str(tmp_path / "out")]
    named = CliRunner().invoke(main, [*base, "--name", "exp-1"])
    plain = CliRunner().invoke(main, base)
    assert named.exit_code == plain.exit_code == 0, named.output + plain.output
    row = lambda out: next(ln.split()[1] for ln in out.splitlines() if ln.startswith("name"))  # noqa: E731
    assert row(named.stdout) == "exp-1" and row(plain.stdout) == "all-MiniLM-L6-v2"


def test_analyze_all_names_the_groups_it_skipped_in_one_line(tmp_path):
    """``analyze --measures all`` on OLMo-2 (no ``globenc``): one ``note:`` line saying so
    and why, no Python warning text; the table has the other groups' columns."""
    import torch

    from tiny_models import build

    model, tok = build("olmo2", torch.float32)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    result = CliRunner().invoke(
        main, ["analyze", "-m", str(tmp_path), "--measures", "all", "A short text here."]
    )
    assert result.exit_code == 0, result.output
    notes = [ln for ln in result.stderr.splitlines() if ln.startswith("note:")]
    skipped = [ln for ln in notes if "skipped" in ln]  # the other: distance buckets left out
    assert len(skipped) == 1 and "skipped groups that do not apply: globenc (" in skipped[0]
    assert len(notes) == 2 and "distance buckets 3–11 left out" in notes[1]
    assert "UserWarning" not in result.stderr
    assert "ffresln_n" in result.stdout.splitlines()[0]
