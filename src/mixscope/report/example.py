"""The example sequence of a run and its per-pair contribution maps (the paper's Figure 1).

The run's first committed document is re-read from its corpus file (the ``documents``
table gives its file and offset; the run's spec gives the reading rules), cut to a short
first segment for legibility, and given to :func:`mixscope.contribution_maps` with the
run's model, revision and masking. Whatever fails on the way (a moved corpus, a hub
model that cannot be loaded offline) becomes a one-line reason, not a failed report.
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


@dataclass
class Example:
    run_id: str
    doc_id: int | None = None
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


def first_document(root: str, record: RunRecord) -> tuple[int, Any]:
    """(doc_id, text or (text, text_pair)) of the run's first committed document."""
    import pyarrow.compute as pc

    from mixscope.corpus.plan import Shard, read_shard
    from mixscope.store import manifest
    from mixscope.store.layout import Layout
    from mixscope.store.unreadable import naming_unreadable

    layout = Layout.open(root)
    files = manifest.committed_files(layout, "documents", [record.run_id])
    best: dict[str, Any] | None = None
    for path in files:
        with naming_unreadable(root, [record.run_id]):  # damaged: named, not swallowed
            table = layout.read_table(path).select(["doc_id", "file", "offset"])
        if table.num_rows == 0:
            continue
        k = int(pc.index(table["doc_id"], pc.min(table["doc_id"])).as_py())
        row = {c: table[c][k].as_py() for c in table.column_names}
        if best is None or row["doc_id"] < best["doc_id"]:
            best = row
    if best is None:
        raise MixscopeError("the run has no committed documents")
    shard = Shard(0, best["file"], int(best["offset"]), int(best["doc_id"]), 1)
    try:
        (doc,) = read_shard(shard, _corpus_spec(dict(record.spec)))
    except (OSError, RuntimeError) as exc:
        raise MixscopeError(f"cannot re-read document {best['doc_id']}: {exc}") from None
    return doc.doc_id, doc.text


def example_for(root: str, record: RunRecord, max_tokens: int = MAX_TOKENS) -> Example:
    """The example of one run; ``error`` says why when there are no maps."""
    import mixscope

    ex = Example(record.run_id)
    spec = record.spec
    analysis = spec.get("analysis") or {}
    model = spec.get("model") or record.model.get("source")
    try:
        if not model:
            raise MixscopeError("the run record names no model")
        ex.doc_id, text = first_document(root, record)
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
