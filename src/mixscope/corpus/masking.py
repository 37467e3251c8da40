"""The paper's masking protocol: a fixed share of non-special tokens replaced by [MASK].

Positions depend only on (seed, document text, segment), never on batch composition, corpus
order or machine, so a document gets the same masks in every run and every shard.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np


def document_key(text: str | tuple[str, str]) -> int:
    """A stable 64-bit key of a document's content (same on every machine and run)."""
    raw = text if isinstance(text, str) else "\x1f".join(text)
    return int.from_bytes(hashlib.blake2b(raw.encode("utf-8"), digest_size=8).digest(), "little")


def mask_positions(
    special: np.ndarray, rate: float, seed: int, doc_key: int, segment: int
) -> np.ndarray:
    """Positions to mask: ``rate`` of the non-special tokens, rounded, at least one.

    ``special`` is the [seq] boolean special-token mask of one sequence.
    """
    candidates = np.flatnonzero(~special)
    if rate <= 0 or candidates.size == 0:
        return np.empty(0, dtype=np.int64)
    count = max(1, math.floor(rate * candidates.size + 0.5))
    rng = np.random.default_rng([seed, doc_key, segment])
    return np.sort(rng.choice(candidates, size=min(count, candidates.size), replace=False))
