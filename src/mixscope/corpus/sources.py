"""Corpus paths (files, directories, globs) → a sorted, checked list of files.

Missing or unreadable inputs are a clear error here, before any actor starts.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

from mixscope.errors import MixscopeError

TEXT_SUFFIXES = (".txt", ".text", ".raw", ".tokens")
JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
PARQUET_SUFFIXES = (".parquet", ".pq")
COMPRESSION_SUFFIXES = {".gz": "gzip", ".gzip": "gzip", ".zst": "zstd", ".zstd": "zstd"}


def compression_of(path: str) -> str | None:
    """``gzip`` / ``zstd`` from the file name, else None."""
    return COMPRESSION_SUFFIXES.get(Path(path).suffix.lower())


def format_of(path: str, declared: str) -> str:
    """The reader for ``path``: the declared format, or guessed from its suffix."""
    if declared != "auto":
        return declared
    name = Path(path).name.lower()
    for suffix in COMPRESSION_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if name.endswith(PARQUET_SUFFIXES):
        return "parquet"
    return "text"


def expand_paths(paths: tuple[str, ...] | list[str]) -> list[str]:
    """Every file named by ``paths``, sorted, de-duplicated; directories recurse (no dot files)."""
    if not paths:
        raise MixscopeError("no corpus given: pass at least one file, directory or glob")
    files: list[str] = []
    for raw in paths:
        p = os.path.expanduser(raw)
        if any(ch in p for ch in "*?["):
            matches = sorted(glob.glob(p, recursive=True))
            matches = [m for m in matches if os.path.isfile(m)]
            if not matches:
                raise MixscopeError(f"corpus glob {raw} matches no files")
            files += matches
        elif os.path.isdir(p):
            found = sorted(
                str(f)
                for f in Path(p).rglob("*")
                if f.is_file() and not any(part.startswith(".") for part in f.relative_to(p).parts)
            )
            if not found:
                raise MixscopeError(f"corpus directory {raw} contains no files")
            files += found
        elif os.path.isfile(p):
            files.append(p)
        elif os.path.exists(p):
            raise MixscopeError(f"corpus path {raw} is not a regular file")
        else:
            raise MixscopeError(f"corpus path {raw} does not exist")
    unique = sorted({os.path.abspath(f) for f in files})
    for f in unique:
        if not os.access(f, os.R_OK):
            raise MixscopeError(f"corpus file {f} is not readable")
    return unique
