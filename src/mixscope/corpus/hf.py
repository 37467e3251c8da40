"""Hugging Face ``datasets`` as a corpus (``corpus.format: hf``), streamed, never loaded whole.

Two kinds of source, both addressed by **row index**, so a shard (``Shard.start``) is re-read
exactly, as Parquet rows are:

- **local** (``corpus.paths``): a directory written by ``save_to_disk`` (a ``Dataset``, or a
  ``DatasetDict``: its ``corpus.dataset_split`` sub-directory, default ``train``), Arrow files
  written by ``datasets``, or directories / globs of them. Every Arrow file is one file of the
  plan (sorted, as other formats), memory-mapped (``Dataset.from_file``) and read in slices of
  ``BATCH_ROWS`` rows from the shard's first row; fingerprinted by content like other files.
- **hub** (``corpus.dataset`` with ``dataset_config``, ``dataset_split`` (default ``train``),
  ``dataset_revision``): one source, ``hf:NAME?config=…&split=…&revision=…``, read with
  ``load_dataset(..., streaming=True)``; a shard starting at row k skips k rows of the stream
  (like a compressed file, read and dropped). Fingerprinted by name, config, split and the
  commit the revision resolves to, so the same dataset commit gives the same ids. An
  unreachable hub or a missing dataset is a one-line :class:`MixscopeError` at planning.

Rows become records as for Parquet: a null (or absent) text is ``missing_field``, a value
that is not a string (a number, a list) ``not_text``, other checks (``empty``, ``oversized``,
``nul_bytes``, …) as for every reader; a file without the text (or id) column is one
``missing_column`` record, a file that is not Arrow one ``unreadable_file``.

``datasets`` is imported only here, only when an hf corpus is read (``pip install
'mixscope[hf]'``).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlencode

from mixscope.config import CorpusSpec
from mixscope.corpus.records import (
    MISSING_COLUMN,
    MISSING_FIELD,
    NOT_TEXT,
    UNREADABLE,
    Record,
    decode_text,
)
from mixscope.corpus.sources import expand_paths, is_uri
from mixscope.errors import MixscopeError

HUB_PREFIX = "hf:"
DEFAULT_SPLIT = "train"
BATCH_ROWS = 1024  # rows read at a time from a memory-mapped Arrow file


def _datasets() -> Any:
    try:
        import datasets
    except ImportError:
        raise MixscopeError(
            "corpus.format hf needs the datasets library: pip install 'mixscope[hf]'"
        ) from None
    datasets.disable_progress_bars()
    return datasets


# --- sources ------------------------------------------------------------------------------


def is_hub(source: str) -> bool:
    return source.startswith(HUB_PREFIX)


def hub_source(spec: CorpusSpec) -> str:
    """The plan's file entry for a hub dataset: its name and the options that select rows."""
    assert spec.dataset
    query = {
        k: v
        for k, v in (
            ("config", spec.dataset_config),
            ("split", spec.dataset_split or DEFAULT_SPLIT),
            ("revision", spec.dataset_revision),
        )
        if v is not None
    }
    return f"{HUB_PREFIX}{spec.dataset}?{urlencode(query)}"


def parse_hub(source: str) -> tuple[str, str | None, str, str | None]:
    """(name, config, split, revision) of a :func:`hub_source` string."""
    name, _, query = source[len(HUB_PREFIX) :].partition("?")
    q = dict(parse_qsl(query))
    return name, q.get("config"), q.get("split", DEFAULT_SPLIT), q.get("revision")


