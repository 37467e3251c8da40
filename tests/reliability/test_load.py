"""Load: many small documents, few actors, and every shard failing once."""

from __future__ import annotations

import json

import pytest

from mixscope.config import load_spec
from mixscope.runtime.driver import run_job
from mixscope.store import manifest
from mixscope.store.layout import Layout
from run_helpers import content_hash

N_DOCS = 10_000


def _spec(model: str, corpus, out, executor: str):
    return load_spec(
        None,
        {
            "model": model,
            "corpus.paths": [str(corpus)],
            "out": str(out),
            "runtime.executor": executor,
            "runtime.workers": 2,
            "runtime.docs_per_shard": N_DOCS // 8,
            "runtime.batch_size": 64,
            "runtime.max_retries": 1,
            "analysis.max_length": 16,
            "output.detail": "full",
        },
    )


@pytest.mark.scenario(
    "Load: 10,000 small documents, 8 shards, 2 actors, a retry storm",
    injected="every shard raises on its first attempt (16 attempts for 8 shards)",
    checked="8 shards committed at attempt 2 each, 10,000 documents; rows and statistics "
    "equal an in-process run without faults",
)
def test_retry_storm_on_many_small_documents(ray_local, tiny_bert_dir, tmp_path, monkeypatch):
    corpus = tmp_path / "many.txt"
    corpus.write_text("".join(f"document {i} says hello {i % 97}\n" for i in range(N_DOCS)))
    clean = run_job(_spec(tiny_bert_dir, corpus, tmp_path / "clean", "local"), show_progress=False)
    assert clean.status == "complete" and clean.shards_total == 8

    markers = tmp_path / "markers"
    monkeypatch.setenv("MIXSCOPE_FAULTS", json.dumps({"fail_once_each": {"dir": str(markers)}}))
    stormy = run_job(_spec(tiny_bert_dir, corpus, tmp_path / "storm", "ray"), show_progress=False)
    assert stormy.status == "complete" and stormy.run_id == clean.run_id
    assert sorted(p.name for p in markers.iterdir()) == [str(i) for i in range(8)]
    layout = Layout.open(str(tmp_path / "storm"))
    commits = manifest.commits(layout, stormy.run_id)
    assert sorted(commits) == list(range(8))
    assert {c.attempt for c in commits.values()} == {2}
    assert sum(c.docs for c in commits.values()) == N_DOCS
    assert content_hash(str(tmp_path / "storm")) == content_hash(str(tmp_path / "clean"))
