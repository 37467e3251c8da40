"""Measure groups through whole runs: identity, run.json, files, views, named queries, report.

One results root holding five real runs of ``mixscope run`` (in-process executor, tiny
BERT) with different groups — the paper's alone, paper + globenc + sink, sink alone,
paper + ff, ff alone — so every reader meets runs that have a measure and runs that have
not. Expected values come from the detail files read with pyarrow (no DuckDB, no mixscope
reader).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from mixscope.errors import MixscopeError
from mixscope.mixing.measures import CODES, measure_set
from mixscope.sql.named import run_query
from mixscope.sql.readonly import execute
from mixscope.sql.views import connect

CORPUS = [
    "The cat sat on the mat and looked at the dog.",
    "A dog barked loudly at night, and the neighbours were not amused.",
    "Colorless green ideas sleep furiously.",
    "The quick brown fox jumps over the lazy dog.",
    "She sells sea shells by the sea shore.",
    "Every measure group is one file and its tests.",
    "The first position draws most of the attention weight.",
]
GROUPS = {
    "paper": ["paper"],
    "three": ["paper", "globenc", "sink"],
    "sink": ["sink"],
    "ff": ["paper", "ff"],
    "ff_alone": ["ff"],
}
#: every measure some run of the root has, registry order
EVERY = measure_set(tuple({g for groups in GROUPS.values() for g in groups})).columns


def _spec(model_dir: str, corpus: Path, out: Path, measures: list[str] | None):
    from mixscope.config import load_spec

    values = {
        "model": model_dir,
        "corpus.paths": [str(corpus)],
        "out": str(out),
        "runtime.executor": "local",
        "runtime.docs_per_shard": 3,
        "runtime.batch_size": 4,
        "output.detail": "full",
    }
    if measures is not None:
        values["analysis.measures"] = measures
    return load_spec(None, values)


@pytest.fixture(scope="module")
def mixed(tiny_bert_dir, tmp_path_factory):
    from mixscope.runtime.driver import prepare, run_job

    base = tmp_path_factory.mktemp("mixed")
    corpus = base / "corpus.txt"
    corpus.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    root = base / "results"
    ids = {}
    for name, groups in GROUPS.items():
        summary = run_job(_spec(tiny_bert_dir, corpus, root, groups), show_progress=False)
        assert summary.status == "complete"
        ids[name] = summary.run_id
    default_id = prepare(_spec(tiny_bert_dir, corpus, root, None), write=False).run_id
    return {"root": str(root), "ids": ids, "default_id": default_id, "corpus": corpus}


def _detail(root: str, run_id: str) -> list[dict]:
    """Every detail row of a run, read with pyarrow from its commit records."""
    out = []
    for commit in sorted(Path(root, "_mixscope", "runs", run_id, "commits").glob("*.json")):
        files = json.loads(commit.read_text())["files"]
        out += pq.read_table(Path(root, files["tokens"]["path"])).to_pylist()
    return out


def test_paper_only_runs_keep_their_ids_and_groups_are_recorded(mixed):
    ids = mixed["ids"]
    assert ids["paper"] == mixed["default_id"]  # no measures in the spec: the same run
    assert len(set(ids.values())) == len(GROUPS)
    for name, groups in GROUPS.items():
        record = json.loads(
            Path(mixed["root"], "_mixscope", "runs", ids[name], "run.json").read_text()
        )
        assert record["measures"]["groups"] == groups
        assert record["measures"]["columns"] == list(measure_set(tuple(groups)).columns)
        assert ("measures" in record["options"]["analysis"]) == (groups != ["paper"])


def test_each_run_stores_the_columns_of_its_groups(mixed):
    root, ids = mixed["root"], mixed["ids"]
    for name, groups in GROUPS.items():
        stored = measure_set(tuple(groups)).stored
        rows = _detail(root, ids[name])
        assert (
            rows and set(stored) <= set(rows[0]) and not (set(CODES) - set(stored)) & set(rows[0])
        )
        hist = pq.read_table(
            next(Path(root, "stats", "layer_hist", f"run_id={ids[name]}").glob("*.parquet"))
        )
        assert set(hist["measure"].to_pylist()) == {CODES[m] for m in stored}


def test_tokens_view_answers_for_the_runs_that_have_a_measure(mixed):
    root, ids = mixed["root"], mixed["ids"]
    con = connect(root)
    columns = [d[0] for d in execute(con, "SELECT * FROM tokens LIMIT 0").description]
    assert set(measure_set(("paper", "globenc", "sink")).columns) <= set(columns)
    got = execute(
        con,
        "SELECT run_id, count(*), count(sink_n), count(attn_w), count(globenc_n), "
        "sum(sink_n)::DOUBLE FROM tokens GROUP BY run_id",
    ).fetchall()
    by_run = {r[0]: r[1:] for r in got}
    for name, groups in GROUPS.items():
        rows = _detail(root, ids[name])
        n = sum(len(next(iter(r[m] for m in CODES if m in r))) for r in rows)
        stored = measure_set(tuple(groups)).stored
        has = stored.__contains__
        count, sink, attn, globenc, sink_sum = by_run[ids[name]]
        assert count == n
        assert (sink, attn, globenc) == (
            n if has("sink_n") else 0,
            n if has("attn_w") else 0,
            n if has("globenc_n") else 0,
        )
        if has("sink_n"):
            want = sum(float(np.float32(v)) for r in rows for v in r["sink_n"])
            assert sink_sum == pytest.approx(want, rel=1e-9)


def _expected_sink_profile(rows: list[dict]) -> dict[tuple, tuple]:
    """(layer, category) → (tokens, mean sink_w, mean sink_n), category 'all' included."""
    names = {1: "mask", 2: "cls", 3: "sep", 4: "other_special", 0: "normal"}
    cells: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    for r in rows:
        for layer, (w, n) in enumerate(zip(r["sink_w"], r["sink_n"], strict=True), start=1):
            for cat in ("all", names[r["category"]]):
                cells[(layer, cat)].append((w, n))
    return {
        k: (len(v), float(np.mean([a for a, _ in v])), float(np.mean([b for _, b in v])))
        for k, v in cells.items()
    }


def test_sink_profile_against_the_detail_rows(mixed):
    root, ids = mixed["root"], mixed["ids"]
    cur = run_query(connect(root), "sink_profile")
    names = [d[0] for d in cur.description]
    assert names == ["run_id", "layer", "category", "tokens", "sink_w", "sink_n", "gap", "lsink_w"]
    got = cur.fetchall()
    assert {r[0] for r in got} == {ids["three"], ids["sink"]}  # the paper-only run: not listed
    for name in ("three", "sink"):
        want = _expected_sink_profile(_detail(root, ids[name]))
        mine = {(r[1], r[2]): r[3:] for r in got if r[0] == ids[name]}
        assert set(mine) == set(want)
        for key, (tokens, w, n) in want.items():
            g_tokens, g_w, g_n, gap, lsink = mine[key]
            assert lsink is None  # no learned sinks in these runs
            assert g_tokens == tokens
            assert g_w == pytest.approx(w, abs=1e-6) and g_n == pytest.approx(n, abs=1e-6)
            assert gap == pytest.approx(w - n, abs=1e-6)


def test_a_query_over_a_group_no_run_has_says_so(mixed):
    root, ids = mixed["root"], mixed["ids"]
    con = connect(root, run_ids=[ids["paper"]])
    with pytest.raises(MixscopeError, match="needs the 'sink' measure group") as err:
        run_query(con, "sink_profile")
    assert "\n" not in str(err.value)
    with pytest.raises(MixscopeError, match="no selected run has the measure sink_n"):
        execute(con, "SELECT avg(sink_n) FROM tokens")


#: the scopes through one block, in the order a token's vector passes them (METHOD.md §5)
SCOPES = ["attn_n", "attnres_n", "attnresln_n", "ff_n", "ffres_n", "ffresln_n"]


def _expected_component_profile(rows: list[dict]) -> dict[int, tuple]:
    """layer → (tokens, the mean of every scope, ffresln_n − attnresln_n), in float64 over
    the detail's float32 values (one row per token, one list entry per layer)."""
    per_layer = {
        m: np.array([r[m] for r in rows], dtype=np.float64) for m in SCOPES
    }  # [tokens, layers]
    tokens, layers = per_layer[SCOPES[0]].shape
    out = {}
    for layer in range(layers):
        means = [float(per_layer[m][:, layer].mean()) for m in SCOPES]
        out[layer + 1] = (tokens, *means, means[-1] - means[2])
    return out


