"""A fresh user's README walk-through: the three commands on their own corpus, as written.

The commands are read from the README's "Your own corpus in three commands" block and run
in a new directory holding ``my_texts.txt`` (the only file the README asks for), each as its
own process on its own embedded Ray, offline: every one exits 0 without an error line,
and what they leave behind is what the README says (a run named ``mine`` with every group
that applies to the packaged MiniLM, and the HTML page).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from run_helpers import DEMO

README = Path(__file__).parents[1] / "README.md"


def _block(heading: str) -> list[str]:
    """The command lines of the first bash block under ``heading``, comments dropped."""
    text = README.read_text(encoding="utf-8").split(heading, 1)[1]
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block, f"no bash block under {heading!r}"
    return [ln.split("  #")[0].strip() for ln in block.group(1).splitlines() if ln.strip()]


def test_the_three_commands_run_as_written(tmp_path):
    commands = _block("## Your own corpus in three commands")
    assert [c.split()[1] for c in commands] == ["validate", "run", "report"]
    lines = [ln for ln in DEMO.read_text().splitlines() if ln.strip()][:12]
    (tmp_path / "my_texts.txt").write_text("\n".join(lines) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    env["HF_HUB_OFFLINE"] = "1"
    for command in commands:
        argv = shlex.split(command)
        assert argv[0] == "mixscope"
        extra = ["--no-progress"] if argv[1] == "run" else []
        out = subprocess.run(
            [sys.executable, "-m", "mixscope.cli", *argv[1:], *extra],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert out.returncode == 0, f"{command}: {out.stderr}"
        assert not re.search(r"^(Error|Traceback)", out.stderr, re.M), out.stderr
    (record,) = [json.loads(p.read_text()) for p in tmp_path.glob("results/mine/**/run.json")]
    assert record["name"] == "mine" and record["status"] == "complete"
    assert record["measures"]["groups"] == ["paper", "globenc", "sink", "ff", "distance"]
    assert (tmp_path / "mine.html").stat().st_size > 10_000


def test_make_demo_ends_with_the_next_commands():
    """``make demo`` tells a new user what to try next, with commands that exist."""
    from click.testing import CliRunner

    from mixscope.cli import main

    makefile = (Path(__file__).parents[1] / "Makefile").read_text(encoding="utf-8")
    demo = makefile.split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    nexts = re.findall(r'@echo "\s+(mixscope [^"#]+?)\s*(?:#[^"]*)?"', demo)
    assert [n.split()[1] for n in nexts] == ["report", "query", "run"]
    for n in nexts:
        sub = n.split()[1]
        assert CliRunner().invoke(main, [sub, "--help"]).exit_code == 0, n
    assert "layer_profile" in nexts[1] and "results/demo" in nexts[0]