def _saved_files(folder: str, raw: str, split: str | None) -> list[str] | None:
    """The Arrow files of a ``save_to_disk`` directory (None when it is not one)."""
    dict_json = os.path.join(folder, "dataset_dict.json")
    if os.path.isfile(dict_json):
        try:
            with open(dict_json, encoding="utf-8") as fh:
                splits = json.load(fh)["splits"]
        except (OSError, ValueError, KeyError, TypeError):
            raise MixscopeError(f"corpus path {raw}: unreadable dataset_dict.json") from None
        want = split or DEFAULT_SPLIT
        if want not in splits:
            raise MixscopeError(
                f"corpus path {raw}: no split {want!r} (splits: {', '.join(splits)}); "
                "set corpus.dataset_split"
            )
        return _saved_files(os.path.join(folder, want), f"{raw}/{want}", None)
    state_json = os.path.join(folder, "state.json")
    if not os.path.isfile(state_json):
        return None
    try:
        with open(state_json, encoding="utf-8") as fh:
            names = [entry["filename"] for entry in json.load(fh)["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError):
        raise MixscopeError(f"corpus path {raw}: unreadable state.json") from None
    files = [os.path.abspath(os.path.join(folder, n)) for n in names]
    for f in files:
        if not os.path.isfile(f):
            raise MixscopeError(f"corpus path {raw}: missing data file {os.path.basename(f)}")
    return files


def hf_sources(spec: CorpusSpec) -> list[str]:
    """The plan's files of an hf corpus: one hub source, or every local Arrow file, sorted."""
    if spec.dataset:
        return [hub_source(spec)]
    if not spec.paths:
        raise MixscopeError("no corpus given: corpus.dataset or corpus.paths")
    files: list[str] = []
    for raw in spec.paths:
        if is_uri(raw):
            raise MixscopeError(
                f"corpus path {raw}: format hf reads local datasets (corpus.dataset for the hub)"
            )
        p = os.path.expanduser(raw)
        saved = _saved_files(p, raw, spec.dataset_split) if os.path.isdir(p) else None
        if saved is None:
            saved = [f for f in expand_paths([raw]) if f.endswith(".arrow")]
            if not saved:
                raise MixscopeError(
                    f"corpus path {raw}: no Arrow files (format hf reads a save_to_disk "
                    "directory or .arrow files)"
                )
        files += saved
    return sorted(set(files))


# --- fingerprint --------------------------------------------------------------------------


def _hub_error(name: str, exc: BaseException) -> str:
    """One line for a hub dataset that cannot be read."""
    kind = type(exc).__name__
    text = " ".join(str(exc).split()) or kind
    if len(text) > 200:
        text = text[:197] + "..."
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    if "Offline" in kind or "Offline" in text or offline:
        return (
            f"corpus dataset {name!r}: the Hugging Face Hub cannot be reached "
            "(offline: HF_HUB_OFFLINE is set); use a local save_to_disk directory in "
            "corpus.paths"
        )
    if "RepositoryNotFound" in kind or "DatasetNotFound" in kind:
        return f"corpus dataset {name!r} does not exist on the Hub (or is private: set HF_TOKEN)"
    if "RevisionNotFound" in kind:
        return f"corpus dataset {name!r}: no such revision ({text})"
    if isinstance(exc, OSError | TimeoutError) or "Connect" in kind or "Timeout" in kind:
        return f"corpus dataset {name!r}: the Hugging Face Hub cannot be reached ({kind}: {text})"
    return f"corpus dataset {name!r}: cannot be read from the Hub ({kind}: {text})"


def hub_digest(source: str) -> str:
    """Name, config, split and resolved commit of a hub dataset (raises, one line, when the
    hub is unreachable or the dataset does not exist)."""
    name, config, split, revision = parse_hub(source)
    try:
        from huggingface_hub import HfApi

        sha = HfApi().dataset_info(name, revision=revision).sha
    except Exception as exc:  # offline, not found, network: one line, before any work
        raise MixscopeError(_hub_error(name, exc)) from None
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{name}\0{config}\0{split}\0{sha or revision}".encode())
    return h.hexdigest()


# --- records ------------------------------------------------------------------------------


def _record(row: int, value: Any, ext: Any, cap: int) -> Record:
    if value is None:
        return Record(row, row + 1, None, MISSING_FIELD)
    if not isinstance(value, str):
        return Record(row, row + 1, None, NOT_TEXT)
    text, reason = decode_text(value.encode("utf-8"), cap)
    return Record(row, row + 1, text, reason, None if ext is None else str(ext))


def _arrow_records(path: str, spec: CorpusSpec, start: int) -> Iterator[Record]:
    import pyarrow as pa

    datasets = _datasets()
    try:
        ds = datasets.Dataset.from_file(path, in_memory=False)  # memory-mapped
    except (pa.ArrowInvalid, OSError, ValueError):
        yield Record(0, 0, None, UNREADABLE)
        return
    names = ds.column_names
    if spec.text_field not in names or (spec.id_field and spec.id_field not in names):
        yield Record(0, 0, None, MISSING_COLUMN)
        return
    columns = [spec.text_field] + ([spec.id_field] if spec.id_field else [])
    table = ds.with_format("arrow", columns=columns)
    for lo in range(start, len(ds), BATCH_ROWS):
        batch = table[lo : lo + BATCH_ROWS]
        texts = batch.column(spec.text_field).to_pylist()
        ids = batch.column(spec.id_field).to_pylist() if spec.id_field else [None] * len(texts)
        for k, (value, ext) in enumerate(zip(texts, ids, strict=True)):
            yield _record(lo + k, value, ext, spec.max_doc_bytes)


def _hub_records(source: str, spec: CorpusSpec, start: int) -> Iterator[Record]:
    name, config, split, revision = parse_hub(source)
    datasets = _datasets()
    try:
        ds = datasets.load_dataset(name, config, split=split, revision=revision, streaming=True)
        features = ds.features
        if features is not None and (
            spec.text_field not in features or (spec.id_field and spec.id_field not in features)
        ):
            yield Record(0, 0, None, MISSING_COLUMN)
            return
        rows = ds.skip(start) if start else ds
        for k, row in enumerate(rows, start):
            ext = row.get(spec.id_field) if spec.id_field else None
            yield _record(k, row.get(spec.text_field), ext, spec.max_doc_bytes)
    except MixscopeError:
        raise
    except Exception as exc:  # unreachable, missing, a stream cut short: one line
        raise MixscopeError(_hub_error(name, exc)) from None


def hf_records(source: str, spec: CorpusSpec, start: int) -> Iterator[Record]:
    """The records of one hf source from row ``start`` on (``readers.iter_records``)."""
    if is_hub(source):
        return _hub_records(source, spec, start)
    return _arrow_records(source, spec, start)