def test_component_profile_against_the_detail_rows(mixed):
    root, ids = mixed["root"], mixed["ids"]
    cur = run_query(connect(root), "component_profile")
    names = [d[0] for d in cur.description]
    assert names == ["run_id", "layer", "tokens", *SCOPES, "ff_change"]
    got = cur.fetchall()
    # only the run with both groups: not the paper's alone, not the ff group's alone
    assert {r[0] for r in got} == {ids["ff"]}
    want = _expected_component_profile(_detail(root, ids["ff"]))
    assert len(got) == len(want) == 2  # tiny BERT: one row per layer
    assert [r[1] for r in got] == sorted(want)
    for r in got:
        tokens, *means = want[r[1]]
        assert r[2] == tokens
        assert list(r[3:]) == pytest.approx(means, abs=1e-6)
    # the FF moves the ratio: the change is not a constant zero
    assert any(abs(w[-1]) > 1e-3 for w in want.values())
    one = run_query(connect(root), "component_profile", {"run_id": ids["ff"]}).fetchall()
    assert one == got


def test_component_profile_needs_paper_and_ff_in_one_run(mixed):
    root, ids = mixed["root"], mixed["ids"]
    cases = [
        ([ids["paper"], ids["three"]], "needs the 'ff' measure group and no selected run has it"),
        ([ids["ff_alone"]], "needs the 'paper' measure group and no selected run has it"),
        (
            [ids["paper"], ids["ff_alone"]],
            "needs the 'paper' and 'ff' measure groups in one run and no selected run has them",
        ),
    ]
    for run_ids, message in cases:
        with pytest.raises(MixscopeError, match=message) as err:
            run_query(connect(root, run_ids=run_ids), "component_profile")
        assert "\n" not in str(err.value) and "--measures paper,ff" in str(err.value)
    # the run_id parameter selects too: the whole root has the pair, that run has not
    with pytest.raises(MixscopeError, match="needs the 'ff' measure group"):
        run_query(connect(root), "component_profile", {"run_id": ids["paper"]})


