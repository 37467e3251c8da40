"""The ``distance`` group through whole runs: its named queries and its report figure.

One results root holding three real runs of ``mixscope run`` (in-process executor, tiny
BERT): paper + distance, the same with masking (a second "checkpoint" to compare), and the
paper's alone (no distance group). Expected values come from the detail files read with
pyarrow and numpy (no DuckDB, no mixscope reader): per layer, the mean of each bucket's
share over the tokens with context, the mean reach by bucket midpoints, and the share from
at least a distance.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from mixscope.errors import MixscopeError
from mixscope.sql.named import run_query
from mixscope.sql.views import connect

CORPUS = [
    "The cat sat on the mat and looked at the dog.",
    "A dog barked loudly at night, and the neighbours were not amused.",
    " ".join(["Colorless green ideas sleep furiously while the quick brown fox jumps."] * 6),
    "She sells sea shells by the sea shore.",
]
RUNS = {
    "distance": {"analysis.measures": ["paper", "distance"]},
    "masked": {"analysis.measures": ["paper", "distance"], "analysis.mask_rate": 0.3},
    "paper": {},
}
K = 12


@pytest.fixture(scope="module")
def root(tiny_bert_dir, tmp_path_factory):
    from mixscope.config import load_spec
    from mixscope.runtime.driver import run_job

    base = tmp_path_factory.mktemp("distance")
    corpus = base / "corpus.txt"
    corpus.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    out = base / "results"
    ids = {}
    for name, extra in RUNS.items():
        values = {
            "model": tiny_bert_dir,
            "corpus.paths": [str(corpus)],
            "out": str(out),
            "runtime.executor": "local",
            "runtime.docs_per_shard": 2,
            "runtime.batch_size": 4,
            "output.detail": "full",
            **extra,
        }
        summary = run_job(load_spec(None, values), show_progress=False)
        assert summary.status == "complete"
        ids[name] = summary.run_id
    return {"root": str(out), "ids": ids}


def _shares(root: str, run_id: str) -> tuple[np.ndarray, np.ndarray]:
    """Every token's shares from the detail files: (norm, weight) [tokens, layer, bucket]."""
    rows = []
    for commit in sorted(Path(root, "_mixscope", "runs", run_id, "commits").glob("*.json")):
        files = json.loads(commit.read_text())["files"]
        rows += pq.read_table(Path(root, files["tokens"]["path"])).to_pylist()
    n = np.array([[r[f"dist_n_{b}"] for b in range(K)] for r in rows], dtype=np.float64)
    w = np.array([[r[f"dist_w_{b}"] for b in range(K)] for r in rows], dtype=np.float64)
    return n.transpose(0, 2, 1), w.transpose(0, 2, 1)  # [tokens, layer, bucket]


def _expected(shares: np.ndarray, beyond: int) -> dict:
    """layer → (tokens with context, mean shares [K], reach, share from ≥ beyond)."""
    lo = 2.0 ** np.arange(K)
    mid = np.where(np.arange(K) < K - 1, (lo + 2 * lo - 1) / 2, lo)  # the last: its edge
    out = {}
    for layer in range(shares.shape[1]):
        s = shares[:, layer]  # [tokens, K]
        ctx = s.sum(axis=1) > 0.5  # a token's shares sum to 1, or are all 0
        mean = s[ctx].mean(axis=0)
        out[layer + 1] = (int(ctx.sum()), mean, float(mean @ mid), float(mean[lo >= beyond].sum()))
    return out


