"""``mixscope validate``: everything a run would need, tried on one document, nothing written.

The plan is made and the run identified exactly as ``run`` does (``prepare.prepare`` with
``write=False``), one worker is built (the model loads on the job's device) and the first
document is analysed with the exactness check on, so a spec that validates fails a run only
on data or machines it did not see.
"""

from __future__ import annotations

from dataclasses import dataclass

from mixscope.config import JobSpec


@dataclass(frozen=True)
class JobCheck:
    """What ``validate`` found: the run's id, its model, corpus and first document."""

    run_id: str
    model: str
    family: str
    layers: int
    device: str
    files: int
    docs: int
    shards: int
    bad: dict[str, int]
    first_doc_tokens: int
    out: str


def check_job(spec: JobSpec) -> JobCheck:
    """Plan, identify and analyse the first document of ``spec``; raises what a run would."""
    from mixscope.api import analyze
    from mixscope.corpus.plan import read_shard
    from mixscope.runtime.prepare import prepare
    from mixscope.runtime.worker import ShardWorker

    prep = prepare(spec, write=False)
    worker = ShardWorker(spec, prep.run_id, prep.max_length)
    doc = read_shard(prep.plan.shards[0], spec.corpus)[0]
    table = analyze(
        (worker.loaded.model, worker.loaded.tokenizer),
        [doc.text],
        max_length=prep.max_length,
        mask_rate=spec.analysis.mask_rate,
        seed=spec.analysis.seed,
        verify=True,
    )
    layers = worker.engine.num_layers
    return JobCheck(
        run_id=prep.run_id,
        model=spec.model,
        family=worker.loaded.adapter.family,
        layers=layers,
        device=str(worker.device),
        files=len(prep.plan.files),
        docs=prep.plan.n_docs,
        shards=len(prep.plan.shards),
        bad=dict(prep.plan.bad),
        first_doc_tokens=table.num_rows // layers,
        out=spec.out,
    )
