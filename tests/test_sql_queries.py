"""Every named query against its independent computation (tests/sql_oracle.py)."""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import sql_fixtures as sf
from mixscope.errors import MixscopeError
from mixscope.sql.named import all_queries
from mixscope.store.layout import Layout
from sql_oracle import (
    REFERENCES,
    _check,
    _check_rho,
    _invoke,
    expect_checkpoint_trend,
    expect_compare_runs,
    expect_compare_token_types,
    expect_depth_correlation,
    expect_frequency_bins,
    expect_frequency_correlation,
    expect_layer_profile,
    expect_layer_summary,
    expect_summary,
    expect_token_types,
    expect_top_tokens,
    rows_of,
    run,
)


def test_every_named_query_is_checked_here():
    names = set(all_queries())
    assert names == {
        "summary",
        "layer_profile",
        "layer_summary",
        "token_types",
        "frequency_correlation",
        "frequency_correlation_exact",
        "frequency_bins",
        "depth_correlation",
        "checkpoint_trend",
        "compare_runs",
        "compare_token_types",
        "top_tokens",
        "sink_profile",  # tests/test_measure_runs.py (a root with the sink group)
        "component_profile",  # tests/test_measure_runs.py (a root with the paper + ff groups)
        "distance_profile",  # tests/test_distance_runs.py (a root with the distance group)
        "distance_compare",  # tests/test_distance_runs.py
    }
    for q in all_queries().values():
        assert q.description and q.columns and q.sql.lstrip().startswith("--"), q.name
        assert (Path(__file__).parents[1] / "queries" / f"{q.name}.sql").is_file(), q.name


def test_summary(res):
    rows = rows_of(res)
    got = _check(res, "summary", expect_summary(rows))
    assert len(got) == 5 * len(rows.runs)
    one = res["runs"][0]
    _check(res, "summary", expect_summary(rows, one), run_id=one)
    if res["kind"] == "synthetic":  # a constant column: mean = max = min
        edge = [g for g in got if g[0] == sf.EDGE_RUN and g[1] == "attnres_w"]
        assert edge and edge[0][2:5] == (0.25, 0.25, 0.25)


def test_layer_profile(res):
    rows = rows_of(res)
    got = _check(res, "layer_profile", expect_layer_profile(rows))
    assert len(got) == 5 * len(rows.group("run_id", "layer"))
    # the macro mean differs from the token-level mean when sequence lengths differ
    assert any(not math.isclose(g[3], g[4]) for g in got)
    one = res["runs"][-1]
    _check(res, "layer_profile", expect_layer_profile(rows, one), run_id=one)


def test_layer_summary(res):
    rows = rows_of(res)
    _check(res, "layer_summary", expect_layer_summary(rows))
    one = res["runs"][0]
    _check(res, "layer_summary", expect_layer_summary(rows, one), run_id=one)


def test_token_types(res):
    rows = rows_of(res)
    got = _check(res, "token_types", expect_token_types(rows))
    present = set(zip(rows.run_id, rows.layer, rows.category, strict=True))
    assert len(got) == 5 * len(present)
    one = res["runs"][0]
    _check(res, "token_types", expect_token_types(rows, one), run_id=one)


@pytest.mark.parametrize("reference", [None, *REFERENCES])
def test_frequency_correlation(res, reference):
    rows = rows_of(res)
    want = expect_frequency_correlation(res, rows, reference=reference)
    params = {} if reference is None else {"reference": reference}
    got = _check_rho(res, "frequency_correlation", want, **params)
    assert len(got) == 5 * len(rows.runs)
    assert any(not sf.nan_or_none(g[2]) and abs(g[2]) > 0.01 for g in got)
    if res["kind"] == "synthetic":  # the constant column has no rank correlation
        edge = [g for g in got if g[0] == sf.EDGE_RUN and g[1] == "attnres_w"]
        assert sf.nan_or_none(edge[0][2]) and sf.nan_or_none(edge[0][3])
    one = res["runs"][1]
    want_one = expect_frequency_correlation(res, rows, run_id=one, reference=reference)
    _check_rho(res, "frequency_correlation", want_one, run_id=one, **params)


