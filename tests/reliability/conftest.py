"""The clean run every reliability scenario is compared with (the demo job, real Ray)."""

from __future__ import annotations

import pytest

from mixscope.runtime.driver import run_job
from run_helpers import content_hash, job_spec


@pytest.fixture(scope="session")
def clean_run(ray_local, tiny_bert_dir, tmp_path_factory):
    """(summary, root, content hash) of the demo job run once without faults."""
    out = tmp_path_factory.mktemp("clean")
    summary = run_job(job_spec(tiny_bert_dir, out), show_progress=False)
    assert summary.status == "complete"
    return summary, str(out), content_hash(str(out))
