"""The shard worker: a plain class that owns one model and turns shards into files.

It knows nothing of Ray: the local executor calls it in-process, the Ray executor wraps it
in an actor. It writes each shard's files (temporary name, then rename) and returns their
description; committing is the driver's job, so a worker that dies leaves nothing visible.
"""

from __future__ import annotations

import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from mixscope.config import JobSpec, build_spec
from mixscope.corpus.encode import EncodedSequence, encode_documents
from mixscope.corpus.plan import Document, Shard, read_shard
from mixscope.mixing.batches import run_batches
from mixscope.mixing.engine import MixingEngine
from mixscope.models.loading import load
from mixscope.runtime import faults
from mixscope.runtime.results import ShardResults
from mixscope.stats.block import Vocabulary
from mixscope.store.layout import Layout


class ShardWorker:
    """Loads the model once; ``process(shard)`` analyses one shard and writes its files."""

    def __init__(self, spec: dict[str, Any] | JobSpec, run_id: str) -> None:
        self.spec = spec if isinstance(spec, JobSpec) else build_spec(spec)
        self.run_id = run_id
        r, a = self.spec.runtime, self.spec.analysis
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # one bar per actor per load is noise in job logs
        loading = time.time()
        self.loaded = load(self.spec.model, revision=a.revision, dtype=a.dtype, device=r.device)
        device = next(self.loaded.model.parameters()).device
        if device.type == "cpu":
            import torch

            torch.set_num_threads(max(1, int(r.cpus_per_worker)))
        self.device = str(device)
        self.load_seconds = round(time.time() - loading, 3)  # start-up cost (benchmarks/elastic.py)
        self.engine = MixingEngine(self.loaded, verify=r.verify, attention=a.attention)
        self.max_length = self.loaded.resolve_max_length(self.spec.analysis.max_length)
        self.layout = Layout.open(self.spec.out)
        self.vocab = Vocabulary(self.loaded.tokenizer)
        self._prefetch = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenize")
        # statistics, detail rows and Parquet encoding, one chunk behind the model
        self._host = ThreadPoolExecutor(max_workers=1, thread_name_prefix="results")

    def close(self) -> None:
        """Stop the tokenizing and result threads (an actor's process ends with it anyway)."""
        self._prefetch.shutdown(wait=True)
        self._host.shutdown(wait=True)

    def info(self) -> dict[str, Any]:
        return {"host": socket.gethostname(), "pid": os.getpid(), "device": self.device}

    def startup(self) -> dict[str, Any]:
        """``info`` and how long the model took to load (the pool's readiness call)."""
        return {**self.info(), "load_seconds": self.load_seconds}

    def _encode(self, docs: list[Document]) -> list[EncodedSequence]:
        a = self.spec.analysis
        return encode_documents(
            self.loaded.tokenizer,
            [d.text for d in docs],
            max_length=self.max_length,
            mask_rate=a.mask_rate,
            seed=a.seed,
            doc_ids=[d.doc_id for d in docs],
            mask_count=a.mask_count,
        )

    def process(self, shard: dict[str, Any] | Shard) -> dict[str, Any]:
        shard = shard if isinstance(shard, Shard) else Shard(**shard)
        started = time.time()
        faults.maybe_fail(shard.shard_id)
        faults.maybe_slow()
        docs = read_shard(shard, self.spec.corpus)
        # tokenize the next chunk while the model runs on this one
        chunk = max(64, 4 * self.spec.runtime.batch_size)
        chunks = [docs[i : i + chunk] for i in range(0, len(docs), chunk)]
        results = ShardResults(
            self.layout, self.run_id, shard.shard_id, self.vocab, self.spec.output, self._host
        )
        sequences = 0
        pending = self._prefetch.submit(self._encode, chunks[0]) if chunks else None
        for k in range(len(chunks)):
            assert pending is not None
            encoded = pending.result()
            if k + 1 < len(chunks):
                pending = self._prefetch.submit(self._encode, chunks[k + 1])
            out = run_batches(
                self.engine,
                encoded,
                self.spec.runtime.batch_size,
                batch_tokens=self.spec.runtime.batch_tokens,
            )
            results.add(encoded, [m for m, _ in out])
            sequences += len(encoded)
            if k == 0:
                faults.maybe_kill(shard.shard_id)
        files = results.finish(docs)
        return {
            "run_id": self.run_id,
            "shard_id": shard.shard_id,
            "docs": len(docs),
            "sequences": sequences,
            "tokens": results.tokens,
            "rows": results.rows,
            "detail_rows": results.detail_rows,
            "files": files,
            "seconds": round(time.time() - started, 3),
            **self.info(),
        }