@pytest.mark.parametrize("reference", [None, "ref_text"])
def test_frequency_correlation_exact(res, reference):
    rows = rows_of(res)
    exact = lambda want: [(*w[:-1], 0.0) for w in want]  # noqa: E731  no bound: exact
    want = expect_frequency_correlation(res, rows, reference=reference)
    params = {} if reference is None else {"reference": reference}
    _check(res, "frequency_correlation_exact", exact(want), **params)
    one = res["runs"][0]
    want_one = expect_frequency_correlation(res, rows, run_id=one, reference=reference)
    _check(res, "frequency_correlation_exact", exact(want_one), run_id=one, **params)


def test_frequency_correlation_ignores_other_references(res):
    """With a reference, each occurrence is joined once (not once per imported table)."""
    got = run(res["root"], "frequency_correlation", reference="ref_csv")[1]
    _, counts = res["refs"]["ref_csv"]
    rows = rows_of(res)
    n = sum(1 for o in rows.occurrences() if o["original_id"] in counts)  # masked: original
    assert sum(g[4] for g in got) == 5 * n


@pytest.mark.parametrize(("reference", "per_decade"), [(None, 4), (None, 1), ("ref_text", 3)])
def test_frequency_bins(res, reference, per_decade):
    rows = rows_of(res)
    want = expect_frequency_bins(res, rows, reference=reference, per_decade=per_decade)
    params: dict[str, Any] = {"bins_per_decade": str(per_decade)}  # as from --param
    if reference:
        params["reference"] = reference
    got = _check(res, "frequency_bins", want, **params)
    assert len({g[2] for g in got}) >= 2
    one = res["runs"][0]
    want = expect_frequency_bins(res, rows, run_id=one, reference=reference, per_decade=per_decade)
    _check(res, "frequency_bins", want, run_id=one, **params)


def test_frequency_bin_edges_are_exact(tmp_path):
    """Ranks 1, 10, 100, 1000 open a bin; 9, 99, 999 close the one before (any k)."""
    layout = Layout.open(str(tmp_path))
    # 1200 distinct tokens, ranked by a reference with strictly decreasing counts
    ids = list(range(1000, 2200))
    n = len(ids)
    seq = {
        "doc_id": 0,
        "segment": 0,
        "original_ids": ids,
        "token_id": ids,
        "token_type": [0] * n,
        "is_special": [False] * n,
        "is_masked": [False] * n,
    }
    rng = np.random.default_rng(3)
    sf.write_synthetic_run(
        layout, "edges", [sf.shard_arrays([seq], 1, rng)], name="edges", step=None
    )
    ref = tmp_path / "ref.csv"
    ref.write_text("token_id,count\n" + "".join(f"{t},{10_000 - k}\n" for k, t in enumerate(ids)))
    assert _invoke("frequencies", "import", str(tmp_path), str(ref), "--name", "e").exit_code == 0
    for k in (1, 2, 3, 4, 6):
        got = run(str(tmp_path), "frequency_bins", bins_per_decade=k, reference="e")[1]
        ns = {g[2]: g[6] for g in got if g[1] == "attn_w"}
        want: dict[int, int] = defaultdict(int)
        for rank in range(1, n + 1):
            want[sf.log_bin(rank, k)] += 1
        assert ns == dict(want), k


def test_depth_correlation(res):
    rows = rows_of(res)
    got = _check_rho(res, "depth_correlation", expect_depth_correlation(rows))
    assert len(got) == 5 * len(rows.runs)
    if res["kind"] == "synthetic":
        by = {(g[0], g[1]): g[2] for g in got}
        assert sf.nan_or_none(by[(sf.EDGE_RUN, "attnres_w")])  # constant
        assert by[("ckpt-100", "attn_n")] > 0.1  # the data grow with depth
    one = res["runs"][0]
    _check_rho(res, "depth_correlation", expect_depth_correlation(rows, one), run_id=one)


def test_checkpoint_trend(res):
    rows = rows_of(res)
    got = _check(res, "checkpoint_trend", expect_checkpoint_trend(rows))
    steps = [g[1] for g in got]
    if res["kind"] == "synthetic":
        model = sf.CKPT_MODEL
        assert {g[0] for g in got} == {sf.CKPT_MODEL, sf.OTHER_MODEL}
        assert len(got) == 5 * (3 * 2 + 1)  # 3 steps x 2 layers + 1 step x 1 layer
        mine = [g for g in got if g[0] == sf.CKPT_MODEL]
        assert [g[1] for g in mine] == sorted(g[1] for g in mine)
        assert {g[1] for g in mine} == {100, 200, 300}
    else:
        model = "real-job"
        assert sorted(set(steps)) == [1000, 2000] and steps == sorted(steps)
    _check(res, "checkpoint_trend", expect_checkpoint_trend(rows, model), model=model)
    assert run(res["root"], "checkpoint_trend", model="no such model")[1] == []


