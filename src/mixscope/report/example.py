"""The example sequence of a run and its per-pair contribution maps (the paper's Figure 1).

The chosen document (``report --example N``; by default the first with at least
:data:`MIN_TOKENS` tokens, so not a short heading) is re-read from its corpus file (the
``documents`` table gives its file, offset and token count; the run's spec gives the
reading rules), cut to a short first segment for legibility, and given to
:func:`mixscope.contribution_maps` with the run's model, revision and masking. Whatever
fails on the way (a moved corpus, a hub model that cannot be loaded offline) becomes a
one-line reason, not a failed report; a document id that the run does not have is the
user's error and fails the report (:func:`check_example`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mixscope.errors import MixscopeError, first_line
from mixscope.store.unreadable import UnreadableFileError

if TYPE_CHECKING:
    from mixscope.store.run_record import RunRecord

#: the example sequence is at most this many tokens, special tokens included
MAX_TOKENS = 40
#: the default example: the first document with at least this many tokens
MIN_TOKENS = 20


@dataclass
class Example:
    run_id: str
    doc_id: int | None = None
    doc_tokens: int = 0  # the whole document's tokens in the run (all its segments)
    tokens: list[str] = field(default_factory=list)
    maps: dict[str, Any] = field(default_factory=dict)  # measure → [layer, n, n]
    truncated: bool = False  # the document is longer than the example segment
    error: str | None = None  # why there are no maps

    @property
    def n_layers(self) -> int:
        return next(iter(self.maps.values())).shape[0] if self.maps else 0


def _corpus_spec(spec: dict[str, Any]) -> Any:
    from mixscope.config import CorpusSpec

    corpus = dict(spec.get("corpus") or {})
    corpus["paths"] = tuple(corpus.get("paths") or ())
    known = set(CorpusSpec.__dataclass_fields__)
    return CorpusSpec(**{k: v for k, v in corpus.items() if k in known})


def documents(root: str, record: RunRecord) -> list[dict[str, Any]]:
    """The run's committed documents (``doc_id``, ``file``, ``offset``, ``tokens``), by id."""
    from mixscope.store import manifest
    from mixscope.store.layout import Layout
    from mixscope.store.unreadable import naming_unreadable

    layout = Layout.open(root)
    out: list[dict[str, Any]] = []
    for path in manifest.committed_files(layout, "documents", [record.run_id]):
        with naming_unreadable(root, [record.run_id]):  # damaged: named, not swallowed
            table = layout.read_table(path).select(["doc_id", "file", "offset", "tokens"])
        out += table.to_pylist()
    return sorted(out, key=lambda r: r["doc_id"])


def _ids_in_words(docs: list[dict[str, Any]]) -> str:
    ids = [d["doc_id"] for d in docs]
    if ids[-1] - ids[0] + 1 == len(ids):
        return f"its documents are {ids[0]}–{ids[-1]}"
    return f"its {len(ids)} documents have ids between {ids[0]} and {ids[-1]}"


def choose_document(
    docs: list[dict[str, Any]], run_id: str, doc_id: int | None = None
) -> dict[str, Any]:
    """Document ``doc_id`` (an error naming the valid ids where the run has none such), or
    by default the first with at least :data:`MIN_TOKENS` tokens (the first document is
    often a heading: a few tokens show no mixing), else the longest."""
    if not docs:
        raise MixscopeError(f"run {run_id} has no committed documents")
    if doc_id is not None:
        for d in docs:
            if d["doc_id"] == doc_id:
                return d
        raise MixscopeError(
            f"--example {doc_id}: run {run_id} has no document {doc_id}; {_ids_in_words(docs)}"
        )
    long = [d for d in docs if (d["tokens"] or 0) >= MIN_TOKENS]
    return long[0] if long else max(docs, key=lambda d: (d["tokens"] or 0, -d["doc_id"]))


def read_document(record: RunRecord, doc: dict[str, Any]) -> Any:
    """The text (or ``(text, text_pair)``) of ``doc``, re-read from the run's corpus."""
    from mixscope.corpus.plan import Shard, read_shard

    shard = Shard(0, doc["file"], int(doc["offset"]), int(doc["doc_id"]), 1)
    try:
        (read,) = read_shard(shard, _corpus_spec(dict(record.spec)))
    except (OSError, RuntimeError) as exc:
        raise MixscopeError(f"cannot re-read document {doc['doc_id']}: {exc}") from None
    return read.text


def example_for(
    root: str, record: RunRecord, max_tokens: int = MAX_TOKENS, doc_id: int | None = None
) -> Example:
    """The example of one run (document ``doc_id``, default :func:`choose_document`'s);
    ``error`` says why when there are no maps."""
    import mixscope

    ex = Example(record.run_id)
    spec = record.spec
    analysis = spec.get("analysis") or {}
    model = spec.get("model") or record.model.get("source")
    try:
        if not model:
            raise MixscopeError("the run record names no model")
        doc = choose_document(documents(root, record), record.run_id, doc_id)
        ex.doc_id, ex.doc_tokens = int(doc["doc_id"]), int(doc["tokens"] or 0)
        text = read_document(record, doc)
        run_max = analysis.get("max_length")
        length = min(max_tokens, int(run_max)) if run_max else max_tokens
        maps = mixscope.contribution_maps(
            model,
            [text],
            max_length=length,
            revision=analysis.get("revision"),
            dtype=analysis.get("dtype"),  # the run's precision, not the default float32
            mask_rate=float(analysis.get("mask_rate") or 0.0),
            seed=int(analysis.get("seed") or 0),
        )
    except UnreadableFileError:
        raise  # damaged results fail the report (one line naming the file), as every query
    except Exception as exc:  # a report section, not a crash: say why
        first = first_line(exc) or type(exc).__name__
        ex.error = f"{type(exc).__name__}: {first}" if not isinstance(exc, MixscopeError) else first
        return ex
    ex.tokens = list(maps[0].tokens)
    ex.maps = dict(maps[0].maps)  # every measure with per-pair maps (the paper's norms)
    ex.truncated = len(maps) > 1
    return ex
