"""Deterministic shards, planned before any work starts.

One pass over the corpus classifies every record (the same rules a worker applies when it
re-reads its shard), numbers the good documents (stable ``doc_id``: the same files give the
same ids on every run and machine), counts bad input per reason, and cuts the documents of
each file into shards of ``docs_per_shard`` documents, each addressed by its first record's
offset. A shard never spans files, so a worker reads exactly one byte (or row) range.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

from mixscope.config import CorpusSpec
from mixscope.corpus.readers import UNPAIRED, Record, iter_records
from mixscope.corpus.sources import expand_paths

MAX_BAD_EXAMPLES = 20


@dataclass(frozen=True)
class Shard:
    shard_id: int
    file: str
    start: int  # offset of the shard's first record (byte, or row for Parquet)
    first_doc: int  # doc_id of its first document
    n_docs: int


@dataclass
class CorpusPlan:
    files: list[str]
    shards: list[Shard]
    n_docs: int
    bad: dict[str, int]  # reason → records not analysed
    bad_examples: list[dict] = field(default_factory=list)  # first few: file, offset, reason
    fingerprint: str = ""

    def to_dict(self) -> dict:
        return {
            "files": self.files,
            "n_docs": self.n_docs,
            "bad": self.bad,
            "bad_examples": self.bad_examples,
            "fingerprint": self.fingerprint,
            "shards": [asdict(s) for s in self.shards],
        }

    @classmethod
    def from_dict(cls, d: dict) -> CorpusPlan:
        return cls(
            files=d["files"],
            shards=[Shard(**s) for s in d["shards"]],
            n_docs=d["n_docs"],
            bad=d["bad"],
            bad_examples=d.get("bad_examples", []),
            fingerprint=d.get("fingerprint", ""),
        )


@dataclass
class Document:
    doc_id: int
    text: str | tuple[str, str]
    file: str
    offset: int
    external_id: str | None = None


def file_digest(path: str) -> str:
    """Content hash of a file as stored (compressed bytes for compressed files)."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def _documents(
    path: str, spec: CorpusSpec, start: int, bad: Counter | None, examples: list | None
) -> Iterator[tuple[Record, str | tuple[str, str]]]:
    """Good documents of one file from ``start``: (first record, text or pair)."""
    pending: Record | None = None
    for rec in iter_records(path, spec, start):
        if rec.text is None:
            if bad is not None:
                bad[rec.reason or "unknown"] += 1
                if examples is not None and len(examples) < MAX_BAD_EXAMPLES:
                    examples.append({"file": path, "offset": rec.offset, "reason": rec.reason})
            continue
        if not spec.pairs:
            yield rec, rec.text
        elif pending is None:
            pending = rec
        else:
            yield pending, (pending.text or "", rec.text)
            pending = None
    if pending is not None and bad is not None:
        bad[UNPAIRED] += 1
        if examples is not None and len(examples) < MAX_BAD_EXAMPLES:
            examples.append({"file": path, "offset": pending.offset, "reason": UNPAIRED})


def plan_corpus(spec: CorpusSpec, docs_per_shard: int) -> CorpusPlan:
    """Scan the corpus once and cut it into shards (raises before any work if unreadable)."""
    files = expand_paths(spec.paths)
    bad: Counter = Counter()
    examples: list[dict] = []
    shards: list[Shard] = []
    n_docs = 0
    digest = hashlib.blake2b(digest_size=16)
    for path in files:
        digest.update(f"{path.rsplit('/', 1)[-1]}\0{file_digest(path)}\0".encode())
        in_shard = 0
        for rec, _text in _documents(path, spec, 0, bad, examples):
            if spec.limit is not None and n_docs >= spec.limit:
                break
            if in_shard == 0:
                shards.append(Shard(len(shards), path, rec.offset, n_docs, 0))
            in_shard += 1
            n_docs += 1
            if in_shard == docs_per_shard:
                shards[-1] = _with_count(shards[-1], in_shard)
                in_shard = 0
        if in_shard:
            shards[-1] = _with_count(shards[-1], in_shard)
        if spec.limit is not None and n_docs >= spec.limit:
            break
    return CorpusPlan(
        files, shards, n_docs, dict(sorted(bad.items())), examples, digest.hexdigest()
    )


def _with_count(shard: Shard, n: int) -> Shard:
    return Shard(shard.shard_id, shard.file, shard.start, shard.first_doc, n)


def read_shard(shard: Shard, spec: CorpusSpec) -> list[Document]:
    """The documents of one shard, re-read with the planner's rules (same ids, same texts)."""
    docs: list[Document] = []
    for rec, text in _documents(shard.file, spec, shard.start, None, None):
        docs.append(
            Document(shard.first_doc + len(docs), text, shard.file, rec.offset, rec.external_id)
        )
        if len(docs) == shard.n_docs:
            break
    if len(docs) != shard.n_docs:
        raise RuntimeError(
            f"shard {shard.shard_id}: expected {shard.n_docs} documents in {shard.file} from "
            f"offset {shard.start}, found {len(docs)}; the file changed since planning"
        )
    return docs
