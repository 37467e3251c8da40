"""The result side of a shard: engine outputs → statistics, detail, frequencies, documents.

It runs on a background thread of its own, one chunk behind the model: while the model
runs chunk k+1, this adds chunk k to the statistics (torch operations on the device the
engine's values are on: on a GPU, kernels queued beside the model's, no per-token work on
the host), gathers the rows the detail keeps there and encodes them as a Parquet row group
on the host. At most one chunk waits (``add`` blocks until the previous one is done), so
memory stays bounded by two chunks plus the shard's encoded detail. ``finish`` copies the
statistics to the host (their size follows the keys seen, not the tokens), builds their
tables and writes each file to a temporary name and renames it; committing is the
driver's job.

Nothing here needs a model: ``benchmarks/host.py`` replays stored measures through it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from mixscope.config import OutputSpec
from mixscope.corpus.encode import EncodedSequence
from mixscope.corpus.plan import Document
from mixscope.registry import MeasureSet
from mixscope.stats.accumulate import ShardStatistics
from mixscope.stats.detail import ShardFloor, detail_table, kept
from mixscope.stats.token_block import Vocabulary, token_block
from mixscope.store.layout import Layout
from mixscope.store.schema import DOCUMENT_SCHEMA
from mixscope.store.writer import ParquetBuffer, write_bytes, write_parquet

#: threads that encode and write a shard's statistics files at ``finish``
ENCODE_THREADS = 4


class ShardAccumulator:
    """Collects one shard's results chunk by chunk; ``finish`` writes its files."""

    def __init__(
        self,
        layout: Layout,
        run_id: str,
        shard_id: int,
        vocab: Vocabulary,
        output: OutputSpec,
        host: ThreadPoolExecutor | None = None,
        *,
        measures: MeasureSet,
    ) -> None:
        self.layout, self.run_id, self.shard_id = layout, run_id, shard_id
        self.vocab, self.output = vocab, output
        self._host = host
        self._pending: Future | None = None
        # the engine's columns (the run's selected groups); the files hold the stored ones
        self.measures = measures
        self._stats = ShardStatistics(vocab, self.measures)
        self._detail: ParquetBuffer | None = None
        self._per_doc: dict[int, list[int]] = {}  # doc_id → [segments, tokens]
        self._layers = 0  # the model's layers (every chunk's)
        self.tokens = 0
        self.rows = 0  # token-layer rows analysed (all in the statistics)
        self.detail_rows = 0  # token-layer rows kept as detail
        # CPU seconds of the result path's own thread (chunks and finish): what the host
        # pays per token beside the model (benchmarks/actor.py)
        self.cpu_seconds = 0.0
        # output.detail=sample: at least one document per shard (stats/detail.py)
        self._floor = ShardFloor() if output.detail == "sample" else None

    def add(
        self,
        seqs: Sequence[EncodedSequence],
        measures: torch.Tensor | Sequence[np.ndarray | torch.Tensor],
    ) -> None:
        """Queue one chunk: ``measures`` the chunk's ``[tokens, measure, layer]`` tensor in
        ``seqs`` order (``mixing.batches.run_chunk``, on the engine's device), or one
        ``[layer, measure, seq]`` array per sequence."""
        if not seqs:
            return
        if self._host is None:
            self._consume(seqs, measures)
            return
        self._wait()
        self._pending = self._host.submit(self._consume, seqs, measures)

    def _wait(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()  # re-raises a failure of the host thread

    def _consume(
        self,
        seqs: Sequence[EncodedSequence],
        measures: torch.Tensor | Sequence[np.ndarray | torch.Tensor],
    ) -> None:
        started = time.thread_time()
        block = token_block(seqs, measures, self.vocab, self.measures)
        self._layers = block.layers
        self._stats.add(block)
        # the detail's choice is per document: decided per sequence, then per token
        docs = np.array([s.doc_id for s in seqs], dtype=np.int64)
        keep_seq = kept(docs, self.output.detail, self.output.sample_rate)
        keep = np.repeat(keep_seq, [len(s) for s in seqs])  # [tokens]
        floor = self._floor
        if floor is not None and (held := floor.offer(docs, keep_seq)) is not None:
            # the shard's smallest-hash document so far: its rows held back until finish
            floor.hold(self._detail_table(block.take(block.doc_id == held)))
        if keep.any():
            part = block if keep.all() else block.take(keep)  # gathered on the device
            self._add_detail(self._detail_table(part))
        for s in seqs:
            entry = self._per_doc.setdefault(s.doc_id, [0, 0])
            entry[0] += 1
            entry[1] += len(s)
        self.tokens += len(block)
        self.rows += len(block) * block.layers
        self.cpu_seconds += time.thread_time() - started

    def _detail_table(self, part: Any) -> pa.Table:
        return detail_table(part, self.vocab, self.output.precision, stored=self.measures.stored)

    def _add_detail(self, table: pa.Table) -> None:
        if self._detail is None:
            self._detail = ParquetBuffer(table.schema)
        self._detail.add(table)
        self.detail_rows += len(table) * self._layers

    def finish(self, docs: Sequence[Document]) -> dict[str, dict[str, Any]]:
        """Merge and write every file of the shard; kind → its manifest entry."""
        self._wait()
        started = time.thread_time()
        if self._floor is not None and not self._floor.sampled:
            for table in self._floor.parts:  # no document under the rate: the floor's one
                self._add_detail(table)
        tables = [(name, table, True) for name, table in self._stats.tables().items()]
        tables.append(("documents", self._documents(docs), False))
        # the tables encoded side by side (Arrow releases the GIL): the shard's files are
        # ready in a fraction of the wall time (what a GPU's actor waits for between shards)
        with ThreadPoolExecutor(ENCODE_THREADS, thread_name_prefix="encode") as pool:
            written = list(pool.map(lambda t: self._write(*t), tables))
        files = {name: entry for (name, _, _), (entry, _) in zip(tables, written, strict=True)}
        self.cpu_seconds += sum(cpu for _, cpu in written)
        if self._detail is not None:
            path = self.layout.shard_file("tokens", self.run_id, self.shard_id)
            data = self._detail.getvalue()
            files["tokens"] = write_bytes(self.layout, path, data, self._detail.rows)
        self.cpu_seconds += time.thread_time() - started
        return files

    def _write(self, kind: str, table: pa.Table, stats: bool) -> tuple[dict[str, Any], float]:
        """Encode and write one file (on an encoding thread): its entry, the CPU it took."""
        started = time.thread_time()
        path = self.layout.shard_file(kind, self.run_id, self.shard_id)
        entry = write_parquet(self.layout, path, table, stats, partial=stats)
        return entry, time.thread_time() - started

    def _floor_docs(self) -> list[int]:
        """The document kept by the one-per-shard minimum alone (none, or one)."""
        floor = self._floor
        if floor is None or floor.sampled or floor.doc_id is None:
            return []
        return [floor.doc_id]

    def _documents(self, docs: Sequence[Document]) -> pa.Table:
        ids = np.array([d.doc_id for d in docs], dtype=np.int64)
        return pa.Table.from_pydict(
            {
                "doc_id": ids,
                "file": [d.file for d in docs],
                "offset": [d.offset for d in docs],
                "external_id": [d.external_id for d in docs],
                "segments": [self._per_doc.get(d.doc_id, [0, 0])[0] for d in docs],
                "tokens": [self._per_doc.get(d.doc_id, [0, 0])[1] for d in docs],
                "in_detail": kept(ids, self.output.detail, self.output.sample_rate)
                | np.isin(ids, self._floor_docs()),
            },
            schema=DOCUMENT_SCHEMA,
        )
