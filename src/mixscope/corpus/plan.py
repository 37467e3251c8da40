"""Deterministic shards, planned before any work starts.

One pass over the corpus classifies every record (the same rules a worker applies when it
re-reads its shard), numbers the good documents (stable ``doc_id``: the same files give the
same ids on every run and machine), counts bad input per reason, and cuts the documents of
each file into shards of ``docs_per_shard`` documents, each addressed by its first record's
offset. A shard never spans files, so a worker reads exactly one byte (or row) range.

Pairs (``corpus.pairs``): consecutive good records become ``(A, B)`` documents. With
``corpus.pair_selection: split`` they are taken two by two, (1, 2), (3, 4), …, and a pair
that does not fit ``max_length`` is later split into single-text segments (``encode``).
With ``fit`` (the paper's protocol: only pairs that fit) the planner scans each file once,
greedily: at record i it tries (i, i+1); if that pair fits it is a document and the scan
goes on at i+2, else record i is skipped and the scan tries (i+1, i+2). The rule depends
only on the records from a document's first record on, so a shard re-read from its start
gives the same documents; each shard stores how many good records were passed over before
each of its documents (``Shard.skips``), so re-reading needs no tokenizer. Counts per run:
``pairs = {kept, split, skipped}`` (pairs analysed whole, pairs split into single
segments, records skipped because the pair they start does not fit).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field

from mixscope.config import CorpusSpec
from mixscope.corpus.hf import hf_sources, hub_digest, is_hub
from mixscope.corpus.readers import iter_records
from mixscope.corpus.records import UNPAIRED, Record
from mixscope.corpus.sources import expand_paths, open_input

MAX_BAD_EXAMPLES = 20

#: does the pair (A, B) fit in one sequence? (``corpus.encode.pair_fit_check``)
PairFits = Callable[[str, str], bool]


@dataclass(frozen=True)
class Shard:
    shard_id: int
    file: str
    start: int  # offset of the shard's first record (byte, or row for Parquet)
    first_doc: int  # doc_id of its first document
    n_docs: int
    # pair_selection "fit": good records skipped before each document (the first: 0);
    # empty otherwise (and a missing entry reads as 0)
    skips: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "skips", tuple(int(k) for k in self.skips))


def _shard_dict(shard: Shard) -> dict:
    d = asdict(shard)
    if not shard.skips:
        del d["skips"]  # plans without pair selection stay as they were
    else:
        d["skips"] = list(shard.skips)
    return d


@dataclass
class CorpusPlan:
    files: list[str]
    shards: list[Shard]
    n_docs: int
    bad: dict[str, int]  # reason → records not analysed
    bad_examples: list[dict] = field(default_factory=list)  # first few: file, offset, reason
    fingerprint: str = ""
    # corpus.pairs: {"kept", "split", "skipped"} (module docstring); None without pairs or
    # when planned without a fit check
    pairs: dict[str, int] | None = None

    def to_dict(self) -> dict:
        return {
            "files": self.files,
            "n_docs": self.n_docs,
            "bad": self.bad,
            "bad_examples": self.bad_examples,
            "fingerprint": self.fingerprint,
            "pairs": self.pairs,
            "shards": [_shard_dict(s) for s in self.shards],
        }

    @classmethod
    def from_dict(cls, d: dict, where: str = "plan.json") -> CorpusPlan:
        """The plan of ``to_dict``; a plan without a key the pipeline needs (e.g. one written
        by hand with ``{start, stop}`` shards) is a ``CorruptRecordError`` naming it."""
        from mixscope.errors import CorruptRecordError

        try:
            return cls(
                files=list(d.get("files") or []),
                shards=[Shard(**s) for s in d["shards"]],
                n_docs=int(d.get("n_docs") or sum(int(s["n_docs"]) for s in d["shards"])),
                bad=dict(d.get("bad") or {}),
                bad_examples=d.get("bad_examples", []),
                fingerprint=d.get("fingerprint", ""),
                pairs=d.get("pairs"),
            )
        except KeyError as e:
            raise CorruptRecordError(f"{where}: no {e.args[0]!r}") from None
        except TypeError as e:  # Shard(**s) with a key missing or unknown
            raise CorruptRecordError(f"{where}: bad shard ({e})") from None


@dataclass
class Document:
    doc_id: int
    text: str | tuple[str, str]
    file: str
    offset: int
    external_id: str | None = None


def file_digest(path: str) -> str:
    """Content hash of a file as stored (compressed bytes for compressed files)."""
    if is_hub(path):  # a hub dataset (corpus/hf.py): name, config, split, resolved commit
        return hub_digest(path)
    h = hashlib.blake2b(digest_size=16)
    with open_input(path) as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def _good_records(
    path: str, spec: CorpusSpec, start: int, bad: Counter | None, examples: list | None
) -> Iterator[Record]:
    """The good records of one file from ``start``; bad ones counted (when ``bad``)."""
    for rec in iter_records(path, spec, start):
        if rec.text is None:
            if bad is not None:
                bad[rec.reason or "unknown"] += 1
                if examples is not None and len(examples) < MAX_BAD_EXAMPLES:
                    examples.append({"file": path, "offset": rec.offset, "reason": rec.reason})
            continue
        yield rec


def _unpaired(path: str, rec: Record, bad: Counter | None, examples: list | None) -> None:
    if bad is not None:
        bad[UNPAIRED] += 1
        if examples is not None and len(examples) < MAX_BAD_EXAMPLES:
            examples.append({"file": path, "offset": rec.offset, "reason": UNPAIRED})


def _documents(
    path: str,
    spec: CorpusSpec,
    start: int,
    bad: Counter | None,
    examples: list | None,
    fits: PairFits | None = None,
    trailing: Counter | None = None,
) -> Iterator[tuple[Record, str | tuple[str, str], int]]:
    """Good documents of one file from ``start``: (first record, text or pair, records
    skipped before it). With pair selection "fit" and ``fits``, the greedy rule of the
    module docstring; records skipped after the file's last pair are added to
    ``trailing["skipped"]`` when the file is read to its end."""
    pending: Record | None = None
    skipped = 0
    greedy = spec.pairs and spec.pair_selection == "fit" and fits is not None
    for rec in _good_records(path, spec, start, bad, examples):
        if not spec.pairs:
            yield rec, rec.text or "", 0
        elif pending is None:
            pending = rec
        elif not greedy or (fits is not None and fits(pending.text or "", rec.text or "")):
            yield pending, (pending.text or "", rec.text or ""), skipped
            pending, skipped = None, 0
        else:  # (pending, rec) does not fit: skip pending, try (rec, next)
            pending, skipped = rec, skipped + 1
    if trailing is not None:
        trailing["skipped"] += skipped
    if pending is not None:
        _unpaired(path, pending, bad, examples)


def _shard_documents(shard: Shard, spec: CorpusSpec) -> Iterator[tuple[Record, object]]:
    """The documents of a shard planned with pair selection "fit": its skips replayed."""
    records = _good_records(shard.file, spec, shard.start, None, None)
    for k in range(shard.n_docs):
        for _ in range(shard.skips[k] if k < len(shard.skips) else 0):
            if next(records, None) is None:
                return
        a, b = next(records, None), next(records, None)
        if a is None or b is None:
            return
        yield a, (a.text or "", b.text or "")


def plan_corpus(spec: CorpusSpec, docs_per_shard: int, fits: PairFits | None = None) -> CorpusPlan:
    """Scan the corpus once and cut it into shards (raises before any work if unreadable).

    ``fits`` (with ``corpus.pairs``) says whether a pair fits the model's sequence length:
    it selects the pairs under ``pair_selection: fit`` and counts kept and split pairs under
    ``split``. Without it the pairs are taken two by two and not counted (what
    ``checkpoints sync`` needs: the fingerprint and an early check of the files).
    """
    files = hf_sources(spec) if spec.format == "hf" else expand_paths(spec.paths)
    bad: Counter = Counter()
    examples: list[dict] = []
    shards: list[Shard] = []
    n_docs = 0
    digest = hashlib.blake2b(digest_size=16)
    counting = spec.pairs and fits is not None
    greedy = counting and spec.pair_selection == "fit"
    pairs: Counter = Counter({"kept": 0, "split": 0, "skipped": 0})
    skips: list[int] = []
    for path in files:
        digest.update(f"{path.rsplit('/', 1)[-1]}\0{file_digest(path)}\0".encode())
        in_shard = 0
        for rec, text, skipped in _documents(path, spec, 0, bad, examples, fits, pairs):
            if spec.limit is not None and n_docs >= spec.limit:
                break
            if in_shard == 0:
                shards.append(Shard(len(shards), path, rec.offset, n_docs, 0))
                skips = []
            if counting and isinstance(text, tuple):
                assert fits is not None
                pairs["skipped"] += skipped
                pairs["kept" if greedy or fits(*text) else "split"] += 1
            skips.append(skipped if in_shard else 0)
            in_shard += 1
            n_docs += 1
            if in_shard == docs_per_shard:
                shards[-1] = _with_count(shards[-1], in_shard, skips if greedy else [])
                in_shard = 0
        if in_shard:
            shards[-1] = _with_count(shards[-1], in_shard, skips if greedy else [])
        if spec.limit is not None and n_docs >= spec.limit:
            break
    return CorpusPlan(
        files,
        shards,
        n_docs,
        dict(sorted(bad.items())),
        examples,
        digest.hexdigest(),
        dict(pairs) if counting else None,
    )


def _with_count(shard: Shard, n: int, skips: list[int]) -> Shard:
    return Shard(shard.shard_id, shard.file, shard.start, shard.first_doc, n, tuple(skips))


def read_shard(shard: Shard, spec: CorpusSpec) -> list[Document]:
    """The documents of one shard, re-read with the planner's rules (same ids, same texts)."""
    docs: list[Document] = []
    if spec.pairs and spec.pair_selection == "fit":
        found: Iterator = _shard_documents(shard, spec)
    else:
        found = (
            (rec, text) for rec, text, _ in _documents(shard.file, spec, shard.start, None, None)
        )
    for rec, text in found:
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
