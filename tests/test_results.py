"""`mixscope.open(out)` (the results API), `mixscope compare`, JSON outputs (issue 14)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import mixscope
from mixscope.errors import MixscopeError
from mixscope.status import RUN_STATUS_SCHEMA, run_status
from sql_oracle import (
    _invoke,
    assert_rows,
    expect_compare_runs,
    expect_compare_token_types,
    expect_layer_profile,
    expect_summary,
    rows_of,
)

PYTHON_DOC = Path(__file__).parents[1] / "docs" / "python.md"


def _same_table(got, want) -> None:
    """Same schema (names and Arrow types), same rows; floats to 1e-12 (parallel sums)."""
    assert got.schema.equals(want.schema), (got.schema, want.schema)
    assert got.num_rows == want.num_rows
    for name in got.column_names:
        g, w = got[name].to_pylist(), want[name].to_pylist()
        for x, y in zip(g, w, strict=True):
            if isinstance(y, float):
                assert x == pytest.approx(y, rel=1e-12, abs=1e-15, nan_ok=True), name
            else:
                assert x == y, name


def _cli_parquet(tmp_path, *args) -> object:
    out = tmp_path / f"q{len(list(tmp_path.iterdir()))}.parquet"
    result = _invoke(*args, "--format", "parquet", "--output", str(out))
    assert result.exit_code == 0, result.output
    return pq.read_table(out)


def test_query_equals_cli_parquet(real_root, tmp_path):
    root, (a, b) = real_root["root"], real_root["runs"]
    cases = [
        ("summary", {}),
        ("layer_profile", {"run_id": a}),
        ("token_types", {}),
        ("compare_runs", {"a": a, "b": b}),
        ("compare_token_types", {"a": a, "b": b}),
        ("top_tokens", {"min_count": "2", "k": "3"}),
        ("frequency_correlation", {"reference": "ref_csv"}),
    ]
    with mixscope.open(root) as res:
        for name, params in cases:
            args = ["query", root, name] + [f"--param={k}={v}" for k, v in params.items()]
            _same_table(res.query(name, **params), _cli_parquet(tmp_path, *args))
        # and the numbers are right (independent computation from the committed rows)
        rows = rows_of(real_root)
        got = res.query("summary")
        assert_rows(
            got.column_names,
            [tuple(r.values()) for r in got.to_pylist()],
            expect_summary(rows),
            "api summary",
        )
        got = res.query("layer_profile", run_id=a)
        assert_rows(
            got.column_names,
            [tuple(r.values()) for r in got.to_pylist()],
            expect_layer_profile(rows, a),
            "api layer_profile",
        )
        assert res.query("top_tokens", min_count=2, k=3).equals(
            res.query("top_tokens", min_count="2", k="3")
        )  # typed or as on the CLI
        df = res.query("summary").to_pandas()
        assert list(df.columns) == ["run_id", "measure", "mean", "max", "min", "n"]
        assert len(df) == 10


def test_dataframe_conversions_and_missing_extras(real_root, monkeypatch):
    pl = pytest.importorskip("polars")
    with mixscope.open(real_root["root"]) as res:
        summary = res.query("summary")
    frame = mixscope.to_polars(summary)
    assert isinstance(frame, pl.DataFrame) and frame.height == 10
    assert frame.columns == summary.column_names
    assert frame["n"].to_list() == summary["n"].to_pylist()
    df = mixscope.to_pandas(summary)
    assert df["mean"].tolist() == summary["mean"].to_pylist()
    for name, convert in (("polars", mixscope.to_polars), ("pandas", mixscope.to_pandas)):
        with monkeypatch.context() as m:
            m.setitem(sys.modules, name, None)  # as if not installed: import raises
            with pytest.raises(MixscopeError) as err:
                convert(summary)
        assert str(err.value) == (
            f'to_{name} needs {name}, which is not installed: pip install "mixscope[{name}]"'
        )


def test_sql_same_as_cli_and_read_only(real_root, tmp_path):
    root = real_root["root"]
    statement = (
        "SELECT run_id, layer, category, count(*) AS n, avg(attn_n) AS m "
        "FROM tokens GROUP BY ALL ORDER BY ALL"
    )
    res = mixscope.open(root)
    _same_table(res.sql(statement), _cli_parquet(tmp_path, "sql", root, statement))
    assert res.sql("SELECT $x::INTEGER + 1 AS y", x=41).to_pylist() == [{"y": 42}]
    for hostile in (
        f"COPY runs TO '{tmp_path}/x.csv'",
        "DROP TABLE runs",
        "SELECT 1; SELECT 2",
        "ATTACH ':memory:' AS x",
        "SET enable_external_access = true",
        "SELECT * FROM read_csv('/etc/passwd')",
    ):
        with pytest.raises(MixscopeError) as err:
            res.sql(hostile)
        cli = _invoke("sql", root, hostile)
        assert cli.exit_code == 1
        assert cli.stderr.strip() == f"Error: {err.value}"
    assert not (tmp_path / "x.csv").exists()
    res.close()
    with pytest.raises(MixscopeError, match="closed"):
        res.query("summary")


def test_runs_and_selection(real_root):
    root, (_, b) = real_root["root"], real_root["runs"]
    with mixscope.open(root) as res:
        runs = res.runs
        status = run_status(root)
        assert runs["run_id"].to_pylist() == [r["run_id"] for r in status]
        assert set(runs.column_names) == set(status[0])  # the keys of `mixscope status`
        # one definition: the status rows' keys in order, the table's names and types
        assert list(status[0]) == RUN_STATUS_SCHEMA.names
        assert runs.schema.equals(RUN_STATUS_SCHEMA)
        assert runs["status"].to_pylist() == ["complete", "complete"]
        assert sorted(runs["step"].to_pylist()) == [1000, 2000]
        assert all(d > 0 for d in runs["done"].to_pylist())
        assert runs["pending"].to_pylist() == [0, 0]
    with mixscope.open(root, runs=[b[:6]]) as res:  # a unique prefix
        assert res.runs["run_id"].to_pylist() == [b]
        assert set(res.query("summary")["run_id"].to_pylist()) == {b}
    with pytest.raises(MixscopeError, match="unknown run 'zz'"):
        mixscope.open(root, runs=["zz"])
    with pytest.raises(MixscopeError, match="unknown run ''"):
        mixscope.open(root, runs=[""])
    with pytest.raises(MixscopeError, match="does not exist"):
        mixscope.open(Path(root) / "nope")


def test_plot_returns_the_report_figures(real_root):
    root, (a, b) = real_root["root"], real_root["runs"]
    from matplotlib.figure import Figure

    with mixscope.open(root) as res:
        figs = res.plot("layers")
        assert len(figs) == 2 and all(isinstance(f, Figure) for f in figs)
        profile = res.query("layer_profile").to_pylist()
        for fig, run in zip(figs, (a, b), strict=True):
            norms, weights, *spare = fig.axes  # one panel per kind of measure (3 columns)
            assert [len(norms.lines), len(weights.lines)] == [3, 2]
            assert all(not ax.axison for ax in spare)
            want = [
                100 * r["seq_mean"]
                for r in profile
                if r["run_id"] == run and r["measure"] == "attn_w"
            ]
            assert np.allclose(weights.lines[0].get_ydata(), want)
        (one,) = res.plot("layers", run=b[:5])
        assert np.allclose(one.axes[1].lines[0].get_ydata(), figs[1].axes[1].lines[0].get_ydata())
        types = res.plot("token-types")
        assert len(types) == 2 and all(len(f.axes) == 10 for f in types)  # 5 panels + bars
        assert all(len(f.axes) == 6 for f in res.plot("frequency"))
        (trend,) = res.plot("trend")  # one job name, steps 1000 and 2000
        assert len(trend.axes) == 6
        layers_fig, types_fig = res.plot("compare", a=a[:4], b=b)
        left, right = layers_fig.axes
        assert len(left.lines) == 10 and len(right.lines) == 6  # 5 diffs + the zero line
        diffs = [
            r["diff"]
            for r in res.query("compare_runs", a=a, b=b).to_pylist()
            if r["measure"] == "attnresln_n" and r["diff"] is not None
        ]
        assert np.allclose(right.lines[4].get_ydata(), 100 * np.array(diffs))
        assert len(types_fig.axes) == 10
        with pytest.raises(MixscopeError, match="no plot named"):
            res.plot("nope")
        with pytest.raises(MixscopeError, match="needs both runs"):
            res.plot("compare", a=a)


def test_compare_command(real_root, tmp_path):
    root, (a, b) = real_root["root"], real_root["runs"]
    rows = rows_of(real_root)
    result = _invoke("compare", root, a[:5], b[:5], "--format", "json")
    assert result.exit_code == 0, result.output
    assert f"a = {a} (real-job" in result.stderr and "diff = b - a" in result.stderr
    got = json.loads(result.stdout)
    cols = ["layer", "measure", "mean_a", "mean_b", "diff", "n_a", "n_b"]
    assert all(list(d) == cols for d in got)
    assert_rows(cols, [tuple(d.values()) for d in got], expect_compare_runs(rows, a, b), "cli")
    result = _invoke("compare", root, a, b, "--by", "token-type", "--format", "json")
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    cols = ["layer", "measure", "category", "mean_a", "mean_b", "diff", "n_a", "n_b"]
    want = expect_compare_token_types(rows, a, b)
    assert_rows(cols, [tuple(d.values()) for d in got], want, "cli token-type")
    table = _invoke("compare", root, a, b)
    assert table.exit_code == 0 and table.stdout.splitlines()[0].split()[:3] == [
        "layer",
        "measure",
        "mean_a",
    ]
    for bad, message in (((a, a[:3]), "two different runs"), ((a, "zz"), "unknown run 'zz'")):
        result = _invoke("compare", root, *bad)
        assert result.exit_code == 1 and message in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_report_compare_section(real_root, tmp_path):
    root, (a, b) = real_root["root"], real_root["runs"]
    out = tmp_path / "plots"
    result = _invoke(
        "report",
        root,
        "--run",
        a,
        "--compare",
        a[:4],
        b[:4],
        "--no-examples",
        "--format",
        "png",
        "-o",
        str(out),
    )
    assert result.exit_code == 0, result.output
    names = sorted(p.name for p in out.glob("compare*.png"))
    assert names == [f"compare_layers-{a}-{b}.png", f"compare_token_types-{a}-{b}.png"]
    page = tmp_path / "r.html"
    assert _invoke("report", root, "--no-examples", "-o", str(page)).exit_code == 0
    assert "No comparison asked for" in page.read_text()


def test_json_is_strict_and_typed(real_root):
    root = real_root["root"]
    statement = (
        "SELECT sum(n) AS total, 'nan'::DOUBLE AS x, 'inf'::DOUBLE AS y, "
        "TIMESTAMP '2024-01-02 03:04:05' AS t, [1.0, 'nan'::DOUBLE] AS l FROM layer_stats"
    )
    result = _invoke("sql", root, statement, "--format", "json")
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout, parse_constant=lambda c: pytest.fail(c))
    assert isinstance(row["total"], int) and row["total"] > 0  # a HUGEINT, not "1234"
    assert row["x"] is None and row["y"] is None and row["l"] == [1.0, None]
    assert row["t"] == "2024-01-02T03:04:05"


def test_the_python_api_example_of_the_docs_runs(real_root, tmp_path, monkeypatch):
    """docs/python.md's results-API example (the README links it), as written."""
    text = PYTHON_DOC.read_text(encoding="utf-8")
    section = text.split("## Python API", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    exec(compile(code.replace('"results/"', repr(real_root["root"])), "docs/python.md", "exec"), {})
    assert (tmp_path / "layers.png").stat().st_size > 0
