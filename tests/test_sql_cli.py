"""`mixscope sql` / `query` / `queries` outputs, and regressions of bugs found here."""

from __future__ import annotations

import csv
import io
import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

import sql_fixtures as sf
from mixscope.errors import MixscopeError
from mixscope.sql.named import REQUIRED, all_queries, get_query, run_query
from mixscope.sql.readonly import execute
from mixscope.sql.views import connect
from mixscope.store.layout import Layout
from sql_oracle import (
    Rows,
    _invoke,
    assert_rows,
    expect_depth_correlation,
    expect_layer_profile,
    expect_summary,
    rows_of,
    run,
    same,
)

# -- CLI outputs ---------------------------------------------------------------------------------


def parse_table(text: str) -> tuple[list[str], list[list[str]], int]:
    lines = text.rstrip("\n").splitlines()
    footer = lines.pop()
    count = int(footer.strip("()").split()[0])
    spans, start = [], None
    dashes = lines[1]
    for k, ch in enumerate(dashes + " "):
        if ch == "-" and start is None:
            start = k
        elif ch != "-" and start is not None:
            spans.append((start, k))
            start = None
    cut = [[line[a:b].strip() for a, b in spans] for line in [lines[0], *lines[2:]]]
    return cut[0], cut[1:], count


def same_cell(text: str, value: Any) -> bool:
    if value is None:
        return text == ""
    if isinstance(value, bool):
        return text == ("yes" if value else "")
    if isinstance(value, float):
        if math.isnan(value):
            return text == "nan"
        return abs(float(text) - value) <= 5.1e-5
    return text == str(value)


def _no_constants(name: str) -> None:
    raise AssertionError(f"{name} is not JSON (NaN must be written as null)")


def check_outputs(args: list[str], columns: list[str], want: list[tuple], tmp: Path) -> None:
    """Every --format, on stdout and with --output, parsed back and compared."""
    tmp.mkdir(parents=True, exist_ok=True)
    for fmt in ("table", "csv", "json", "parquet"):
        texts = {}
        if fmt != "parquet":
            result = _invoke(*args, "--format", fmt)
            assert result.exit_code == 0, result.output
            texts["stdout"] = result.stdout
        out = tmp / f"result.{fmt}"
        result = _invoke(*args, "--format", fmt, "--output", str(out))
        assert result.exit_code == 0, result.output
        assert result.stdout == "" and f"wrote {out}" in result.stderr
        if fmt == "parquet":
            table = pq.read_table(out)
            assert table.column_names == columns
            got = [tuple(r.values()) for r in table.to_pylist()]
            assert_rows(columns, got, want, "parquet")
            continue
        texts["file"] = out.read_text()
        # (not compared as text: DuckDB's parallel sums may differ in the last bit per run)
        assert texts["file"].count("\n") == texts["stdout"].count("\n")
        for where, text in texts.items():
            if fmt == "table":
                headers, cells, count = parse_table(text)
                assert headers == columns and count == len(want) == len(cells), where
                for row, w in zip(cells, want, strict=True):
                    assert all(same_cell(t, v) for t, v in zip(row, w, strict=True)), (row, w)
            elif fmt == "csv":
                parsed = list(csv.reader(io.StringIO(text)))
                assert parsed[0] == columns and len(parsed) == 1 + len(want)
                for row, w in zip(parsed[1:], want, strict=True):
                    for t, v in zip(row, w, strict=True):
                        if isinstance(v, float):  # repr: all the digits
                            assert same(float(t), v), (t, v)
                        else:
                            assert t == ("" if v is None else str(v))
            else:
                parsed = json.loads(text, parse_constant=_no_constants)  # strict JSON
                assert [list(d) for d in parsed] == [columns] * len(want)
                got = [tuple(d.values()) for d in parsed]
                assert_rows(columns, got, want, "json")


