"""A committed Parquet file that no longer reads: one line naming it, never a reader's riddle.

A byte changed in a committed file after its commit keeps the file's size, so the cheap
check every connection makes (``store/verify.py``: presence and size) passes, and the
reader fails deep inside: DuckDB with "don't know what type:", "TProtocolException:
Invalid data" or "Out of buffer", none naming the file; pyarrow with "Malformed levels".
``naming_unreadable`` wraps what ``sql``, ``query``, ``compare``, ``report``, ``status``
and ``run`` do with a results root: such an error becomes one line that names the file
and points at ``mixscope status ROOT --verify``.

Which file: the one the error names when it names a committed file; otherwise the first
committed file of the selected runs whose sha256 differs from its record (statistics
first, then documents, then detail: smallest kinds first), hashing at most
``PROBE_BYTES`` (beyond that the line says a file may be damaged and leaves the naming
to ``status --verify``, which shows progress). An error with every file as committed is
not damage: it is raised as it was (a DuckDB error as one ``SQL error:`` line).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

from mixscope.errors import MixscopeError, SqlError, first_line
from mixscope.store.layout import Layout
from mixscope.store.verify import THREADS, Committed, hash_files, promised

#: bytes an error may hash to find the damaged file (on its error path only)
PROBE_BYTES = 1 << 30

#: DuckDB's error classes that a damaged file raises: its base class (thrift and decoder
#: errors: "don't know what type", "Out of buffer"), invalid input ("ZSTD Decompression
#: failure", "Mismatch in parquet read"), I/O, internal and serialization errors; never
#: the parser, binder, catalog or conversion errors of a query, so a typo costs no probe
_DUCKDB_READ = (
    "Error",
    "InvalidInputException",
    "IOException",
    "InternalException",
    "SerializationException",
)

#: the order files are probed in: small kinds first
_KIND_ORDER = {"documents": 1, "tokens": 2}


class UnreadableFileError(MixscopeError):
    """A committed file that cannot be read (named); ``status --verify`` finds them all."""


def read_failure(exc: BaseException) -> bool:
    """Could ``exc`` come from reading a damaged Parquet file?"""
    import duckdb
    import pyarrow as pa

    if isinstance(exc, SqlError):
        exc = exc.cause
    if isinstance(exc, duckdb.Error):
        if "no per-token rows" in str(exc):  # the detail views' own refusal (sql/views.py)
            return False
        return type(exc).__name__ in _DUCKDB_READ
    if isinstance(exc, pa.ArrowException) and not isinstance(exc, OSError):
        return True  # ArrowInvalid: "Column 2 named offset expected length 4 but got 0"
    # pyarrow's I/O and decoding errors are OSErrors without an errno ("Malformed levels",
    # "Unexpected end of stream"); the OS's own (a closed pipe, a full disk) carry one
    return isinstance(exc, OSError) and exc.errno is None and not isinstance(exc, MixscopeError)


def _ordered(files: Iterable[Committed]) -> list[Committed]:
    return sorted(files, key=lambda c: (_KIND_ORDER.get(c.kind, 0), c.path))


def _where(c: Committed, run_id: str) -> str:
    owner = f"shard {c.shard}" if c.shard is not None else f"statistics generation {c.generation}"
    return f"{owner} of run {run_id}"


def explain(layout: Layout, run_ids: list[str] | None, exc: BaseException) -> str | None:
    """The one line for ``exc``, a read failure, naming the damaged committed file; None
    when every committed file is as its record says (not damage)."""
    runs = run_ids if run_ids is not None else layout.list_dirs(layout.runs_dir())
    cause = getattr(exc, "cause", None) or exc
    text, message = str(cause), first_line(cause)  # the whole to search, a line to show
    files = [
        (run_id, c) for run_id in runs for c in _ordered(promised(layout, run_id).files(layout))
    ]
    verify = f"`mixscope status {layout.root} --verify` checks every committed file"
    named = [(r, c) for r, c in files if c.path in text or layout.uri(c.path) in text]
    probe = named or files
    budget = PROBE_BYTES if not named else None
    for start in range(0, len(probe), THREADS):
        batch = probe[start : start + THREADS]
        if budget is not None:
            budget -= sum(max(c.bytes, 0) for _, c in batch)
            if budget < 0:
                return (
                    f"cannot read the results under {layout.root} ({message}): a committed "
                    f"file may be damaged; {verify} and names it"
                )
        try:
            found = hash_files(layout, [c for _, c in batch])
        except OSError:  # unreadable even as bytes (gone, permissions, the network)
            found = [None] * len(batch)
        for (run_id, c), what in zip(batch, found, strict=True):
            if what is not None:
                return (
                    f"cannot read {layout.relative(c.path)} ({_where(c, run_id)}): it changed "
                    f"since its commit (sha256 differs from its record); {verify}, "
                    "`mixscope run JOB --repair` redoes what it finds"
                )
    if named:  # as committed, yet unreadable: still the file, and where to look further
        run_id, c = named[0]
        return f"cannot read {layout.relative(c.path)} ({_where(c, run_id)}: {message}); {verify}"
    return None


@contextlib.contextmanager
def naming_unreadable(root: str, run_ids: Iterable[str] | None = None) -> Iterator[None]:
    """Run the block; a read failure of a damaged committed file becomes one line naming
    it (``UnreadableFileError``); a DuckDB error that is not one becomes ``SQL error:``."""
    import duckdb

    try:
        yield
    except UnreadableFileError:
        raise
    except Exception as exc:
        if not read_failure(exc):
            if isinstance(exc, duckdb.Error):  # raised while fetching, after ``execute``
                raise MixscopeError(f"SQL error: {first_line(exc)}") from exc
            raise
        try:
            layout = Layout.open(root)
            line = explain(layout, list(run_ids) if run_ids else None, exc)
        except MixscopeError:  # the records themselves damaged: the original error stands
            line = None
        if line is not None:
            raise UnreadableFileError(line) from exc
        if isinstance(exc, duckdb.Error):
            raise MixscopeError(f"SQL error: {first_line(exc)}") from exc
        raise
