"""A block of analysed tokens in columnar form: what the statistics and the detail read.

A block lays a chunk of sequences end to end: ``values`` (``[tokens, stored measures,
layers]``) is a tensor on the device the engine ran on, where the statistics are
accumulated (``stats/accumulate.py``), and the per-token ids and flags beside it are small
host arrays (the sequences' own, laid end to end: a few vectorized copies), which the
statistics send to the device once and the detail reads for the rows it keeps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from mixscope.corpus.encode import EncodedSequence
from mixscope.registry import MeasureSet
from mixscope.store.schema import category_codes


@dataclass
class TokenBlock:
    doc_id: np.ndarray  # [tokens] int64
    segment: np.ndarray  # [tokens] int32
    position: np.ndarray  # [tokens] int32
    token_id: np.ndarray  # [tokens] int32, as the model saw it
    original_id: np.ndarray  # [tokens] int32, before masking
    token_type: np.ndarray  # [tokens] int8
    is_special: np.ndarray  # [tokens] bool
    is_masked: np.ndarray  # [tokens] bool
    category: np.ndarray  # [tokens] int8, index into CATEGORIES
    sequence: np.ndarray  # [tokens] int64, index of the token's sequence in the block
    #: [tokens, stored measures, layers] float32 on the engine's device, contiguous: a
    #: token's values side by side, the rows every scatter of the statistics adds
    values: torch.Tensor

    def __len__(self) -> int:
        return int(self.doc_id.shape[0])

    @property
    def layers(self) -> int:
        return int(self.values.shape[2])

    def take(self, rows: np.ndarray) -> TokenBlock:
        """The tokens at ``rows`` (indices or a boolean mask), as a block of their own (its
        values gathered on their device)."""
        index = np.flatnonzero(rows) if rows.dtype == np.bool_ else rows
        fields = {k: getattr(self, k)[index] for k in self.__dataclass_fields__ if k != "values"}
        picked = torch.from_numpy(np.asarray(index, np.int64)).to(self.values.device)
        return TokenBlock(**fields, values=self.values.index_select(0, picked))


class Vocabulary:
    """Token strings by id: the whole vocabulary looked up once (tokenizers are slow per
    call), as a numpy object table and an Arrow array for C++-speed ``take``."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._cache: dict[int, str] = {}
        self._table: np.ndarray | None = None
        self._arrow: pa.Array | None = None
        size = len(tokenizer) if hasattr(tokenizer, "__len__") else 0
        if size:
            strings = tokenizer.convert_ids_to_tokens(list(range(size)))
            self._table = np.array([s if s is not None else "" for s in strings], dtype=object)
            self._arrow = pa.array(self._table.tolist(), pa.string())

    def strings(self, ids: np.ndarray) -> np.ndarray:
        """Object array of the token strings of ``ids`` (any shape of int ids)."""
        ids = np.asarray(ids)
        if self._table is not None and (ids.size == 0 or ids.max() < len(self._table)):
            return self._table[ids]
        uniq, inverse = np.unique(ids, return_inverse=True)
        missing = [int(i) for i in uniq if int(i) not in self._cache]
        if missing:
            for i, s in zip(missing, self.tokenizer.convert_ids_to_tokens(missing), strict=True):
                self._cache[i] = s if s is not None else ""
        table = np.array([self._cache[int(i)] for i in uniq], dtype=object)
        return table[inverse.reshape(ids.shape)] if len(uniq) else np.empty(0, dtype=object)

    def arrow(self, ids: np.ndarray) -> pa.Array:
        """The token strings of 1-D ``ids`` as an Arrow string array."""
        ids = np.asarray(ids)
        if self._arrow is not None and (ids.size == 0 or ids.max() < len(self._arrow)):
            return self._arrow.take(pa.array(ids))
        return pa.array(self.strings(ids).tolist(), pa.string())


def token_block(
    seqs: Sequence[EncodedSequence],
    measures: torch.Tensor | Sequence[np.ndarray | torch.Tensor],
    vocab: Vocabulary,
    columns: MeasureSet,
) -> TokenBlock:
    """The block of ``seqs`` and their measures, those of ``columns`` (the run's
    measure set), of which it keeps the stored ones. ``measures`` is either the chunk's tensor
    ``[tokens, measure, layer]`` in ``seqs`` order (``mixing.batches.run_chunk``: on the
    engine's device) or one engine-shaped ``[layer, measure, seq]`` array per sequence."""
    lengths = np.array([len(s) for s in seqs], dtype=np.int64)
    cat = np.concatenate
    token_id = cat([s.input_ids for s in seqs]).astype(np.int32)
    is_special = cat([s.special for s in seqs])
    is_masked = cat([s.masked for s in seqs])
    # only special tokens need their string for the category
    strings = vocab.strings(token_id[is_special])
    values = chunk_values(measures) if not isinstance(measures, torch.Tensor) else measures
    stored = columns.stored_index()
    if stored != list(range(values.shape[1])):
        values = values.index_select(1, torch.tensor(stored, device=values.device))
    return TokenBlock(
        doc_id=np.repeat(np.array([s.doc_id for s in seqs], dtype=np.int64), lengths),
        segment=np.repeat(np.array([s.segment for s in seqs], dtype=np.int32), lengths),
        position=(
            np.arange(len(token_id)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        ).astype(np.int32),
        token_id=token_id,
        original_id=cat([s.original_ids for s in seqs]).astype(np.int32),
        token_type=cat([s.token_type_ids for s in seqs]).astype(np.int8),
        is_special=is_special,
        is_masked=is_masked,
        category=category_codes(is_special, is_masked, strings),
        sequence=np.repeat(np.arange(len(seqs), dtype=np.int64), lengths),
        values=values.to(torch.float32).contiguous(),  # what the detail stores
    )


def chunk_values(measures: Sequence[np.ndarray | torch.Tensor]) -> torch.Tensor:
    """One engine-shaped ``[layer, measure, seq]`` array per sequence → the chunk's
    ``[tokens, measure, layer]`` float32 tensor, the sequences end to end."""
    parts = [torch.as_tensor(m) for m in measures]
    whole = torch.cat(parts, dim=2) if parts else torch.zeros(0, 0, 0)  # [layer, m, tokens]
    return whole.permute(2, 1, 0).to(torch.float32).contiguous()