def test_checkpoint_trend_keeps_one_name_over_two_corpora_apart(tmp_path):
    """Two training runs given one job name but analysed on different corpora are two
    series ("name [corpus]"), never one line mixing their steps; the oracle agrees."""
    rng = np.random.default_rng(3)
    layout = Layout.open(str(tmp_path))
    seqs = sf.make_sequences(rng, 4, pairs=False, unk_every=0)
    for run_id, step, corpus in (("x-1", 1, "wiki"), ("x-2", 2, "wiki"), ("y-1", 1, "books")):
        shards = [sf.shard_arrays(seqs, 2, np.random.default_rng(step))]
        sf.write_synthetic_run(layout, run_id, shards, name="exp", step=step, corpus=corpus)
    got = run(str(tmp_path), "checkpoint_trend")[1]
    assert {g[0] for g in got} == {"exp [/synthetic/wiki.txt]", "exp [/synthetic/books.txt]"}
    wiki = [g for g in got if g[0] == "exp [/synthetic/wiki.txt]"]
    assert {g[2] for g in wiki} == {"x-1", "x-2"} and [g[1] for g in wiki] == sorted(
        g[1] for g in wiki
    )
    want = expect_checkpoint_trend(rows_of({"root": str(tmp_path)}))
    assert [g[:5] for g in got] == [w[:5] for w in want]
    assert np.allclose([g[5] for g in got], [w[5] for w in want])


def test_compare_runs(res):
    rows = rows_of(res)
    a, b = res["runs"][0], res["runs"][-1]
    got = _check(res, "compare_runs", expect_compare_runs(rows, a, b), a=a, b=b)
    assert len(got) == 5 * len(
        {layer for (r, layer) in rows.group("run_id", "layer") if r in (a, b)}
    )
    # against itself: no difference
    same_run = run(res["root"], "compare_runs", a=a, b=a)[1]
    assert same_run and all(g[4] == 0 for g in same_run)
    # against a run that does not exist: an error listing the runs (was: b's side empty)
    with pytest.raises(MixscopeError) as err:
        run(res["root"], "compare_runs", a=a, b="nope")
    assert str(err.value) == (
        "query compare_runs --param b: no selected run 'nope'; selected runs: "
        + ", ".join(sorted(res["runs"]))
    )
    # unique prefixes name the runs, as in `mixscope compare`
    assert run(res["root"], "compare_runs", a=a[:-1], b=b)[1] == got


def test_compare_token_types(res):
    rows = rows_of(res)
    a, b = res["runs"][0], res["runs"][-1]
    got = _check(res, "compare_token_types", expect_compare_token_types(rows, a, b), a=a, b=b)
    assert {g[2] for g in got} >= {"normal", "mask"} and any(g[5] for g in got)
    same_run = run(res["root"], "compare_token_types", a=a, b=a)[1]
    assert same_run and all(g[5] == 0 for g in same_run)


def test_compare_runs_with_different_layer_counts(synth_root):
    """edge has 3 layers, ckpt-100 has 2: layer 3 appears once, with one side empty."""
    rows = rows_of(synth_root)
    for a, b in ((sf.EDGE_RUN, "ckpt-100"), ("ckpt-100", sf.EDGE_RUN)):
        got = _check(synth_root, "compare_runs", expect_compare_runs(rows, a, b), a=a, b=b)
        assert [g[0] for g in got] == [1] * 5 + [2] * 5 + [3] * 5


@pytest.mark.parametrize(("min_count", "k"), [(20, 10), (2, 3), (1, 4), (5, 2)])
def test_top_tokens(res, min_count, k):
    rows = rows_of(res)
    want = expect_top_tokens(rows, min_count=min_count, k=k)
    got = _check(res, "top_tokens", want, min_count=str(min_count), k=str(k))
    if min_count <= 2:
        assert got
    if res["kind"] == "synthetic" and min_count == 1:
        # quantized measures: tokens tie on their mean and the tie is broken by token id
        assert any(
            g1[6] == g2[6] and g1[0:3] == g2[0:3] and g1[5] < g2[5]
            for g1, g2 in itertools.pairwise(got)
        )
    one = res["runs"][0]
    want = expect_top_tokens(rows, run_id=one, min_count=min_count, k=k)
    _check(res, "top_tokens", want, run_id=one, min_count=min_count, k=k)
