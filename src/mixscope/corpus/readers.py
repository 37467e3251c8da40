"""Streaming readers: one corpus file → records with stable offsets, bad input classified.

A record is a candidate document. Bad input never crashes a job and is never silently
dropped: each rejected record carries a reason that the planner counts and the run records.
Offsets are byte offsets in the (decompressed) stream for text and JSONL, row numbers for
Parquet and Hugging Face datasets (``corpus/hf.py``), so a shard can be re-read exactly.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Iterator

import pyarrow as pa

from mixscope.config import CorpusSpec
from mixscope.corpus.records import (
    BINARY,
    EMPTY_FILE,
    INVALID_JSON,
    MISSING_COLUMN,
    MISSING_FIELD,
    OVERSIZED,
    SKIPPED_BY_RULE,
    UNREADABLE,
    Record,
    decode_text,
)
from mixscope.corpus.sources import compression_of, format_of, open_input

_BOM = b"\xef\xbb\xbf"
_CHUNK = 1 << 20


def _open_binary(path: str) -> io.BufferedIOBase:
    raw = (
        open_input(path)
        if compression_of(path) is None
        else pa.CompressedInputStream(open_input(path), compression_of(path))
    )
    return io.BufferedReader(raw, buffer_size=_CHUNK)  # type: ignore[arg-type]


def _lines(path: str, start: int, cap: int) -> Iterator[tuple[int, int, bytes | None]]:
    """(offset, end, line without EOL) from byte ``start``; None for lines longer than ``cap``.

    Long lines are skipped in chunks, never held whole in memory.
    """
    with _open_binary(path) as f:
        pos = 0
        if start:
            if compression_of(path) is None:
                f.seek(start)
                pos = start
            else:  # compressed streams cannot seek: read and drop
                while pos < start:
                    got = f.read(min(_CHUNK, start - pos))
                    if not got:
                        return
                    pos += len(got)
        first = pos == 0
        while True:
            line = f.readline(cap + 2)
            if not line:
                return
            offset = pos
            pos += len(line)
            if first:
                first = False
                if line.startswith(_BOM):
                    line = line[3:]
            if not line.endswith(b"\n") and len(line) >= cap + 2:
                while not line.endswith(b"\n"):  # oversized: skip to the end of the line
                    line = f.readline(_CHUNK)
                    if not line:
                        break
                    pos += len(line)
                yield offset, pos, None
                continue
            yield offset, pos, line.rstrip(b"\r\n")


def _text_records(path: str, spec: CorpusSpec, start: int) -> Iterator[Record]:
    cap = spec.max_doc_bytes
    if spec.split == "line":
        for offset, end, line in _lines(path, start, cap):
            if line is None:
                yield Record(offset, end, None, OVERSIZED)
                continue
            if not line.strip():
                continue  # blank lines separate documents: skipped by rule, not counted
            text, reason = decode_text(line, cap)
            yield Record(offset, end, text, reason)
        return
    # paragraphs: runs of non-blank lines, separated by blank lines
    buf: list[bytes] = []
    para_start = para_end = start
    oversized = False
    for offset, end, line in _lines(path, start, cap):
        if line is not None and not line.strip():
            if buf or oversized:
                yield _paragraph(buf, para_start, para_end, cap, oversized)
                buf, oversized = [], False
            continue
        if not buf and not oversized:
            para_start = offset
        para_end = end
        if line is None:
            oversized = True
        else:
            buf.append(line)
    if buf or oversized:
        yield _paragraph(buf, para_start, para_end, cap, oversized)


def _paragraph(buf: list[bytes], start: int, end: int, cap: int, oversized: bool) -> Record:
    if oversized:
        return Record(start, end, None, OVERSIZED)
    text, reason = decode_text(b"\n".join(buf), cap)
    return Record(start, end, text, reason)


def _jsonl_records(path: str, spec: CorpusSpec, start: int) -> Iterator[Record]:
    cap = spec.max_doc_bytes
    for offset, end, line in _lines(path, start, cap * 2):
        if line is None:
            yield Record(offset, end, None, OVERSIZED)
            continue
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            yield Record(offset, end, None, INVALID_JSON)
            continue
        value = obj.get(spec.text_field) if isinstance(obj, dict) else None
        if not isinstance(value, str):
            yield Record(offset, end, None, MISSING_FIELD)
            continue
        text, reason = decode_text(value.encode("utf-8"), cap)
        ext = obj.get(spec.id_field) if spec.id_field else None
        yield Record(offset, end, text, reason, None if ext is None else str(ext))


def _parquet_records(path: str, spec: CorpusSpec, start: int) -> Iterator[Record]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(open_input(path))
    except (pa.ArrowInvalid, OSError):  # not Parquet (or cut short): one bad record
        yield Record(0, 0, None, UNREADABLE)
        return
    names = pf.schema_arrow.names
    if spec.text_field not in names or (spec.id_field and spec.id_field not in names):
        yield Record(0, 0, None, MISSING_COLUMN)
        return
    columns = [spec.text_field] + ([spec.id_field] if spec.id_field else [])
    row = 0
    for group in range(pf.num_row_groups):
        n = pf.metadata.row_group(group).num_rows
        if row + n <= start:
            row += n
            continue
        table = pf.read_row_group(group, columns=columns)
        texts = table.column(spec.text_field).to_pylist()
        ids = table.column(spec.id_field).to_pylist() if spec.id_field else [None] * n
        for k in range(n):
            r = row + k
            if r < start:
                continue
            value = texts[k]
            if not isinstance(value, str):
                yield Record(r, r + 1, None, MISSING_FIELD)
                continue
            text, reason = decode_text(value.encode("utf-8"), spec.max_doc_bytes)
            yield Record(r, r + 1, text, reason, None if ids[k] is None else str(ids[k]))
        row += n


def looks_binary(path: str) -> bool:
    """A text or JSONL file with NUL bytes in its first 8 KiB is binary (as grep decides)."""
    with _open_binary(path) as f:
        return b"\x00" in f.read(8192)


def iter_records(path: str, spec: CorpusSpec, start: int = 0) -> Iterator[Record]:
    """All records of one file from ``start`` on; ``skip_regex`` applied.

    A binary file is one record with reason ``binary`` (it is not read line by line).
    """
    fmt = format_of(path, spec.format)
    if fmt in ("text", "jsonl") and looks_binary(path):
        yield Record(0, 0, None, BINARY)
        return
    readers: dict[str, Callable[[str, CorpusSpec, int], Iterator[Record]]] = {
        "text": _text_records,
        "jsonl": _jsonl_records,
        "parquet": _parquet_records,
    }
    if fmt == "hf":
        from mixscope.corpus.hf import hf_records  # imports datasets: only for hf corpora

        readers["hf"] = hf_records
    reader = readers[fmt]
    skip = re.compile(spec.skip_regex) if spec.skip_regex else None
    seen = False
    for rec in reader(path, spec, start):
        seen = True
        if rec.text is not None and skip is not None and skip.search(rec.text):
            rec.text, rec.reason = None, SKIPPED_BY_RULE
        yield rec
    if not seen and start == 0:  # nothing at all in the file: say so, once
        yield Record(0, 0, None, EMPTY_FILE)
