"""The in-process entry points: ``analyze`` (per-token measures) and ``contribution_maps``.

Used by notebooks, tests, the CLI and (later) the shard worker; everything else builds on it.
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from mixscope.choices import DISTANCE_BUCKETS
from mixscope.corpus.encode import EncodedSequence, encode_documents, validate_documents
from mixscope.corpus.masking import MASK_COUNTS
from mixscope.errors import MixscopeError
from mixscope.mixing.batches import BATCH_TOKENS, run_batches
from mixscope.mixing.engine import MixingEngine
from mixscope.models.loading import LoadedModel, load
from mixscope.models.packaged import DEFAULT_MODEL
from mixscope.registry import parse_names
from mixscope.store.schema import MEASURE_COLUMNS, PAIR_MEASURES, tokens_schema

log = logging.getLogger("mixscope")


@dataclass
class ContributionMap:
    """Per-pair contribution norms ‖P_ij‖ of one sequence; row i receives, column j gives."""

    doc_id: int
    segment: int
    token_ids: list[int]
    tokens: list[str]
    maps: dict[str, np.ndarray] = field(default_factory=dict)  # measure → [layer, seq, seq]

    def __getattr__(self, name: str) -> np.ndarray:
        """A map by its measure's name (``m.<measure>``), as ``m.maps[name]``."""
        maps = self.__dict__.get("maps") or {}
        if name in maps:
            return maps[name]
        raise AttributeError(name)


def model_and_texts(model: Any, texts: Any) -> tuple[Any, Any]:
    """The model and the texts of a call: ``analyze(texts=[...])`` and ``analyze([...])``
    (a list of texts where the model goes: no model is a list) take the CLI's default
    model, the packaged MiniLM."""
    if texts is None and isinstance(model, list):
        return DEFAULT_MODEL, model
    if texts is None:
        raise MixscopeError(
            "no texts: call analyze(texts=[...]) (the default model) or analyze(model, texts)"
        )
    return (DEFAULT_MODEL if model is None else model), texts


def _prepare(
    model: Any,
    texts: Any,
    *,
    max_length: int | None,
    batch_size: int,
    device: Any,
    dtype: Any,
    revision: str | None,
    mask_rate: float,
    seed: int,
    mask_count: str = "round",
    measures: Any = None,
    progress: bool = False,
) -> tuple[LoadedModel, list[EncodedSequence]]:
    model, texts = model_and_texts(model, texts)
    docs = validate_documents(texts)
    if batch_size < 1:
        raise MixscopeError(f"batch_size must be at least 1, got {batch_size}")
    if mask_count not in MASK_COUNTS:
        rules = "|".join(MASK_COUNTS)
        raise MixscopeError(f"mask_count must be one of {rules}, got {mask_count!r}")
    if measures is not None and isinstance(model, str):  # a group that does not apply:
        from mixscope.mixing.measures import resolved_measures  # before the weights load

        resolved_measures(model, measures, revision=revision)
    loaded = load(model, revision=revision, dtype=dtype, device=device, progress=progress)
    max_length = loaded.resolve_max_length(max_length)
    seqs = encode_documents(
        loaded.tokenizer,
        docs,
        max_length=max_length,
        mask_rate=mask_rate,
        seed=seed,
        mask_count=mask_count,
    )
    return loaded, seqs


def to_table(
    seqs: Sequence[EncodedSequence],
    measures: Sequence[np.ndarray],
    tokenizer: Any,
    columns: tuple[str, ...] = MEASURE_COLUMNS,
) -> pa.Table:
    """Long-format rows (document, segment, position, layer) in ``tokens_schema(columns)``.

    ``measures[k]`` is the [layer, measure, seq] array of ``seqs[k]``, measures in
    ``columns`` order.
    """
    layers = measures[0].shape[0]
    lengths = np.array([len(s) for s in seqs])
    rep = lambda a: np.repeat(a, layers)  # noqa: E731  per token → per token-layer row
    token_ids = np.concatenate([s.input_ids for s in seqs])
    uniq, inverse = np.unique(token_ids, return_inverse=True)
    vocab = pa.array(tokenizer.convert_ids_to_tokens(uniq.tolist()), pa.string())
    cols: dict[str, Any] = {
        "doc_id": rep(np.repeat([s.doc_id for s in seqs], lengths)),
        "segment": rep(np.repeat([s.segment for s in seqs], lengths)).astype(np.int32),
        "position": rep(np.concatenate([np.arange(n) for n in lengths])).astype(np.int32),
        "token_id": rep(token_ids).astype(np.int32),
        "token": pa.DictionaryArray.from_arrays(pa.array(rep(inverse).astype(np.int32)), vocab),
        "token_type": rep(np.concatenate([s.token_type_ids for s in seqs])).astype(np.int8),
        "is_special": rep(np.concatenate([s.special for s in seqs])),
        "is_masked": rep(np.concatenate([s.masked for s in seqs])),
        "layer": np.tile(np.arange(1, layers + 1, dtype=np.int16), int(lengths.sum())),
    }
    # [layer, measure, seq] → [seq, layer, measure] so rows run position-major, layer-minor
    stacked = np.concatenate([m.transpose(2, 0, 1) for m in measures]).reshape(-1, len(columns))
    for k, name in enumerate(columns):
        cols[name] = np.ascontiguousarray(stacked[:, k], dtype=np.float32)
    return pa.Table.from_pydict(cols, schema=tokens_schema(columns))


