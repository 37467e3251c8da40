"""Documents (strings or (text, text_pair)) → fixed-size model sequences, never truncated.

A document longer than ``max_length`` is split into consecutive segments, each wrapped in
the tokenizer's own special tokens. A pair that does not fit as one sequence is split the
same way, first text then second, each as single-text segments (token type 0);
``corpus.pair_selection: fit`` keeps such pairs out of the documents instead
(``corpus/plan.py``), with :func:`pair_fit_check` as the one test of "fits".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixscope.corpus.masking import document_key, mask_positions
from mixscope.errors import MixscopeError

Document = str | tuple[str, str]


@dataclass
class EncodedSequence:
    """One model input: a whole document or one segment of it."""

    doc_id: int
    segment: int
    input_ids: np.ndarray  # [seq] int64, after masking
    token_type_ids: np.ndarray  # [seq] int64
    special: np.ndarray  # [seq] bool
    masked: np.ndarray  # [seq] bool
    original_ids: np.ndarray  # [seq] int64, before masking (for corpus token frequencies)

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])


def validate_documents(texts: Any) -> list[Document]:
    """A clear error for anything that is not a non-empty list of non-empty documents."""
    if isinstance(texts, str) or (
        isinstance(texts, tuple) and len(texts) == 2 and all(isinstance(t, str) for t in texts)
    ):
        texts = [texts]
    try:
        docs = list(texts)
    except TypeError:
        raise MixscopeError("texts must be a list of strings or (text, text_pair) tuples") from None
    if not docs:
        raise MixscopeError("no texts given: pass at least one non-empty string")
    out: list[Document] = []
    for i, doc in enumerate(docs):
        if isinstance(doc, list | tuple) and len(doc) == 2 and all(isinstance(t, str) for t in doc):
            if not doc[0].strip() or not doc[1].strip():
                raise MixscopeError(f"text {i} is a pair with an empty side")
            out.append((doc[0], doc[1]))
        elif isinstance(doc, str):
            if not doc.strip():
                raise MixscopeError(f"text {i} is empty")
            out.append(doc)
        else:
            raise MixscopeError(
                f"text {i} is a {type(doc).__name__}; "
                "expected a string or a (text, text_pair) tuple"
            )
    return out


def _single_segments(tokenizer: Any, text: str, max_length: int) -> list[dict]:
    enc = tokenizer(
        text,
        truncation=True,
        max_length=max_length,
        return_overflowing_tokens=True,
        return_special_tokens_mask=True,
        return_token_type_ids=True,
    )
    ids = enc["input_ids"]
    if ids and not isinstance(ids[0], list):  # slow tokenizers return one sequence
        return [dict(enc)]
    return [
        {k: enc[k][i] for k in enc if k != "overflow_to_sample_mapping"} for i in range(len(ids))
    ]


def pair_fit_check(tokenizer: Any, max_length: int) -> Callable[[str, str], bool]:
    """``fits(a, b)``: whether ``(a, b)`` encodes as one sequence of at most ``max_length``
    tokens, special tokens included (the test :func:`encode_documents` applies)."""

    def fits(a: str, b: str) -> bool:
        return len(tokenizer(a, b, verbose=False)["input_ids"]) <= max_length

    return fits


def _pair_segments(tokenizer: Any, pair: tuple[str, str], max_length: int) -> list[dict]:
    whole = tokenizer(pair[0], pair[1], return_special_tokens_mask=True, return_token_type_ids=True)
    if len(whole["input_ids"]) <= max_length:  # the test of pair_fit_check
        return [dict(whole)]
    return _single_segments(tokenizer, pair[0], max_length) + _single_segments(
        tokenizer, pair[1], max_length
    )


def encode_documents(
    tokenizer: Any,
    docs: Sequence[Document],
    *,
    max_length: int,
    mask_rate: float = 0.0,
    seed: int = 0,
    doc_ids: Sequence[int] | None = None,
    mask_count: str = "round",
) -> list[EncodedSequence]:
    """Tokenize, segment and mask every document; sequences in document then segment order."""
    if mask_rate and tokenizer.mask_token_id is None:
        raise MixscopeError("mask_rate > 0 but this tokenizer has no mask token")
    if not 0 <= mask_rate < 1:
        raise MixscopeError(f"mask_rate must be in [0, 1), got {mask_rate}")
    ids = list(doc_ids) if doc_ids is not None else list(range(len(docs)))
    out: list[EncodedSequence] = []
    for doc_id, doc in zip(ids, docs, strict=True):
        if isinstance(doc, str):
            parts = _single_segments(tokenizer, doc, max_length)
        else:
            parts = _pair_segments(tokenizer, doc, max_length)
        key = document_key(doc) if mask_rate else 0
        for segment, enc in enumerate(parts):
            input_ids = np.asarray(enc["input_ids"], dtype=np.int64)
            if input_ids.size == 0:
                raise MixscopeError(f"text {doc_id} gives no tokens with this tokenizer")
            special = np.asarray(enc["special_tokens_mask"], dtype=bool)
            types = enc.get("token_type_ids") or [0] * len(input_ids)
            masked = np.zeros(len(input_ids), dtype=bool)
            original = input_ids.copy() if mask_rate else input_ids
            if mask_rate:
                pos = mask_positions(special, mask_rate, seed, key, segment, mask_count)
                masked[pos] = True
                input_ids[pos] = tokenizer.mask_token_id
            out.append(
                EncodedSequence(
                    doc_id=int(doc_id),
                    segment=segment,
                    input_ids=input_ids,
                    token_type_ids=np.asarray(types, dtype=np.int64),
                    special=special,
                    masked=masked,
                    original_ids=original,
                )
            )
    return out


def pad_offsets(lengths: Sequence[int], padding_side: str = "right") -> list[int]:
    """Where each sequence starts in its padded row (0 for right padding)."""
    if padding_side not in ("left", "right"):
        raise MixscopeError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
    width = max(lengths)
    return [width - n if padding_side == "left" else 0 for n in lengths]


def pad_batch(
    seqs: Sequence[EncodedSequence], pad_id: int, *, padding_side: str = "right"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Padded input_ids, attention_mask, token_type_ids: each [batch, seq].

    ``padding_side="left"`` puts the padding before the tokens (sequence ``b`` then starts
    at ``pad_offsets(...)[b]``), as decoders are often run.
    """
    lengths = [len(s) for s in seqs]
    offsets = pad_offsets(lengths, padding_side)
    width = max(lengths)
    ids = np.full((len(seqs), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(seqs), width), dtype=np.int64)
    types = np.zeros((len(seqs), width), dtype=np.int64)
    for b, (s, start) in enumerate(zip(seqs, offsets, strict=True)):
        span = slice(start, start + len(s))
        ids[b, span] = s.input_ids
        mask[b, span] = 1
        types[b, span] = s.token_type_ids
    return ids, mask, types
