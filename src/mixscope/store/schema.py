"""The one explicit, versioned Arrow schema of the per-token-per-layer rows.

Readers (pandas, polars, DuckDB, Spark) rely on these names and types; bump
``SCHEMA_VERSION`` on any change and say what changed.
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = 1

MEASURE_COLUMNS = ("attn_w", "attn_n", "attnres_w", "attnres_n", "attnresln_n")

TOKENS_SCHEMA = pa.schema(
    [
        pa.field("doc_id", pa.int64(), nullable=False),  # index of the document in its corpus
        pa.field("segment", pa.int32(), nullable=False),  # 0-based piece of a long document
        pa.field("position", pa.int32(), nullable=False),  # 0-based, special tokens included
        pa.field("token_id", pa.int32(), nullable=False),  # the id the model saw ([MASK] if masked)
        pa.field("token", pa.dictionary(pa.int32(), pa.string()), nullable=False),
        pa.field("token_type", pa.int8(), nullable=False),  # segment id of a (text, text_pair)
        pa.field("is_special", pa.bool_(), nullable=False),
        pa.field("is_masked", pa.bool_(), nullable=False),
        pa.field("layer", pa.int16(), nullable=False),  # 1-based, as in the paper
        *[pa.field(m, pa.float32(), nullable=False) for m in MEASURE_COLUMNS],
    ],
    metadata={"mixscope.schema_version": str(SCHEMA_VERSION)},
)