def analyze(
    model: Any = None,
    texts: Any = None,
    *,
    max_length: int | None = None,
    batch_size: int = 8,
    device: Any = None,
    dtype: Any = None,
    revision: str | None = None,
    mask_rate: float = 0.0,
    seed: int = 0,
    mask_count: str = "round",
    verify: bool = False,
    padding_side: str | None = None,
    attention: str = "auto",
    batch_tokens: int | None = BATCH_TOKENS,
    measures: Any = None,
    progress: bool = False,
    distance_buckets: int = DISTANCE_BUCKETS,
) -> pa.Table:
    """Context-mixing measures of every token and layer of ``texts``.

    ``model``: a local directory, a hub id, or a ``(model, tokenizer)`` pair of loaded
    transformers objects (any attention implementation; the run chooses its own); default
    the CLI's, the packaged MiniLM (``analyze(texts=[...])``, or a list of texts alone).
    ``texts``: strings or ``(text, text_pair)`` tuples. Returns one row per
    (doc_id, segment, position, layer) in :data:`mixscope.store.schema.TOKENS_SCHEMA`;
    padding never appears. ``mask_rate`` of each sequence's ``m`` non-special tokens are
    replaced by the mask token (positions from ``seed``); ``mask_count`` is how many:
    ``"round"`` (``rate · m`` rounded half up, the default, as ``analysis.mask_count``) or
    ``"floor"`` (``int(rate · m)``, the authors' code, which the paper jobs use).
    ``verify`` checks the exactness identity on every block of every batch and raises
    :class:`~mixscope.errors.ExactnessError` if it fails.
    ``padding_side`` ("left" or "right"; default: the tokenizer's) changes nothing in the
    numbers, only how batches are laid out. ``attention`` ("auto", "fast", "eager"): "fast"
    reads each token's own weight from a fused kernel's log-sum-exp (O(seq) memory per head);
    "eager" materialises the [seq, seq] weights; "auto" is fast except where the full
    weights are read (``verify``). Batches hold at most ``batch_size`` sequences and
    ``batch_tokens`` tokens; on CUDA out-of-memory a batch is halved and retried (see
    :func:`mixscope.mixing.batches.run_batches`).
    ``measures``: the measure groups to compute (``["paper", "globenc", "sink"]``, a
    comma-separated string, or ``"all"``: every group that applies to the model; default
    the paper's); a group named explicitly that does not apply to the model raises a
    :class:`~mixscope.errors.MixscopeError` before any work; ``"all"`` skips the groups
    that do not apply, says which in one warning, and lists them (with why) in the table's
    schema metadata ``mixscope.skipped`` (JSON). One float32 column per measure of the
    selected groups (``mixscope.measure_groups()`` lists them). ``progress``: transformers'
    weight-loading bars (off: they would print into a notebook's output).
    ``distance_buckets``: the ``distance`` group's bucket count (2–12, docs/method.md §5e).
    """
    names = parse_names(measures)  # an unknown group: before anything
    loaded, seqs = _prepare(
        model,
        texts,
        max_length=max_length,
        batch_size=batch_size,
        device=device,
        dtype=dtype,
        revision=revision,
        mask_rate=mask_rate,
        seed=seed,
        mask_count=mask_count,
        measures=names,
        progress=progress,
    )
    engine = MixingEngine(
        loaded,
        verify=verify,
        attention=attention,
        measures=names,
        distance_buckets=distance_buckets,
    )
    skipped = dict(engine.selection.skipped)
    noteworthy = engine.selection.noteworthy_skips
    if noteworthy:
        why = "; ".join(f"{name} ({reason})" for name, reason in noteworthy.items())
        warnings.warn(f"measures='all' skipped groups that do not apply: {why}", stacklevel=2)
    results = run_batches(
        engine, seqs, batch_size, batch_tokens=batch_tokens, padding_side=padding_side
    )
    columns = engine.measure_set.columns
    table = to_table(seqs, [m for m, _ in results], loaded.tokenizer, columns)
    if not skipped:  # the schema exactly as tokens_schema gives it
        return table
    meta = {**(table.schema.metadata or {}), b"mixscope.skipped": json.dumps(skipped).encode()}
    return table.replace_schema_metadata(meta)


def contribution_maps(
    model: Any = None,
    texts: Any = None,
    *,
    max_length: int | None = None,
    batch_size: int = 1,
    device: Any = None,
    dtype: Any = None,
    revision: str | None = None,
    mask_rate: float = 0.0,
    seed: int = 0,
    mask_count: str = "round",
    padding_side: str | None = None,
    progress: bool = False,
) -> list[ContributionMap]:
    """Per-pair norms ‖P_ij‖ of ATTN-N, ATTNRES-N and ATTNRESLN-N for a handful of texts.

    Memory is O(layers · seq²) per sequence for the maps themselves, computed in Gram form
    (no [batch, heads, seq, seq, hidden] tensor). One map per sequence (segment). In a
    causal model the entries above the diagonal (j > i) are exactly 0. ``model`` and
    ``progress`` as :func:`analyze`'s.
    """
    loaded, seqs = _prepare(
        model,
        texts,
        max_length=max_length,
        batch_size=batch_size,
        device=device,
        dtype=dtype,
        revision=revision,
        mask_rate=mask_rate,
        seed=seed,
        mask_count=mask_count,
        progress=progress,
    )
    engine = MixingEngine(loaded, attention="eager")  # the maps read the full weights
    results = run_batches(engine, seqs, batch_size, pairs=True, padding_side=padding_side)
    maps = []
    for s, (_, pair) in zip(seqs, results, strict=True):
        assert pair is not None
        ids = s.input_ids.tolist()
        maps.append(
            ContributionMap(
                doc_id=s.doc_id,
                segment=s.segment,
                token_ids=ids,
                tokens=loaded.tokenizer.convert_ids_to_tokens(ids),
                maps={name: pair[:, k] for k, name in enumerate(PAIR_MEASURES)},
            )
        )
    return maps