def test_sql_command_outputs(real_root, tmp_path):
    root = real_root["root"]
    statement = (
        "SELECT run_id, layer, category, count(*) AS n, avg(attn_n) AS mean_attn_n, "
        "bool_or(is_masked) AS any_masked, min(token) AS first_token, NULL AS nothing "
        "FROM tokens GROUP BY ALL ORDER BY ALL"
    )
    cur = execute(connect(root), statement)
    columns, want = [d[0] for d in cur.description], cur.fetchall()
    assert len(want) >= 8
    check_outputs(["sql", root, statement], columns, want, tmp_path / "sql")
    # the statement from stdin
    result = _invoke("sql", root, "--format", "json", input=statement + "\n")
    assert result.exit_code == 0, result.output
    assert_rows(columns, [tuple(d.values()) for d in json.loads(result.stdout)], want, "stdin")
    # --run narrows the views
    one = real_root["runs"][0]
    result = _invoke(
        "sql", root, "SELECT DISTINCT run_id FROM tokens", "--run", one, "--format", "csv"
    )
    assert result.stdout.splitlines() == ["run_id", one]


def test_query_command_outputs(real_root, tmp_path):
    root = real_root["root"]
    rows = rows_of(real_root)
    one = real_root["runs"][1]
    columns = list(get_query("summary").columns)
    check_outputs(
        ["query", root, "summary", "--param", f"run_id={one}"],
        columns,
        expect_summary(rows, one),
        tmp_path / "summary",
    )
    columns, _ = run(root, "layer_profile")
    check_outputs(
        ["query", root, "layer_profile"], columns, expect_layer_profile(rows), tmp_path / "lp"
    )


def test_query_outputs_with_nan_and_null(synth_root, tmp_path):
    """A constant column has no rank correlation: NaN in table/csv/parquet, null in JSON."""
    rows = rows_of(synth_root)
    want = expect_depth_correlation(rows, sf.EDGE_RUN)
    assert any(math.isnan(w[2]) for w in want)
    columns = list(get_query("depth_correlation").columns)
    args = ["query", synth_root["root"], "depth_correlation", "--param", f"run_id={sf.EDGE_RUN}"]
    check_outputs(args, columns, want, tmp_path)
    result = _invoke(*args, "--format", "json")
    nulls = [d for d in json.loads(result.stdout) if d["rho"] is None]
    assert all(d["bound"] is None for d in nulls)
    assert [d["measure"] for d in nulls] == ["attn_w", "attnres_w"]  # constant: 0.5, 0.25


def test_queries_command_lists_every_query_and_parameter():
    result = _invoke("queries")
    assert result.exit_code == 0
    text = result.stdout
    blocks = {}
    for block in text.split("\n"):
        if block and not block.startswith(" "):
            current = block.strip()
            blocks[current] = []
        elif block:
            blocks[current].append(block.strip())
    assert list(blocks) == list(all_queries())
    for name, q in all_queries().items():
        lines = blocks[name]
        assert lines[0] == q.description
        for p in q.params:
            default = "required" if p.default is REQUIRED else f"default {p.default!r}"
            assert f"--param {p.name}=…  ({default}) {p.help}".strip() in lines, (name, p.name)
        if "{{" not in ", ".join(q.columns):
            assert f"columns: {', '.join(q.columns)}" in lines
    assert "--param a=…  (required) the first run_id" in text
    # a measure list is shown expanded: the default groups' measures, saying so
    assert "{{" not in text
    assert blocks["layer_summary"][-1] == (
        "columns: run_id, layer, tokens, attn_w, attn_n, attnres_w, attnres_n, attnresln_n"
        "  (measures of the default groups: paper)"
    )


def test_queries_command_expands_the_measures_of_a_root(real_root):
    text = _invoke("queries", real_root["root"]).stdout
    assert (
        "columns: run_id, layer, tokens, attn_w, attn_n, attnres_w, attnres_n, attnresln_n"
        f"  (measures of the runs in {real_root['root']}: paper)"
    ) in text
    missing = _invoke("queries", real_root["root"] + "-nope")
    assert missing.exit_code == 1
    assert missing.stderr.strip() == f"Error: results root {real_root['root']}-nope does not exist"