def test_the_report_draws_the_component_figure_for_the_runs_that_have_it(mixed, tmp_path):
    import mixscope
    from mixscope.report.build import build_report

    ids = mixed["ids"]
    chosen = [ids["paper"], ids["ff"], ids["ff_alone"]]  # only one has both groups
    built = build_report(mixed["root"], chosen, str(tmp_path / "png"), "png", examples=False)
    drawn = [Path(f) for f in built.files if Path(f).name.startswith("components-")]
    assert [f.name for f in drawn] == [f"components-{ids['ff']}.png"]
    assert drawn[0].stat().st_size > 10_000
    assert drawn[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.section for p in built.plots].count("components") == 1
    with mixscope.open(mixed["root"]) as res:  # the same figure, unrendered
        (fig,) = res.plot("components")
        assert len(fig.axes) == 2
    # a run without the ff group: the section is there, with no figure and a note why
    page = build_report(mixed["root"], [ids["paper"]], str(tmp_path / "p.html"), examples=False)
    assert not [p for p in page.plots if p.section == "components"]
    text = Path(page.output).read_text()
    assert "Through the block: attention to feed-forward" in text
    assert "No run here has the ff group" in text


def test_layer_summary_lists_every_measure_of_the_runs(mixed):
    root, ids = mixed["root"], mixed["ids"]
    cur = run_query(connect(root), "layer_summary")
    names = [d[0] for d in cur.description]
    assert names == ["run_id", "layer", "tokens", *EVERY]
    for row in cur.fetchall():
        values = dict(zip(names, row, strict=True))
        groups = next(g for n, g in GROUPS.items() if ids[n] == values["run_id"])
        for m in EVERY:
            assert (values[m] is None) == (m not in measure_set(tuple(groups)).columns), m


def test_frequency_correlation_on_a_mixed_root(mixed):
    root, ids = mixed["root"], mixed["ids"]
    con = connect(root)
    approx = run_query(con, "frequency_correlation").fetchall()
    exact = run_query(con, "frequency_correlation_exact").fetchall()
    pairs = {(r[0], r[1]) for r in approx}
    assert pairs == {(r[0], r[1]) for r in exact}
    for name, groups in GROUPS.items():
        assert {m for r, m in pairs if r == ids[name]} == set(measure_set(tuple(groups)).columns)


def test_the_report_draws_the_sink_figure_for_the_runs_that_have_it(mixed, tmp_path):
    from mixscope.report.build import build_report

    built = build_report(mixed["root"], output=str(tmp_path / "png"), fmt="png", examples=False)
    names = {Path(f).name for f in built.files}
    ids = mixed["ids"]
    assert {n for n in names if n.startswith("sink-")} == {
        f"sink-{ids['three']}.png",
        f"sink-{ids['sink']}.png",
    }
    page = build_report(mixed["root"], output=str(tmp_path / "r.html"), examples=False)
    text = Path(page.output).read_text()
    assert "The first position: attention weight and norm" in text and "globenc_n" in text


def test_all_records_what_it_skipped(tiny, tmp_path):
    import torch

    from mixscope.runtime.driver import prepare

    model, tok = tiny("gpt2", torch.float64)
    model.save_pretrained(tmp_path / "gpt2")
    tok.save_pretrained(tmp_path / "gpt2")
    corpus = tmp_path / "c.txt"
    corpus.write_text("one line\nanother line\n", encoding="utf-8")
    spec = _spec(str(tmp_path / "gpt2"), corpus, tmp_path / "out", ["all"])
    record = prepare(spec, write=False).record
    assert record.measures["groups"] == ["paper", "sink", "ff", "distance"]  # ff: pre-LN too
    assert "post-LN" in record.measures["skipped"]["globenc"]
    with pytest.raises(MixscopeError, match="'globenc' does not apply"):
        prepare(_spec(str(tmp_path / "gpt2"), corpus, tmp_path / "out", ["globenc"]), write=False)
