"""The 2024–26 layouts end to end: tiny random Gemma-3 and OLMo-2 models through
``mixscope run`` on a real local Ray with every group, the named queries over what they
committed, and ``checkpoints sync`` over two revisions of a tiny OLMo-2 (local directories),
as a user re-analysing OLMo's published training checkpoints would."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner

from mixscope.cli import main
from mixscope.mixing.measures import measure_set
from mixscope.sql.named import run_query
from mixscope.sql.views import connect
from run_helpers import DEMO

GROUPS = ("paper", "sink", "ff", "distance")  # every group that applies to a pre-LN decoder
SCOPES = {
    "gemma3": {
        "attn_branch": "post_attention_layernorm",
        "attnresln": "pre_feedforward_layernorm",
        "ff_branch": "post_feedforward_layernorm",
        "ffresln": "input_layernorm of the next block, norm after the last block",
    },
    "olmo2": {
        "attn_branch": "post_attention_layernorm",
        "attnresln": None,
        "ff_branch": "post_feedforward_layernorm",
        "ffresln": "none between blocks, norm after the last block",
    },
}


def _save(family: str, folder: Path, seed: int = 0) -> Path:
    from tiny_models import build

    model, tok = build(family, torch.float32, seed=seed)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _detail(out: Path, measures: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Every committed detail row, read with pyarrow (not DuckDB): measure → [token, layer]."""
    files = sorted((out / "tokens").rglob("part-*.parquet"))
    assert files
    tables = [pq.read_table(f, columns=list(measures)) for f in files]
    return {m: np.concatenate([np.array(t[m].to_pylist()) for t in tables]) for m in measures}


@pytest.mark.parametrize("family", ["gemma3", "olmo2"])
def test_a_new_layout_runs_every_group_on_ray(ray_local, tmp_path, family):
    model = _save(family, tmp_path / family)
    out = tmp_path / "out"
    args = ["run", "--model", str(model), "--corpus", str(DEMO), "--out", str(out)]
    args += ["--workers", "2", "--max-length", "32", "--measures", "all", "--detail", "full"]
    args += ["--set", "runtime.docs_per_shard=8", "--no-progress"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    (run_dir,) = (out / "_mixscope" / "runs").iterdir()
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "complete" and record["corpus"]["n_docs"] == 30
    assert record["model"]["scopes"] == SCOPES[family]  # which norm each scope used
    # 'all' says what it left out, in one line each: GlobEnc reads a post-LN block's LN2
    notes = [ln for ln in result.stderr.splitlines() if ln.startswith("note:")]
    assert notes == [
        f"note: measures 'all' skipped globenc: {record['measures']['skipped']['globenc']}"
    ]

    layers = 3 if family == "gemma3" else 2
    stored = measure_set(GROUPS).stored
    rows = _detail(out, stored)  # measure → [token, layer]
    tokens = rows["attn_n"].shape[0]
    assert all(v.shape == (tokens, layers) for v in rows.values())
    profile = run_query(connect(str(out)), "layer_profile", {}).fetchall()
    assert len(profile) == layers * len(measure_set(GROUPS).columns)
    got = {(layer, m): (mean, n) for _run, layer, m, mean, _seq, n in profile}
    assert {layer for layer, _m in got} == set(range(1, layers + 1))  # 1-based
    for layer in range(layers):
        for m in stored:  # the statistics' means are the detail rows' means
            mean, n = got[(layer + 1, m)]
            assert n == tokens
            assert mean == pytest.approx(float(rows[m][:, layer].mean()), abs=1e-6)
    # OLMo-2's FF reads the residual sum raw: what the next stage reads is that sum
    if family == "olmo2":
        assert np.array_equal(rows["attnresln_n"], rows["attnres_n"])
    else:
        assert not np.array_equal(rows["attnresln_n"], rows["attnres_n"])


def test_checkpoints_sync_over_two_olmo2_revisions(ray_local, tmp_path):
    from mixscope.checkpoints.sync import sync_pass
    from mixscope.config import load_spec

    train = tmp_path / "train"
    old = time.time() - 3600
    for k, step in enumerate((1000, 2000)):
        folder = _save("olmo2", train / f"stage1-step{step}", seed=k)
        for p in folder.rglob("*"):  # written long ago: past any quiet period
            os.utime(p, (old, old))
    probe = tmp_path / "probe.txt"
    probe.write_text("A short probe sentence.\nAnother probe sentence, a little longer.\n")
    out = tmp_path / "out"
    spec = load_spec(
        None,
        {
            "name": "tiny-olmo",
            "corpus.paths": [str(probe)],
            "out": str(out),
            "analysis.max_length": 32,
            "analysis.measures": "all",
            "runtime.workers": 1,
            "checkpoints.quiet_seconds": 30,
        },
    )
    report = sync_pass(spec, source=str(train))
    assert [(o.step, o.status) for o in report.outcomes] == [(1000, "analysed"), (2000, "analysed")]
    con = connect(str(out))
    trend = run_query(con, "checkpoint_trend", {"model": "tiny-olmo"}).fetchall()
    columns = measure_set(GROUPS).columns
    assert len(trend) == 2 * 2 * len(columns)  # steps × layers × measures
    assert sorted({r[1] for r in trend}) == [1000, 2000]
    # two revisions, two sets of weights: the trend moves
    by_step = {(r[1], r[3], r[4]): r[5] for r in trend if r[4] in ("attn_n", "ff_n", "ffresln_n")}
    assert any(by_step[(1000, lay, m)] != by_step[(2000, lay, m)] for (_s, lay, m) in by_step)
