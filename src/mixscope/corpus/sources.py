"""Corpus paths (files, directories, globs) → a sorted, checked list of files.

Missing or unreadable inputs are a clear error here, before any actor starts. A path may
also be a URI (``s3://bucket/key``, a prefix, or a glob under one: ``s3://b/c/*.jsonl``,
``**`` for any depth), read through pyarrow's filesystems with the usual AWS variables;
files keep their URIs in the plan, so every worker re-reads them the same way.
"""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path
from typing import Any

from mixscope.errors import MixscopeError

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


def is_uri(path: str) -> bool:
    return "://" in path


def _filesystem(uri: str) -> tuple[Any, str, str]:
    """(pyarrow filesystem, its path, the URI scheme) for a corpus URI."""
    import pyarrow as pa
    import pyarrow.fs as pafs

    try:
        fs, path = pafs.FileSystem.from_uri(uri)
    except (pa.ArrowInvalid, ValueError, OSError) as exc:
        raise MixscopeError(f"corpus path {uri}: {exc}") from None
    return fs, path, uri.split("://", 1)[0]


def open_input(path: str) -> Any:
    """A seekable pyarrow input file for a local path or a URI."""
    import pyarrow as pa

    if not is_uri(path):
        return pa.OSFile(path, "rb")
    fs, p, _ = _filesystem(path)
    return fs.open_input_file(p)


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """A glob (``*``, ``?``, ``[…]``, ``**/`` for any depth) as a full-path regex."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        elif pattern[i] == "[" and "]" in pattern[i + 1 :]:
            j = pattern.index("]", i + 1)
            body = pattern[i + 1 : j]
            out += "[" + ("^" + body[1:] if body.startswith("!") else body) + "]"
            i = j + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"\Z")


def _expand_uri(raw: str) -> list[str]:
    """The files a URI names: one object, every object under a prefix, or a glob's matches."""
    import pyarrow.fs as pafs

    fs, path, scheme = _filesystem(raw)
    path = path.rstrip("/")
    glob_at = next((k for k, ch in enumerate(path) if ch in "*?["), None)

    def listing(folder: str) -> list[str]:
        infos = fs.get_file_info(pafs.FileSelector(folder, recursive=True, allow_not_found=True))
        return sorted(
            i.path
            for i in infos
            if i.type == pafs.FileType.File
            and not any(part.startswith(".") for part in i.path[len(folder) :].split("/"))
        )

    if glob_at is not None:
        folder = path[:glob_at].rsplit("/", 1)[0]
        regex = _glob_regex(path)
        found = [p for p in listing(folder) if regex.match(p)]
        if not found:
            raise MixscopeError(f"corpus glob {raw} matches no files")
    else:
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.File:
            found = [path]
        elif info.type == pafs.FileType.Directory:
            found = listing(path)
            if not found:
                raise MixscopeError(f"corpus directory {raw} contains no files")
        else:
            raise MixscopeError(f"corpus path {raw} does not exist")
    return [f"{scheme}://{p.lstrip('/')}" for p in found]


def expand_paths(paths: tuple[str, ...] | list[str]) -> list[str]:
    """Every file named by ``paths``, sorted, de-duplicated; directories recurse (no dot files)."""
    if not paths:
        raise MixscopeError("no corpus given: pass at least one file, directory or glob")
    files: list[str] = []
    uris: list[str] = []
    for raw in paths:
        if is_uri(raw):
            uris += _expand_uri(raw)
            continue
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
    return sorted(set(unique) | set(uris))
