"""Write to a temporary name, then rename: the one rule every file mixscope writes follows.

Readers never see a half-written file: the temporary name is hidden (a leading ``.``),
unique (two writers never share one) and ends in ``.tmp``, so no ``*.parquet`` or
``*.json`` glob matches it; the rename is atomic on a local filesystem. Object stores have
no rename: ``Layout.write_bytes_atomic`` uses the same name and docs/storage.md says how a
commit stays atomic there.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path


def temp_name(path: str) -> str:
    """The hidden, unique temporary name beside ``path`` (``dir/.name.<hex>.tmp``)."""
    folder, _, name = path.rpartition("/")
    return (
        f"{folder}/.{name}.{uuid.uuid4().hex[:8]}.tmp"
        if folder
        else f".{name}.{uuid.uuid4().hex[:8]}.tmp"
    )


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces ``path`` atomically, on an
    error it is removed and ``path`` is left as it was. The parent folder is created."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(temp_name(str(target)))
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """``path`` holds ``text`` (UTF-8), all of it or, on an error, what it held before."""
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
