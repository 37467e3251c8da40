"""Bad job specs and flags: one line naming the key, exit code 2, nothing written."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from mixscope.cli import main
from run_helpers import DEMO

CASES = {
    "unknown key": (["--set", "analysis.bogus=1"], "analysis.bogus"),
    "unknown section": (["--set", "nonsense.x=1"], "nonsense"),
    "wrong type": (["--set", "runtime.workers=many"], "runtime.workers"),
    "negative batch size": (["--batch-size", "-4"], "runtime.batch_size"),
    "negative shard size": (["--set", "runtime.docs_per_shard=-5"], "runtime.docs_per_shard"),
    "zero max_length": (["--max-length", "0"], "analysis.max_length"),
    "mask rate out of range": (["--set", "analysis.mask_rate=1.5"], "analysis.mask_rate"),
    "unknown executor": (["--set", "runtime.executor=spark"], "runtime.executor"),
    "unknown detail mode": (["--set", "output.detail=most"], "output.detail"),
    "model path that does not exist": (["--model", "/no/such/model"], "model"),
    "malformed --set": (["--set", "analysis.seed"], "--set"),
    "unknown measure group": (["--measures", "paper,nope"], "analysis.measures"),
}


@pytest.mark.scenario(
    "Bad specs and flags",
    injected="`mixscope run` with the flag in the test id",
    checked="exit code 2, one line on stderr naming the key, no traceback, nothing written",
)
@pytest.mark.parametrize("case", list(CASES))
def test_bad_flag_is_one_line_exit_2(case, tiny_bert_dir, tmp_path):
    flags, key = CASES[case]
    model = [] if "--model" in flags else ["--model", tiny_bert_dir]
    out = tmp_path / "out"
    args = ["run", *model, "--corpus", str(DEMO), "--out", str(out), *flags, "--no-progress"]
    result = CliRunner().invoke(main, args)
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, (case, result.output)
    assert len(lines) == 1 and lines[0].startswith("Error: ") and key in lines[0], lines
    assert "Traceback" not in result.output
    assert not out.exists()


@pytest.mark.scenario(
    "A measure group that does not apply to the model",
    injected="`mixscope run --measures paper,globenc` on a pre-LN decoder (GPT-2)",
    checked="exit code 2 before any work, one line naming the group and why, nothing written",
)
def test_a_group_that_does_not_apply_is_refused(tiny, tmp_path):
    import torch

    model, tok = tiny("gpt2", torch.float64)
    model.save_pretrained(tmp_path / "gpt2")
    tok.save_pretrained(tmp_path / "gpt2")
    out = tmp_path / "out"
    args = ["run", "--model", str(tmp_path / "gpt2"), "--corpus", str(DEMO), "--out", str(out)]
    result = CliRunner().invoke(main, [*args, "--measures", "paper,globenc", "--no-progress"])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and "analysis.measures: group 'globenc'" in lines[0], lines
    assert "post-LN" in lines[0] and not out.exists()


@pytest.mark.scenario(
    "Bad spec files",
    injected="a spec file that is missing, not YAML, not a mapping, or has an unknown section",
    checked="exit code 2 and one line naming the file or the key",
)
@pytest.mark.parametrize(
    ("text", "words"),
    [
        (None, "does not exist"),
        ("model: [unclosed", "not valid YAML"),
        ("- a list", "must be a mapping"),
        ("model: m\nanalysys:\n  seed: 1\n", "analysys"),
        (f"model: m\ncorpus:\n  paths: [{DEMO}]\nruntime:\n  workers: -2\n", "runtime.workers"),
    ],
)
def test_bad_spec_file(text, words, tmp_path):
    spec = tmp_path / "job.yaml"
    if text is not None:
        spec.write_text(text)
    result = CliRunner().invoke(main, ["validate", str(spec)])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and words in lines[0], lines
