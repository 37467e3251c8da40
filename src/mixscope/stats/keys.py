"""Integer keys of token groups: packing, grouping, compact ids and stable orders.

The compact ids (``KeyIndex``) live on the accumulators' device (torch); the orders and
groupings are the tables' (numpy, on the host, O(keys) once per shard).

Everything the statistics group by is packed into one non-negative int64 per row, so a
group-by is a sort (or a lookup in a sorted array) of plain integers, never a hash of
several columns.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch

from mixscope.stats.token_block import TokenBlock

#: bit layout of ``token_keys``: token id << 35 | original id << 7 | token type << 3 | category
ID_BITS = 28


def token_keys(block: TokenBlock) -> np.ndarray:
    """One int64 per (token_id, original_id, token_type, category); ids are < 2^28."""
    return (
        (block.token_id.astype(np.int64) << 35)
        | (block.original_id.astype(np.int64) << 7)
        | (block.token_type.astype(np.int64) << 3)
        | block.category.astype(np.int64)
    )


def grouped(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(order, starts, unique keys): ``keys[order]`` sorted (stably), groups starting at
    ``starts``."""
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    return order, starts, sorted_keys[starts]


def counted(
    keys: np.ndarray,
    weights: np.ndarray | None = None,
    kind: Literal["quicksort", "stable"] = "quicksort",
) -> tuple[np.ndarray, np.ndarray]:
    """(unique sorted keys, the sum of the weights of each) of int64 ``keys``. numpy's
    sort of int64 is vectorized (several times a radix pass's or torch's CPU sort's
    speed); where every weight is one (``None``, or events not counted before), the keys
    alone are sorted and the counts are the runs' lengths. ``kind``: the weighted sort's
    (``"stable"`` for keys that are sorted runs already: a linear merge)."""
    if len(keys) == 0:
        return keys, np.zeros(0, np.int64)
    if weights is None or bool((weights == 1).all()):
        ordered, w = np.sort(keys), None
    else:
        order = np.argsort(keys, kind=kind)
        ordered, w = keys[order], weights[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    sums = np.diff(np.r_[starts, len(ordered)]) if w is None else np.add.reduceat(w, starts)
    return ordered[starts], sums.astype(np.int64)


class KeyIndex:
    """Compact ids of int64 keys, numbered in the order first seen, on the accumulators'
    device: what lets dense accumulators be indexed by key and grow only at the end."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self._sorted = torch.empty(0, dtype=torch.int64, device=device)  # known keys, sorted
        self._ids = torch.empty(0, dtype=torch.int64, device=device)  # the id of each of _sorted
        self.keys = torch.empty(0, dtype=torch.int64, device=device)  # [ids] the key of each id

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def nbytes(self) -> int:
        return 3 * 8 * len(self.keys)

    def find(self, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(the id of each of ``keys``, -1 where unknown; which are known): what ``ids``
        takes back (``found``), so a block's keys are looked up once."""
        n = len(self._sorted)
        if not n:
            return torch.full_like(keys, -1), torch.zeros_like(keys, dtype=torch.bool)
        pos = torch.searchsorted(self._sorted, keys).clamp_(max=n - 1)  # [keys]
        found = self._sorted[pos] == keys
        return torch.where(found, self._ids[pos], -1), found

    def ids(
        self, keys: torch.Tensor, found: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> torch.Tensor:
        """The id of each of ``keys`` (unique, sorted); unknown keys get the next ids.
        ``found``: ``find(keys)``, when the caller looked them up already (and the index
        has not changed since)."""
        ids, known = self.find(keys) if found is None else found
        new = keys[~known]  # [new] sorted
        if len(new):
            fresh = torch.arange(len(self.keys), len(self.keys) + len(new), device=keys.device)
            ids[~known] = fresh
            merged, order = torch.sort(torch.cat([self._sorted, new]), stable=True)
            self._sorted, self._ids = merged, torch.cat([self._ids, fresh])[order]
            self.keys = torch.cat([self.keys, new])
        return ids


def key_order(keys: np.ndarray) -> np.ndarray:
    """A stable order of the rows of ``keys`` [rows, columns] (non-negative ints) by key:
    one int64 argsort when the columns' bit widths fit in 63 bits, else a lexsort."""
    widths = [max(1, int(c.max()).bit_length()) if len(c) else 1 for c in keys.T]
    if sum(widths) > 63 or (len(keys) and keys.min() < 0):
        return np.lexsort(keys.T[::-1])
    packed = np.zeros(len(keys), np.int64)
    for column, width in zip(keys.T, widths, strict=True):
        packed = (packed << width) | column
    return np.argsort(packed, kind="stable")
