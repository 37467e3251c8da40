"""The README and docs/ say what the code does: the benchmark figures are the benchmarks'
own output (benchmarks/readme.py), every command and named query is shown, every link
resolves, the architecture table is the adapters'."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _readme_tool():
    spec = importlib.util.spec_from_file_location("readme", REPO / "benchmarks" / "readme.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("doc", ["README.md", "docs/performance.md"])
def test_every_marked_section_is_its_benchmark_output(doc):
    tool = _readme_tool()
    text = (REPO / doc).read_text(encoding="utf-8")
    assert tool.SECTION.search(text), f"{doc} marks no benchmark section"
    _, stale = tool.spliced(text)
    assert stale == [], f"stale {doc} sections {stale}: run python benchmarks/readme.py"


def test_the_readme_s_performance_summary_is_the_benchmarks_bold_figures():
    """The README's headline lines are generated: each names its benchmark, its row and
    column, and the figure as the results file prints it (here a two-table file)."""
    tool = _readme_tool()
    lines = tool.headlines().splitlines()
    assert len(lines) >= len(tool.HEADLINES)
    ff = (REPO / "benchmarks" / "results" / "ff.md").read_text(encoding="utf-8")
    bold = [c for ln in ff.splitlines() if ln.startswith("|") for c in ln.split("|") if "**" in c]
    mine = [ln for ln in lines if ln.startswith("- the `ff` group")]
    assert len(mine) == len(bold)  # one line per bold figure, each naming its row
    for line, cell, row in zip(mine, bold, [r for r in ff.splitlines() if "**" in r], strict=True):
        assert line.endswith(cell.strip()) and row.strip("| ").split(" |")[0] in line
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert tool.headlines() in readme


def test_splicing_replaces_only_the_marked_body(tmp_path):
    tool = _readme_tool()
    (tmp_path / "x.md").write_text("| a |\n|---|\n| 1 |\n", encoding="utf-8")
    readme = "intro\n<!-- bench:x -->\nold figures\n<!-- /bench:x -->\nafter\n"
    new, changed = tool.spliced(readme, tmp_path)
    assert new == "intro\n<!-- bench:x -->\n| a |\n|---|\n| 1 |\n<!-- /bench:x -->\nafter\n"
    assert changed == ["x"] and tool.spliced(new, tmp_path)[1] == []
    with pytest.raises(SystemExit, match="bench:y has no"):
        tool.spliced("<!-- bench:y -->\n<!-- /bench:y -->", tmp_path)


def _commands(group, prefix=()) -> list[str]:
    """Every command path of a Click group: ``run``, ``checkpoints sync``, …"""
    import click

    out = []
    for name, cmd in group.commands.items():
        path = (*prefix, name)
        out.append(" ".join(path))
        if isinstance(cmd, click.Group):
            out += _commands(cmd, path)
    return out


def test_every_command_and_named_query_is_in_the_readme():
    from mixscope.cli import main
    from mixscope.sql.named import all_queries

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    missing = [c for c in _commands(main) if f"mixscope {c}" not in readme]
    assert not missing, f"commands the README never shows: {missing}"
    missing = [q for q in all_queries() if f"`{q}`" not in readme]
    assert not missing, f"named queries the README never names: {missing}"


def test_every_docs_path_cited_in_the_package_exists():
    import re

    cited = {
        m
        for p in (REPO / "src").rglob("*.py")
        for m in re.findall(r"docs/[\w./-]+\.md", p.read_text(encoding="utf-8"))
    }
    assert cited, "no docs/ path cited at all: the pattern is wrong"
    missing = sorted(c for c in cited if not (REPO / c).is_file())
    assert not missing, f"docs cited in the package but absent: {missing}"


def test_the_architecture_table_is_generated_from_the_adapters():
    """The README's supported architectures are the adapters' data, not typed by hand."""
    from mixscope.mixing.architectures import BEGIN, END, architecture_table
    from mixscope.models.adapters import supported_model_types

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split(BEGIN + "\n", 1)[1].split(END, 1)[0]
    assert section == architecture_table(), "python -m mixscope.mixing.architectures --write"
    for model_type in supported_model_types():
        assert f"`{model_type}`" in section


def test_the_readme_reads_in_five_minutes_and_its_links_resolve():
    """At most ~450 lines (the detail lives in docs/); every relative link it or a docs page
    makes points at a file that exists, and every docs page the README points at is linked."""
    import re

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 450
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = doc.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#:]+\.md)(?:#[\w-]+)?\)", text):
            assert (doc.parent / target).is_file(), f"{doc.name} links {target}: no such file"
    for name in ("jobs", "sql", "report", "python", "development", "performance"):
        assert f"(docs/{name}.md" in readme, f"the README does not link docs/{name}.md"