@pytest.mark.parametrize("beyond", [64, 3])
def test_distance_profile_against_the_detail_rows(root, beyond):
    ids = root["ids"]
    cur = run_query(connect(root["root"]), "distance_profile", {"beyond": beyond})
    names = [d[0] for d in cur.description]
    got = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    assert {g["run_id"] for g in got} == {ids["distance"], ids["masked"]}  # not the paper's
    for name in ("distance", "masked"):
        norm, weight = _shares(root["root"], ids[name])
        assert norm[:, :, 3:].sum() > 0  # the long document reaches past 8 tokens
        want_n, want_w = _expected(norm, beyond), _expected(weight, beyond)
        mine = [g for g in got if g["run_id"] == ids[name]]
        assert len(mine) == K * len(want_n)
        for g in mine:
            layer, b = g["layer"], g["bucket"]
            tokens, mean_n, reach_n, beyond_n = want_n[layer]
            _, mean_w, reach_w, beyond_w = want_w[layer]
            assert g["lo"] == 2**b and g["hi"] == (None if b == K - 1 else 2 ** (b + 1) - 1)
            assert g["tokens"] == tokens
            assert g["share_n"] == pytest.approx(mean_n[b], abs=1e-6)
            assert g["share_w"] == pytest.approx(mean_w[b], abs=1e-6)
            assert g["diff"] == pytest.approx(mean_n[b] - mean_w[b], abs=1e-6)
            assert g["reach_n"] == pytest.approx(reach_n, rel=1e-6)
            assert g["reach_w"] == pytest.approx(reach_w, rel=1e-6)
            assert g["beyond_n"] == pytest.approx(beyond_n, abs=1e-6)
            assert g["beyond_w"] == pytest.approx(beyond_w, abs=1e-6)
    # by hand: at least 2 tokens away is everything but the nearest bucket
    if beyond == 3:  # buckets from lo = 4: 1 − the shares of δ = 1 and δ = 2–3
        g = next(g for g in got if g["bucket"] == 0)
        near = [x for x in got if x["run_id"] == g["run_id"] and x["layer"] == g["layer"]]
        assert g["beyond_n"] == pytest.approx(1 - near[0]["share_n"] - near[1]["share_n"])


def test_the_run_summary_shows_reach_instead_of_two_dozen_shares(root):
    """What ``mixscope run`` prints: the paper's columns as the named query has them, the 24
    bucket shares replaced by each layer's reach, computed here from the detail rows."""
    from mixscope.sql.summary import layer_summary

    ids = root["ids"]
    headers, rows = layer_summary(root["root"], ids["distance"])
    assert headers == [
        "layer", "tokens", "attn_w", "attn_n", "attnres_w", "attnres_n", "attnresln_n",
        "reach_n", "reach_w",
    ]  # fmt: skip
    norm, weight = _shares(root["root"], ids["distance"])
    want_n, want_w = _expected(norm, 64), _expected(weight, 64)
    assert [r[0] for r in rows] == sorted(want_n)
    for row in rows:
        assert row[-2] == pytest.approx(want_n[row[0]][2], rel=1e-6)
        assert row[-1] == pytest.approx(want_w[row[0]][2], rel=1e-6)
        assert row[-2] != pytest.approx(row[-1])  # by norm and by weight disagree
    # a run without the group: the named query's columns as they are
    headers, rows = layer_summary(root["root"], ids["paper"])
    assert headers == [
        "layer",
        "tokens",
        "attn_w",
        "attn_n",
        "attnres_w",
        "attnres_n",
        "attnresln_n",
    ]
    assert len(rows) == len(want_n)


def test_distance_compare_bucket_by_bucket(root):
    ids = root["ids"]
    con = connect(root["root"])
    cur = run_query(con, "distance_compare", {"a": ids["distance"], "b": ids["masked"]})
    names = [d[0] for d in cur.description]
    got = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    a = _expected(_shares(root["root"], ids["distance"])[0], 64)
    b = _expected(_shares(root["root"], ids["masked"])[0], 64)
    wa = _expected(_shares(root["root"], ids["distance"])[1], 64)
    assert len(got) == K * len(a)
    for g in got:
        layer, k = g["layer"], g["bucket"]
        assert g["share_n_a"] == pytest.approx(a[layer][1][k], abs=1e-6)
        assert g["share_n_b"] == pytest.approx(b[layer][1][k], abs=1e-6)
        assert g["diff_n"] == pytest.approx(b[layer][1][k] - a[layer][1][k], abs=1e-6)
        assert g["share_w_a"] == pytest.approx(wa[layer][1][k], abs=1e-6)
    assert any(abs(g["diff_n"]) > 1e-4 for g in got)  # masking changes the profile


def test_a_root_without_the_group_says_so(root):
    con = connect(root["root"], run_ids=[root["ids"]["paper"]])
    with pytest.raises(MixscopeError, match="needs the 'distance' measure group"):
        run_query(con, "distance_profile")


