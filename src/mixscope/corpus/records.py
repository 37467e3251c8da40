"""A corpus record and the reasons a record is not analysed: what every reader shares.

The readers of files (corpus/readers.py) and of Hugging Face datasets (corpus/hf.py) both
yield :class:`Record` values and classify bad input with these reasons (counted per run);
this module is below both, so neither imports the other at load.
"""

from __future__ import annotations

from dataclasses import dataclass

# reasons a record is not analysed (counted per run)
EMPTY = "empty"
SKIPPED_BY_RULE = "skipped_by_rule"
INVALID_UTF8 = "invalid_utf8"
NUL_BYTES = "nul_bytes"
BINARY = "binary"
OVERSIZED = "oversized"
INVALID_JSON = "invalid_json"
MISSING_FIELD = "missing_field"
NOT_TEXT = "not_text"  # a dataset's text value that is not a string (a number, a list)
UNPAIRED = "unpaired"
EMPTY_FILE = "empty_file"  # a file with no document at all (one record per file)
MISSING_COLUMN = "missing_column"  # a Parquet file without the text column (per file)
UNREADABLE = "unreadable_file"  # a Parquet file that does not open as Parquet (per file)
_CONTROL = bytes(range(0, 32)).replace(b"\t", b"").replace(b"\n", b"").replace(b"\r", b"")


@dataclass
class Record:
    offset: int  # byte offset of the record (text/JSONL) or row number (Parquet, hf)
    end: int  # offset just past the record
    text: str | None  # None when rejected
    reason: str | None = None  # why it was rejected
    external_id: str | None = None


def decode_text(raw: bytes, cap: int) -> tuple[str | None, str | None]:
    """(text, None) or (None, reason) for one candidate document's bytes."""
    if len(raw) > cap:
        return None, OVERSIZED
    if b"\x00" in raw:
        return None, NUL_BYTES
    if raw and sum(raw.count(bytes([c])) for c in _CONTROL) > max(2, len(raw) // 10):
        return None, BINARY
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, INVALID_UTF8
    if not text.strip():
        return None, EMPTY
    return text, None
