"""Reference frequency tables: import formats, errors, use in the frequency queries."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sql_fixtures as sf
from mixscope.sql.views import connect
from sql_oracle import (
    REFERENCES,
    _invoke,
    expect_frequency_correlation,
    rows_of,
    run,
)

# -- reference frequencies ----------------------------------------------------------------


def test_frequencies_import_formats(tmp_path):
    root = tmp_path / "r"
    sf.build_synthetic(root)
    txt = tmp_path / "counts.txt"
    txt.write_text("     50 the\n     50 cat\n\n     20 [CLS]\n      3 ##ing\n")
    csv_file = tmp_path / "ranked.csv"
    csv_file.write_text("rank,count,token_id\n1,900,1996\n2,400,4937\n2,400,3899\n9,7,101\n")
    par = tmp_path / "both.parquet"
    pq.write_table(
        pa.table({"token": ["the", "dog"], "token_id": [1996, 3899], "count": [5, 6]}), par
    )
    for name, path in (("txt", txt), ("csv", csv_file), ("par", par)):
        result = _invoke("frequencies", "import", str(root), str(path), "--name", name)
        assert result.exit_code == 0, result.output
    con = connect(str(root))

    def ref(name):
        return con.execute(
            "SELECT token_id, token, count, rank FROM frequencies WHERE reference = ? "
            "ORDER BY rank, token_id, token",
            [name],
        ).fetchall()

    assert ref("txt") == [
        (None, "cat", 50, 1),
        (None, "the", 50, 1),
        (None, "[CLS]", 20, 3),
        (None, "##ing", 3, 4),
    ]
    assert ref("csv") == [
        (1996, None, 900, 1),
        (3899, None, 400, 2),
        (4937, None, 400, 2),
        (101, None, 7, 4),
    ]
    assert ref("par") == [(3899, "dog", 6, 1), (1996, "the", 5, 2)]
    # importing the same name again replaces it
    txt.write_text("1 the\n")
    assert _invoke("frequencies", "import", str(root), str(txt), "--name", "txt").exit_code == 0
    assert ref("txt") == [(None, "the", 1, 1)]


@pytest.mark.parametrize(
    ("content", "name", "message"),
    [
        ("count,word\n1,the\n", "x.csv", "needs a count column and a token or token_id column"),
        ("the 12\n", "x.txt", "expected 'count token'"),
        ("", "x.txt", "has no rows"),
        ("count,token\nmany,the\n", "x.csv", "must be integers"),
    ],
)
def test_frequencies_import_errors(tmp_path, content, name, message):
    path = tmp_path / name
    path.write_text(content)
    result = _invoke("frequencies", "import", str(tmp_path / "root"), str(path), "--name", "r")
    assert result.exit_code == 1
    err = result.stderr.strip().splitlines()
    assert len(err) == 1 and message in err[0], result.stderr
    assert "Traceback" not in result.output


def test_frequencies_import_rejects_bad_names_and_missing_files(tmp_path):
    (tmp_path / "f.txt").write_text("1 the\n")
    result = _invoke(
        "frequencies", "import", str(tmp_path), str(tmp_path / "f.txt"), "--name", "../x"
    )
    assert result.exit_code == 1 and "invalid reference name" in result.stderr
    result = _invoke(
        "frequencies", "import", str(tmp_path), str(tmp_path / "no.txt"), "--name", "x"
    )
    assert result.exit_code == 1 and "does not exist" in result.stderr


def test_frequency_correlation_uses_the_reference_via_cli(real_root):
    root = real_root["root"]
    rows = rows_of(real_root)
    for reference in REFERENCES:
        result = _invoke(
            "query",
            root,
            "frequency_correlation",
            "--param",
            f"reference={reference}",
            "--format",
            "json",
        )
        assert result.exit_code == 0, result.output
        got = [tuple(d.values()) for d in json.loads(result.stdout)]
        want = expect_frequency_correlation(real_root, rows, reference=reference)
        assert got == run(root, "frequency_correlation", reference=reference)[1]
        assert len(got) == len(want) and all(
            abs(g[2] - w[2]) <= g[-1] and abs(g[3] - w[3]) <= g[-1]
            for g, w in zip(got, want, strict=True)
        )
    own = run(root, "frequency_correlation")[1]
    assert [g[2] for g in own] != [g[2] for g in got]  # the reference changed the numbers