def test_the_report_draws_the_distance_figure_for_the_runs_that_have_it(root, tmp_path):
    from mixscope.report import distance as RDist
    from mixscope.report.build import build_report

    ids = root["ids"]
    built = build_report(root["root"], output=str(tmp_path / "png"), fmt="png", examples=False)
    names = {Path(f).name for f in built.files}
    assert {n for n in names if n.startswith("distance-")} == {
        f"distance-{ids['distance']}.png",
        f"distance-{ids['masked']}.png",
    }
    page = build_report(root["root"], output=str(tmp_path / "r.html"), examples=False)
    assert "How far each layer reaches" in Path(page.output).read_text()
    # the figure: three heatmaps (norm, weight, norm − weight) over layer × bucket, and the
    # reach per layer by each, from the query's own rows
    rows = [
        dict(zip([d[0] for d in cur.description], r, strict=True))
        for cur in [run_query(connect(root["root"]), "distance_profile")]
        for r in cur.fetchall()
        if r[0] == ids["distance"]
    ]
    fig = RDist.distance_figure(rows, "t")
    heat = [ax for ax in fig.axes if ax.images]
    assert len(heat) == 3
    norm, weight, diff = (ax.images[0].get_array() for ax in heat)
    # the tiny BERT's two layers × the buckets up to the farthest with a share (the longest
    # document, 6 × 12 words, reaches past 32 tokens but not all the 12 buckets' 2,048)
    farthest = max(r["bucket"] for r in rows if r["share_n"] > 0 or r["share_w"] > 0)
    assert 5 <= farthest < K - 1 and norm.shape == (2, farthest + 1)
    assert "is the farthest with context" in heat[0].get_xlabel()
    assert np.allclose(diff, norm - weight)
    assert np.allclose(norm.sum(axis=1), 100.0)  # each layer's shares: the whole context
    # norm and weight on one scale, from 0 to at least the larger share
    (lo, hi), (lo_w, hi_w) = heat[0].images[0].get_clim(), heat[1].images[0].get_clim()
    assert (lo, hi) == (lo_w, hi_w) == (0.0, hi) and max(norm.max(), weight.max()) <= hi <= 100
    (reach,) = [ax for ax in fig.axes if ax.get_ylabel() == "mean reach (tokens)"]
    assert [ln.get_label() for ln in reach.lines] == ["by norm", "by weight"]


def test_the_long_context_job_runs_the_group_on_8k_tokens(tmp_path):
    """jobs/long_context.yaml (8,192-token segments, the fast path, paper + distance) on a
    random Llama-shaped model (tests/shaped_models.py): the job completes, and the far
    buckets (2,048 tokens and more) hold part of the context."""
    import torch

    from mixscope.config import load_spec
    from mixscope.runtime.driver import run_job
    from shaped_models import build

    model_dir = tmp_path / "llama"
    model, tok = build("llama-memory", torch.float32, "cpu", 8192)
    tok.model_max_length = 8192  # the WordPiece tokenizer says 512
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    words = " ".join(f"word{k % 997} and more text" for k in range(2500))
    corpus = tmp_path / "long.jsonl"
    corpus.write_text(json.dumps({"text": words}) + "\n", encoding="utf-8")
    job = Path(__file__).parents[1] / "jobs" / "long_context.yaml"
    spec = load_spec(
        str(job),
        {
            "model": str(model_dir),
            "corpus.paths": [str(corpus)],
            "out": str(tmp_path / "out"),
            "analysis.dtype": "float32",
            "runtime.executor": "local",
        },
    )
    assert spec.analysis.max_length == 8192 and "distance" in spec.analysis.measures
    summary = run_job(spec, show_progress=False)
    assert summary.status == "complete"
    got = run_query(connect(str(tmp_path / "out")), "distance_profile", {"beyond": 2048}).fetchall()
    assert got and all(r[-2] > 0 and r[-1] > 0 for r in got)  # beyond_n, beyond_w


def test_a_job_computes_the_bucket_count_it_was_given(tiny_bert_dir, tmp_path):
    """``analysis.distance_buckets: 4`` reaches the job's workers: buckets 0-3 take every
    share (the last one open-ended), 4-11 stay 0, and the run is not the default's."""
    from mixscope.config import load_spec
    from mixscope.runtime.driver import run_job

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    ids = {}
    for buckets in (4, 12):
        values = {
            "model": tiny_bert_dir,
            "corpus.paths": [str(corpus)],
            "out": str(tmp_path / "results"),
            "runtime.executor": "local",
            "output.detail": "full",
            "analysis.measures": ["paper", "distance"],
            "analysis.distance_buckets": buckets,
        }
        summary = run_job(load_spec(None, values), show_progress=False)
        assert summary.status == "complete"
        ids[buckets] = summary.run_id
    assert ids[4] != ids[12]
    for shares in _shares(str(tmp_path / "results"), ids[4]):
        assert np.all(shares[:, :, 4:] == 0)
        total = shares[:, :, :4].sum(axis=2)  # [tokens, layer]
        assert np.allclose(total[total > 0.5], 1.0, atol=1e-5)
    _, wide = _shares(str(tmp_path / "results"), ids[12])
    assert np.any(wide[:, :, 4:] > 0)  # the default's long sequence reaches beyond bucket 3
