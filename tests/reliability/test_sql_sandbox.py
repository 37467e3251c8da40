"""Hostile SQL through the read-only surface, and parameters bound, never interpolated."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sql_fixtures as sf
from mixscope.errors import MixscopeError
from mixscope.sql.named import all_queries, get_query, run_query
from mixscope.sql.readonly import execute
from mixscope.sql.views import connect
from mixscope.store.layout import Layout
from sql_oracle import (
    EVIL,
    _invoke,
)

# -- read-only --------------------------------------------------------------------------------


def tree_digest(root: str) -> dict[str, str]:
    """Every file and folder under root → sha256 (folders: 'dir')."""
    out = {}
    for p in sorted(Path(root).rglob("*")):
        out[str(p.relative_to(root))] = (
            "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        )
    return out


def refused_statements(root: str, outside: Path) -> list[str]:
    return [
        f"COPY tokens TO '{root}/stolen.csv'",
        f"COPY (SELECT * FROM runs) TO '{outside}/out.parquet' (FORMAT parquet)",
        f"COPY runs FROM '{root}/_mixscope/runs/x.csv'",
        "DROP TABLE runs",
        "DROP VIEW tokens",
        "DELETE FROM runs",
        "UPDATE runs SET name = 'x'",
        "INSERT INTO runs (run_id) VALUES ('x')",
        f"ATTACH '{root}/db.duckdb' AS db",
        f"ATTACH '{outside}/db.duckdb' AS db",
        "DETACH memory",
        "INSTALL httpfs",
        "LOAD httpfs",
        "SET enable_external_access = true",
        "SET allowed_directories = ['/']",
        "RESET lock_configuration",
        "CREATE TABLE t AS SELECT 1",
        "CREATE VIEW v AS SELECT 1",
        "CREATE OR REPLACE VIEW tokens AS SELECT 1",
        "CREATE MACRO f(x) AS x",
        "PRAGMA enable_profiling",
        f"EXPORT DATABASE '{outside}/export'",
        "CHECKPOINT",
        "SELECT 1; DROP TABLE runs",
        "SELECT 1; SELECT 2",
        "SELECT * FROM query('DROP TABLE runs')",
        "SELECT * FROM read_csv('/etc/passwd')",
        f"SELECT * FROM read_csv('{root}/../../../../../../etc/passwd')",
        "SELECT * FROM read_text('/etc/hostname')",
        "SELECT * FROM glob('/etc/*')",
        f"SELECT * FROM read_csv('{root}_sibling.csv')",  # shares the root's prefix only
        f"SELECT * FROM read_parquet('{outside}/*.parquet')",
    ]


@pytest.mark.scenario(
    "Hostile SQL through `mixscope sql`",
    injected="32 statements: COPY TO/FROM, ATTACH, INSTALL, LOAD, CREATE/DROP, SET/RESET, "
    "PRAGMA, EXPORT, read_text('/etc/…'), read_csv/read_parquet outside the root, glob, "
    "multi-statement strings, query('DROP …')",
    checked="each refused with one line and exit 1, through the CLI and the library; the "
    "connection stays usable; the results root and a folder outside it byte-identical",
)
def test_sql_refuses_writes_and_outside_files(real_root, tmp_path):
    root = real_root["root"]
    outside = tmp_path / "outside"
    outside.mkdir()
    pq.write_table(pa.table({"a": [1]}), outside / "visible.parquet")
    sibling = Path(f"{root}_sibling.csv")
    sibling.write_text("a,b\n1,2\n")
    try:
        before = tree_digest(root)
        outside_before = tree_digest(str(outside))
        for statement in refused_statements(root, outside):
            result = _invoke("sql", root, statement)
            assert result.exit_code == 1, (statement, result.output)
            err = result.stderr.strip().splitlines()
            assert len(err) == 1 and err[0].startswith("Error: "), (statement, result.stderr)
            assert "Traceback" not in result.output and result.stdout == "", statement
        # the same through the library, on one connection that stays usable
        con = connect(root)
        n = con.execute("SELECT count(*) FROM tokens").fetchone()[0]
        for statement in refused_statements(root, outside):
            with pytest.raises(MixscopeError):
                execute(con, statement).fetchall()
        assert execute(con, "SELECT count(*) FROM tokens").fetchone()[0] == n
        assert execute(con, "SELECT count(*) FROM runs").fetchone()[0] == 2
        assert tree_digest(root) == before  # byte-identical, nothing added
        assert tree_digest(str(outside)) == outside_before
    finally:
        sibling.unlink()


@pytest.mark.scenario(
    "Read-only SQL that must still work",
    injected="SELECT, WITH, FROM-first, DESCRIBE, SHOW, UNION, read_json_auto of the run records",
    checked="each answers (exit 0, JSON output)",
)
def test_sql_allows_read_only_statement_kinds(real_root):
    root = real_root["root"]
    for statement in (
        "SELECT count(*) FROM tokens",
        "WITH t AS (SELECT * FROM tokens) SELECT count(*) FROM t",
        "FROM runs SELECT count(*)",
        "DESCRIBE tokens",
        "SHOW TABLES",
        "SELECT 1 UNION ALL SELECT 2;",
        f"SELECT count(*) FROM read_json_auto('{root}/_mixscope/runs/*/run.json')",
    ):
        result = _invoke("sql", root, statement, "--format", "json")
        assert result.exit_code == 0, (statement, result.output)
        assert json.loads(result.stdout)


# -- parameter binding ------------------------------------------------------------------------


#: parameters that name runs (ids or unique prefixes): a value that names none is an error
RUN_PARAMS = {"run_id", "a", "b"}
STRING_PARAMS = {
    "summary": ["run_id"],
    "layer_profile": ["run_id"],
    "layer_summary": ["run_id"],
    "token_types": ["run_id"],
    "frequency_correlation": ["run_id", "reference"],
    "frequency_correlation_exact": ["run_id", "reference"],
    "frequency_bins": ["run_id", "reference"],
    "depth_correlation": ["run_id"],
    "checkpoint_trend": ["model"],
    "compare_runs": ["a", "b"],
    "compare_token_types": ["a", "b"],
    "top_tokens": ["run_id"],
    "sink_profile": ["run_id"],  # a measure group's query: no run here has it
    "component_profile": ["run_id"],  # likewise (the paper + ff groups)
    "distance_profile": ["run_id"],  # likewise (the distance group)
    "distance_compare": ["a", "b"],
}


@pytest.mark.scenario(
    "Named-query parameters are bound, never interpolated",
    injected="every string parameter of every named query set to SQL (quotes, comments, "
    "`; DROP`, `$name`, `%`)",
    checked="treated as a value (no rows or a clear error), tokens unchanged, root byte-identical",
)
def test_parameters_are_values_not_sql(synth_root):
    root = synth_root["root"]
    before = tree_digest(root)
    con = connect(root)
    n_tokens = con.execute("SELECT count(*) FROM tokens").fetchone()[0]
    assert set(STRING_PARAMS) == set(all_queries())
    for name, params in STRING_PARAMS.items():
        for value in (EVIL, "' OR '1'='1", '"; SELECT 1; --', "$run_id", "%", "ckpt-100' --"):
            pair = set(params) == {"a", "b"}  # two runs: both given at once
            choices = [params] if pair else [[p] for p in params] + [params]
            for chosen in choices:
                given = {p: value for p in chosen}
                if set(given) & RUN_PARAMS:  # no run has that id: said so, the value quoted
                    with pytest.raises(MixscopeError, match="no selected run") as err:
                        run_query(con, name, given)
                    assert value in str(err.value) and "\n" not in str(err.value)
                    continue
                if "reference" in given:  # a value: no such table, said so (not run as SQL)
                    with pytest.raises(MixscopeError, match="no reference frequency table"):
                        run_query(con, name, given)
                    continue
                if all_queries()[name].groups:  # no run with the group (no such run): said so
                    with pytest.raises(MixscopeError, match="measure group"):
                        run_query(con, name, given)
                    continue
                assert run_query(con, name, given).fetchall() == [], (name, given)
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == len(synth_root["runs"])
    assert con.execute("SELECT count(*) FROM tokens").fetchone()[0] == n_tokens
    # through the CLI as well: a value that names no run is one line naming it
    result = _invoke("query", root, "summary", "--param", f"run_id={EVIL}")
    assert result.exit_code == 1, result.output
    assert EVIL in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert tree_digest(root) == before


def test_a_model_name_with_quotes_is_matched_as_a_value(tmp_path):
    layout = Layout.open(str(tmp_path))
    rng = np.random.default_rng(5)
    name = 'o\'brien "model"; DROP TABLE runs; --'
    seqs = sf.make_sequences(rng, 3)
    sf.write_synthetic_run(
        layout,
        "quoted",
        [sf.shard_arrays(seqs, 2, rng)],
        name=name,
        step=7,
    )
    result = _invoke(
        "query", str(tmp_path), "checkpoint_trend", "--param", f"model={name}", "--format", "json"
    )
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    assert len(got) == 2 * 5 and {g["model"] for g in got} == {name}
    assert [g["step"] for g in got] == [7] * 10


def test_integer_parameters_are_checked(synth_root):
    root = synth_root["root"]
    for name, param in (
        ("top_tokens", "min_count"),
        ("top_tokens", "k"),
        ("frequency_bins", "bins_per_decade"),
    ):
        result = _invoke("query", root, name, "--param", f"{param}=1; DROP TABLE runs")
        assert result.exit_code == 1
        assert result.stderr.strip() == (
            f"Error: query {name}: --param {param} expects int, got '1; DROP TABLE runs'"
        )


def test_unknown_query_and_parameters_are_clear_errors(synth_root):
    root = synth_root["root"]
    names = ", ".join(all_queries())
    result = _invoke("query", root, "nosuch")
    assert result.exit_code == 1
    assert result.stderr.strip() == f"Error: no query named 'nosuch'; available: {names}"

    result = _invoke("query", root, "summary", "--param", "runid=x")
    assert result.exit_code == 1
    assert result.stderr.strip() == "Error: query summary has no parameter 'runid'; valid: run_id"
    result = _invoke("query", root, "frequency_bins", "--param", "bins=3")
    assert "valid: run_id, reference, bins_per_decade" in result.stderr

    result = _invoke("query", root, "compare_runs", "--param", "a=ckpt-100")
    assert result.exit_code == 1
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1 and "--param b=" in err and "second run_id" in err
    result = _invoke("query", root, "compare_runs")
    assert "--param a=" in result.stderr

    result = _invoke("query", root, "summary", "--param", "run_id")
    assert result.exit_code == 1 and "key=value" in result.stderr
    with pytest.raises(MixscopeError, match="available: checkpoint_trend"):
        get_query("nope")
