"""The shard worker: a plain class that owns one model and turns shards into files.

It knows nothing of Ray: the local executor calls it in-process, the Ray executor wraps it
in an actor. It writes each shard's files (temporary name, then rename) and returns their
description; committing is the driver's job, so a worker that dies leaves nothing visible.

**Start-up overlap.** A worker can be built with the shard it will be given first
(``first_shard``; the actor pool reserves one per actor it creates, the local executor passes
its first): the tokenizer loads before the weights, then the first shard is read and its
first chunk tokenized on the tokenizing thread while the constructor loads the weights.
Why the weights load in the constructor and not in a background thread: the constructor
still returns only with the model loaded, so its return is the pool's readiness reply and
its failure is the actor's init failure — a model that cannot load fails the job once
(``ActorPool.started``), never as a shard failure that would use up retries on every node.
An error reading that first shard stays the shard's: it is kept in its future and raised
by ``process``, where it was raised before. ``first_shard`` is a hint: a worker handed another
shard first drops what it prefetched. Start-up events are kept in ``timeline``.

**Shards at once.** ``process`` has two phases: the *device phase* (read, tokenize, run
the model chunk by chunk while the result thread accumulates one chunk behind) and
``finish`` (the statistics copied to the host, their tables built, the files written:
host work of O(keys), far longer than a GPU's forward of the shard). The device phase is
serialised (one shard on the model at a time) and ``finish`` is not, so a caller that
runs ``process`` on N threads (the Ray actor, ``runtime.shards_in_flight: N``) has
shard k+1 on the model while the files of shards k, k−1, … k−N+2 are written (N > 2: on
host cores a fast device leaves idle). Device phases take their
``turn`` (the order the pool handed the shards to this worker: Ray's threaded actor does
not promise to start calls in order), so the shard the worker was built with still goes
first and N=1 is today's order. At most ``shards_in_flight`` shards' accumulators are alive
at once (a shard takes a slot before its device phase, gives it back after ``finish``), so the
result side's memory stays bounded whatever the caller does. Each shard's phase times are
in ``ShardResult.phases`` (tests, benchmarks). Called from one thread (the local
executor), ``process`` is what it was.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from mixscope.config import JobSpec
from mixscope.corpus.encode import EncodedSequence, encode_documents
from mixscope.corpus.plan import Document, Shard, read_shard
from mixscope.mixing.batches import run_chunk
from mixscope.mixing.engine import MixingEngine
from mixscope.models.loading import load
from mixscope.models.resolve import load_tokenizer
from mixscope.runtime import faults
from mixscope.runtime.host_path import ShardAccumulator
from mixscope.runtime.shard_result import ShardResult
from mixscope.stats.token_block import Vocabulary
from mixscope.store.layout import Layout

#: characters of text per chunk of a shard (≈ 64k tokens of English; the engine's results
#: for a chunk, [layer, measure, seq] float32 per sequence, stay tens of MB): a whole
#: default shard of WikiText-2 paragraphs (256 documents, ≈ 160k characters) is one chunk
CHUNK_CHARS = 1 << 18
#: seconds a device phase waits for an earlier turn that has not arrived (a call lost on
#: its way): the order is an optimisation (the prefetched first shard), never correctness
TURN_WAIT = 30.0


class ShardWorker:
    """Loads the model once; ``process(shard)`` analyses one shard and writes its files.

    ``max_length`` is the sequence length the driver resolved for the run (part of its
    identity, ``runtime/prepare.py``): taken, not re-derived, so a worker can never encode
    with another length than the one the run id was made from.
    """

    def __init__(
        self,
        spec: JobSpec,
        run_id: str,
        max_length: int,
        first_shard: Shard | None = None,
    ) -> None:
        self.spec = spec
        self.run_id = run_id
        self.max_length = max_length
        self.chunk_chars = CHUNK_CHARS  # tests set it small to make many chunks
        r, a = self.spec.runtime, self.spec.analysis
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # one bar per actor per load is noise in job logs
        self.timeline: dict[str, float] = {}  # start-up events (time.time()): tests, benchmarks
        loading = time.time()
        self.layout = Layout.open(self.spec.out)
        self.tokenizer = load_tokenizer(self.spec.model, revision=a.revision)
        self._prefetch = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenize")
        # the first shard, read and its first chunk tokenized while the weights load
        self._early: tuple[int, Future[tuple[list[Document], list[EncodedSequence]]]] | None
        self._early = None
        if first_shard is not None:
            self._early = (
                first_shard.shard_id,
                self._prefetch.submit(self._prefetch_first, first_shard),
            )
        try:
            faults.maybe_slow_load()
            self.loaded = load(
                self.spec.model,
                revision=a.revision,
                dtype=a.dtype,
                device=r.device,
                tokenizer=self.tokenizer,
            )
        except BaseException:
            self._prefetch.shutdown(wait=False, cancel_futures=True)
            raise
        self.timeline["model_loaded"] = time.time()
        device = next(self.loaded.model.parameters()).device
        if device.type == "cpu":
            import torch

            torch.set_num_threads(max(1, int(r.cpus_per_worker)))
        self.device = str(device)
        self.load_seconds = round(time.time() - loading, 3)  # start-up cost (benchmarks/elastic.py)
        self.engine = MixingEngine(
            self.loaded,
            verify=r.verify,
            attention=a.attention,
            measures=a.measures,
            distance_buckets=a.distance_buckets,
        )
        self.vocab = Vocabulary(self.tokenizer)
        # statistics, detail rows and Parquet encoding, one chunk behind the model
        self._host = ThreadPoolExecutor(max_workers=1, thread_name_prefix="results")
        # two shards at once (module docstring): the model's turns and the live shards
        self._turns = threading.Condition()
        self._on_device = False
        self._next_turn = 0  # the turn after the last device phase that began
        # shards whose accumulators may be alive at once: one on the model, the rest in
        # ``finish`` (what the executor sends at once: a caller sending more waits here)
        self._slots = threading.BoundedSemaphore(r.shards_in_flight)

    def close(self) -> None:
        """Stop the tokenizing and result threads (an actor's process ends with it anyway)."""
        self._prefetch.shutdown(wait=True)
        self._host.shutdown(wait=True)

    def info(self) -> dict[str, Any]:
        return {"host": socket.gethostname(), "pid": os.getpid(), "device": self.device}

    def startup(self) -> dict[str, Any]:
        """``info``, how long the model took to load, the shard prefetched while it loaded
        and the start-up events so far (the pool's readiness call)."""
        return {
            **self.info(),
            "load_seconds": self.load_seconds,
            "first_shard": None if self._early is None else self._early[0],
            "timeline": dict(self.timeline),
        }

    def _encode(self, docs: list[Document]) -> list[EncodedSequence]:
        a = self.spec.analysis
        return encode_documents(
            self.tokenizer,
            [d.text for d in docs],
            max_length=self.max_length,
            mask_rate=a.mask_rate,
            seed=a.seed,
            doc_ids=[d.doc_id for d in docs],
            mask_count=a.mask_count,
        )

    def _chunks(self, docs: list[Document]) -> list[list[Document]]:
        """Consecutive documents of about ``CHUNK_CHARS`` characters of text each.

        A chunk is what is sorted by length and batched in one piece, so its size sets the
        padding: chunks of 64 documents left 10% of the batches' tokens padding on
        WikiText-2 (a forward pass 9% longer for nothing), a whole default shard 2.7%
        (``benchmarks/efficiency.py``). Bounded by text, not documents, so a shard of long
        documents or a large ``docs_per_shard`` keeps its chunk's results in bounded memory.
        """
        chunks: list[list[Document]] = []
        current: list[Document] = []
        size = 0
        for doc in docs:
            current.append(doc)
            size += sum(map(len, doc.text)) if isinstance(doc.text, tuple) else len(doc.text)
            if size >= self.chunk_chars:
                chunks.append(current)
                current, size = [], 0
        if current:
            chunks.append(current)
        return chunks

    def _read(self, shard: Shard) -> tuple[list[Document], list[EncodedSequence]]:
        """The shard's documents and its first chunk, tokenized."""
        docs = read_shard(shard, self.spec.corpus)
        chunks = self._chunks(docs)
        return docs, self._encode(chunks[0]) if chunks else []

    def _prefetch_first(self, shard: Shard) -> tuple[list[Document], list[EncodedSequence]]:
        self.timeline["first_started"] = time.time()
        out = self._read(shard)
        self.timeline["first_encoded"] = time.time()
        return out

    def _read_first_chunk(self, shard: Shard) -> tuple[list[Document], list[EncodedSequence]]:
        """What ``_read`` gives: prefetched during the load when this is the hinted shard."""
        early, self._early = self._early, None
        if early is not None:
            if early[0] == shard.shard_id:
                return early[1].result()  # its reading error, if any, is this shard's
            early[1].cancel()  # another shard came first: the hint is dropped
        return self._read(shard)

    @contextmanager
    def _device_phase(self, turn: int | None) -> Iterator[None]:
        """Hold the model: alone and, ``turn`` given, once every earlier turn has begun (at
        most ``TURN_WAIT`` seconds for one that has not arrived); None: when it is free."""
        deadline = time.monotonic() + TURN_WAIT
        with self._turns:
            while True:
                late = turn is not None and turn > self._next_turn
                left = deadline - time.monotonic()
                if not self._on_device and (not late or left <= 0):
                    break
                self._turns.wait(timeout=left if late and left > 0 else None)
            self._on_device = True
            if turn is not None:
                self._next_turn = max(self._next_turn, turn + 1)
        try:
            yield
        finally:
            with self._turns:
                self._on_device = False
                self._turns.notify_all()

    def process(self, shard: Shard, turn: int | None = None) -> ShardResult:
        """Analyse ``shard`` and write its files. ``turn``: its place among the shards handed
        to this worker (0, 1, …; the Ray actor's pool numbers them), so device phases run
        in that order when two calls overlap (module docstring); None: as it comes."""
        phases: dict[str, float] = {}
        with self._device_phase(turn):
            # a slot for its accumulator, taken after the turn: a later turn never holds
            # the slot an earlier one waits for
            self._slots.acquire()
            try:
                started = phases["device_start"] = time.time()
                docs, sequences, results = self._device(shard)
                phases["device_end"] = time.time()
            except BaseException:
                self._slots.release()
                raise
        try:  # the model is free: the next shard's device phase runs beside this
            faults.maybe_slow_finish()
            phases["finish_start"] = time.time()
            files = results.finish(docs)
            phases["finish_end"] = time.time()
        finally:
            self._slots.release()
        return ShardResult(
            run_id=self.run_id,
            shard_id=shard.shard_id,
            docs=len(docs),
            sequences=sequences,
            tokens=int(results.tokens),
            rows=int(results.rows),
            detail_rows=int(results.detail_rows),
            files=ShardResult.entries(files),
            seconds=round(time.time() - started, 3),
            host=socket.gethostname(),
            pid=os.getpid(),
            device=self.device,
            result_cpu_seconds=round(results.cpu_seconds, 6),
            phases=phases,
        )

    def _device(self, shard: Shard) -> tuple[list[Document], int, ShardAccumulator]:
        """The device phase: the shard read and tokenized, its chunks through the model and
        queued on the result thread; its documents, sequences and accumulator."""
        faults.maybe_fail(shard.shard_id)
        faults.maybe_slow()
        faults.maybe_hold()
        docs, first_chunk = self._read_first_chunk(shard)  # its sequences, tokenized
        # tokenize the next chunk while the model runs on this one
        chunks = self._chunks(docs)
        results = ShardAccumulator(
            self.layout,
            self.run_id,
            shard.shard_id,
            self.vocab,
            self.spec.output,
            self._host,
            measures=self.engine.measure_set,
        )
        sequences = 0
        pending: Future[list[EncodedSequence]] | None = None
        for k in range(len(chunks)):
            if k == 0:
                encoded = first_chunk
            else:
                assert pending is not None
                encoded = pending.result()
            if k + 1 < len(chunks):
                pending = self._prefetch.submit(self._encode, chunks[k + 1])
            values = run_chunk(  # [tokens, measure, layer], on the model's device
                self.engine,
                encoded,
                self.spec.runtime.batch_size,
                batch_tokens=self.spec.runtime.batch_tokens,
            )
            results.add(encoded, values)
            sequences += len(encoded)
            if k == 0:
                faults.maybe_kill(shard.shard_id)
        return docs, sequences, results
