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

import numpy as np
import pyarrow as pa

from mixscope.api import _run_batches, to_table
from mixscope.config import JobSpec, build_spec
from mixscope.corpus.encode import EncodedSequence, encode_documents
from mixscope.corpus.plan import Document, Shard, read_shard
from mixscope.mixing.engine import MixingEngine
from mixscope.models.loading import load
from mixscope.runtime import faults
from mixscope.store.layout import Layout
from mixscope.store.writer import write_parquet

FREQUENCY_SCHEMA = pa.schema(
    [("token_id", pa.int32()), ("token", pa.string()), ("count", pa.int64())]
)
DOCUMENT_SCHEMA = pa.schema(
    [
        ("doc_id", pa.int64()),
        ("file", pa.string()),
        ("offset", pa.int64()),
        ("external_id", pa.string()),
        ("segments", pa.int32()),
        ("tokens", pa.int32()),
    ]
)


class ShardWorker:
    """Loads the model once; ``process(shard)`` analyses one shard and writes its files."""

    def __init__(self, spec: dict[str, Any] | JobSpec, run_id: str) -> None:
        self.spec = spec if isinstance(spec, JobSpec) else build_spec(spec)
        self.run_id = run_id
        r, a = self.spec.runtime, self.spec.analysis
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # one bar per actor per load is noise in job logs
        self.loaded = load(self.spec.model, revision=a.revision, dtype=a.dtype, device=r.device)
        device = next(self.loaded.model.parameters()).device
        if device.type == "cpu":
            import torch

            torch.set_num_threads(max(1, int(r.cpus_per_worker)))
        self.device = str(device)
        self.engine = MixingEngine(self.loaded, verify=r.verify)
        self.max_length = self.loaded.resolve_max_length(self.spec.analysis.max_length)
        self.layout = Layout.open(self.spec.out)
        self._prefetch = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenize")

    def info(self) -> dict[str, Any]:
        return {"host": socket.gethostname(), "pid": os.getpid(), "device": self.device}

    def _encode(self, docs: list[Document]) -> list[EncodedSequence]:
        a = self.spec.analysis
        return encode_documents(
            self.loaded.tokenizer,
            [d.text for d in docs],
            max_length=self.max_length,
            mask_rate=a.mask_rate,
            seed=a.seed,
            doc_ids=[d.doc_id for d in docs],
        )

    def process(self, shard: dict[str, Any] | Shard) -> dict[str, Any]:
        shard = shard if isinstance(shard, Shard) else Shard(**shard)
        started = time.time()
        faults.maybe_fail(shard.shard_id)
        docs = read_shard(shard, self.spec.corpus)
        # tokenize the next chunk while the model runs on this one
        chunk = max(64, 4 * self.spec.runtime.batch_size)
        chunks = [docs[i : i + chunk] for i in range(0, len(docs), chunk)]
        seqs: list[EncodedSequence] = []
        measures: list[np.ndarray] = []
        pending = self._prefetch.submit(self._encode, chunks[0]) if chunks else None
        for k in range(len(chunks)):
            assert pending is not None
            encoded = pending.result()
            if k + 1 < len(chunks):
                pending = self._prefetch.submit(self._encode, chunks[k + 1])
            results = _run_batches(self.engine, encoded, self.spec.runtime.batch_size, pairs=False)
            seqs += encoded
            measures += [m for m, _ in results]
            if k == 0:
                faults.maybe_kill(shard.shard_id)
        table = to_table(seqs, measures, self.loaded.tokenizer)
        files = {
            "tokens": self._write("tokens", shard.shard_id, table),
            "frequencies": self._write(
                "frequencies", shard.shard_id, _frequencies(seqs, self.loaded.tokenizer)
            ),
            "documents": self._write("documents", shard.shard_id, _documents(docs, seqs)),
        }
        n_tokens = int(sum(len(s) for s in seqs))
        return {
            "run_id": self.run_id,
            "shard_id": shard.shard_id,
            "docs": len(docs),
            "sequences": len(seqs),
            "tokens": n_tokens,
            "rows": table.num_rows,
            "files": files,
            "seconds": round(time.time() - started, 3),
            **self.info(),
        }

    def _write(self, kind: str, shard_id: int, table: pa.Table) -> dict[str, Any]:
        return write_parquet(self.layout, self.layout.data_file(kind, self.run_id, shard_id), table)


def _frequencies(seqs: list[EncodedSequence], tokenizer: Any) -> pa.Table:
    ids = np.concatenate([s.original_ids for s in seqs]) if seqs else np.empty(0, np.int64)
    uniq, counts = np.unique(ids, return_counts=True)
    tokens = tokenizer.convert_ids_to_tokens(uniq.tolist())
    return pa.Table.from_arrays(
        [pa.array(uniq.astype(np.int32)), pa.array(tokens), pa.array(counts.astype(np.int64))],
        schema=FREQUENCY_SCHEMA,
    )


def _documents(docs: list[Document], seqs: list[EncodedSequence]) -> pa.Table:
    segments: dict[int, int] = {}
    tokens: dict[int, int] = {}
    for s in seqs:
        segments[s.doc_id] = segments.get(s.doc_id, 0) + 1
        tokens[s.doc_id] = tokens.get(s.doc_id, 0) + len(s)
    return pa.Table.from_pydict(
        {
            "doc_id": [d.doc_id for d in docs],
            "file": [d.file for d in docs],
            "offset": [d.offset for d in docs],
            "external_id": [d.external_id for d in docs],
            "segments": [segments.get(d.doc_id, 0) for d in docs],
            "tokens": [tokens.get(d.doc_id, 0) for d in docs],
        },
        schema=DOCUMENT_SCHEMA,
    )
