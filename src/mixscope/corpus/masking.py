"""The paper's masking protocol: a fixed share of non-special tokens replaced by [MASK].

Positions depend only on (seed, document text, segment), never on batch composition, corpus
order or machine, so a document gets the same masks in every run and every shard.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

#: how the number of masked tokens is counted from ``rate · m`` (``analysis.mask_count``)
from mixscope.choices import MASK_COUNTS


def mask_count(rate: float, m: int, rule: str = "round") -> int:
    """How many of ``m`` maskable tokens to mask: at least one (when ``m > 0``), at most ``m``.

    ``round``: ``⌊rate · m + ½⌋`` (half up); ``floor``: ``int(rate · m)``, the authors' code
    (Kobayashi et al. 2021: ``int(len(tokens) * rate)``), then at least one.
    """
    if rate <= 0 or m <= 0:
        return 0
    if rule == "round":
        count = math.floor(rate * m + 0.5)
    elif rule == "floor":
        count = math.floor(rate * m)
    else:
        raise ValueError(f"mask count rule must be one of {MASK_COUNTS}, got {rule!r}")
    return min(m, max(1, count))


def document_key(text: str | tuple[str, str]) -> int:
    """A stable 64-bit key of a document's content (same on every machine and run)."""
    raw = text if isinstance(text, str) else "\x1f".join(text)
    return int.from_bytes(hashlib.blake2b(raw.encode("utf-8"), digest_size=8).digest(), "little")


def mask_positions(
    special: np.ndarray,
    rate: float,
    seed: int,
    doc_key: int,
    segment: int,
    count_rule: str = "round",
) -> np.ndarray:
    """Positions to mask: ``mask_count(rate, m, count_rule)`` of the ``m`` non-special tokens.

    ``special`` is the [seq] boolean special-token mask of one sequence.
    """
    candidates = np.flatnonzero(~special)
    count = mask_count(rate, int(candidates.size), count_rule)
    if count == 0:
        return np.empty(0, dtype=np.int64)
    rng = np.random.default_rng([seed, doc_key, segment])
    return np.sort(rng.choice(candidates, size=count, replace=False))
