"""``mixscope validate``: everything a run would need, tried on one document, nothing written.

The plan is made and the run identified exactly as ``run`` does (``prepare.prepare`` with
``write=False``), one worker is built (the model loads on the job's device) and the first
document is analysed with the exactness check on (the engine ``analyze`` runs, on the
worker's loaded model), so a spec that validates fails a run only on data or machines it
did not see.
"""

from __future__ import annotations

from dataclasses import dataclass

from mixscope.config import JobSpec

#: sequences per batch of the check (the first document: one, or two segments)
CHECK_BATCH = 8


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
    from mixscope.corpus.encode import encode_documents, validate_documents
    from mixscope.corpus.plan import read_shard
    from mixscope.mixing.batches import run_batches
    from mixscope.mixing.engine import MixingEngine
    from mixscope.runtime.prepare import prepare
    from mixscope.runtime.worker import ShardWorker

    prep = prepare(spec, write=False)
    worker = ShardWorker(spec, prep.run_id, prep.max_length)
    doc = read_shard(prep.plan.shards[0], spec.corpus)[0]
    seqs = encode_documents(  # what ``analyze`` runs, on the worker's own model
        worker.loaded.tokenizer,
        validate_documents([doc.text]),
        max_length=prep.max_length,
        mask_rate=spec.analysis.mask_rate,
        seed=spec.analysis.seed,
    )
    engine = MixingEngine(worker.loaded, verify=True, measures=spec.analysis.measures)
    run_batches(engine, seqs, CHECK_BATCH)  # every selected group's identity too
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
        first_doc_tokens=sum(len(q) for q in seqs),
        out=spec.out,
    )