def test_threads_and_memory_are_configurable_and_readers_coexist(synth_root):
    root = synth_root["root"]
    con = connect(root, threads=1, memory_limit="300MB")
    assert con.execute("SELECT current_setting('threads')").fetchone()[0] == 1
    assert "MiB" in con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    result = _invoke(
        "sql", root, "SELECT current_setting('threads') AS t", "--threads", "1", "--format", "csv"
    )
    assert result.stdout.splitlines() == ["t", "1"]
    # many readers at once: no lock, no database file written under the root
    others = [connect(root) for _ in range(3)]
    counts = {c.execute("SELECT count(*) FROM tokens").fetchone()[0] for c in [con, *others]}
    assert counts == {rows_of(synth_root).n}
    assert not [p for p in Path(root).rglob("*") if p.suffix in (".duckdb", ".db", ".wal")]


def test_sql_root_that_does_not_exist(tmp_path):
    result = _invoke("sql", str(tmp_path / "nope"), "SELECT 1")
    assert result.exit_code == 1
    assert result.stderr.strip() == f"Error: results root {tmp_path / 'nope'} does not exist"


# -- regressions of bugs found here (fixed in 32ac422) ------------------------------------------


def test_a_moved_results_directory_is_queryable(tmp_path):
    """Commit records hold root-relative paths: a copied or moved root reads its own files."""
    original = tmp_path / "original"
    sf.build_synthetic(original)
    want = run(str(original), "summary")[1]
    for commit in original.glob("_mixscope/runs/*/commits/*.json"):
        for entry in json.loads(commit.read_text())["files"].values():
            assert not entry["path"].startswith("/"), entry["path"]
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    moved = tmp_path / "moved"
    original.rename(moved)
    for root in (copy, moved):
        con = connect(str(root))
        assert con.execute("SELECT count(*) FROM tokens").fetchone()[0] == Rows(str(root)).n
        columns, got = run(str(root), "summary")
        assert_rows(columns, got, want, str(root))
    shutil.rmtree(copy / "tokens" / "run_id=edge")  # the copy reads its own files, not moved's
    with pytest.raises(MixscopeError, match=r"damaged results \(shard \d+: tokens file missing"):
        connect(str(copy))  # never a partial answer (store/verify.py)


def test_an_all_digit_run_id_stays_a_string(tmp_path):
    layout = Layout.open(str(tmp_path))
    rng = np.random.default_rng(3)
    seqs = sf.make_sequences(rng, 3)
    run_id = "1234567890123456"  # a possible run_id_for() value
    sf.write_synthetic_run(
        layout,
        run_id,
        [sf.shard_arrays(seqs, 2, rng)],
        name="m",
        step=10,
    )
    con = connect(str(tmp_path))
    assert con.execute("SELECT DISTINCT typeof(run_id) FROM tokens").fetchall() == [("VARCHAR",)]
    assert len(run_query(con, "checkpoint_trend").fetchall()) == 10
    assert len(run_query(con, "compare_runs", {"a": run_id, "b": run_id}).fetchall()) == 10
    assert len(run_query(con, "compare_runs", {"a": run_id[:3], "b": run_id}).fetchall()) == 10
    assert con.execute("SELECT DISTINCT typeof(run_id) FROM frequencies").fetchall() == [
        ("VARCHAR",)
    ]
    assert run_query(con, "summary", {"run_id": run_id}).fetchall()[0][0] == run_id


def test_count_token_file_starting_with_a_comma(tmp_path):
    path = tmp_path / "counts.txt"
    path.write_text("   9120 ,\n   8000 the\n     12 cat\n")
    result = _invoke("frequencies", "import", str(tmp_path), str(path), "--name", "c")
    assert result.exit_code == 0, result.output
    got = connect(str(tmp_path)).execute(
        "SELECT token, count, rank FROM frequencies WHERE reference = 'c' ORDER BY rank"
    )
    assert got.fetchall() == [(",", 9120, 1), ("the", 8000, 2), ("cat", 12, 3)]


def test_unknown_reference_is_an_error_listing_the_imported_ones(real_root):
    con = connect(real_root["root"] if isinstance(real_root, dict) else real_root)
    with pytest.raises(MixscopeError, match="no reference frequency table 'nope'; imported: "):
        run_query(con, "frequency_correlation", {"reference": "nope"})
