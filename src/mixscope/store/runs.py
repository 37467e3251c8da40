"""Run identity and the run record, as stored.

A run is identified by (model fingerprint, corpus fingerprint, analysis options): running
the same job again is the same run and resumes it. What the options are is decided by the
one owner of a run's identity (``runtime/prepare.py``); this module hashes them and reads
and writes the records, taking plain values and typed records, never a job spec (store/
imports nothing from config/).
"""

from __future__ import annotations

import hashlib
import json
import platform
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from mixscope import __version__
from mixscope.store.layout import Layout
from mixscope.store.run_record import RUN_FORMAT, RunRecord


def run_id_for(model_fingerprint: str, corpus_fingerprint: str, options: Mapping[str, Any]) -> str:
    """The run id: a hash of the identity (``prepare.identity_options``'s options). Changing
    what goes in changes every run's id, so existing results would no longer resume."""
    key = json.dumps([model_fingerprint, corpus_fingerprint, options], sort_keys=True)
    return hashlib.blake2b(key.encode(), digest_size=8).hexdigest()


def library_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"mixscope": __version__, "python": platform.python_version()}
    for pkg in ("torch", "transformers", "tokenizers", "pyarrow", "ray", "duckdb"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def load_run(layout: Layout, run_id: str) -> RunRecord | None:
    """The typed run record; None if the run has none; ``CorruptRecordError`` if damaged."""
    path = layout.run_record_path(run_id)
    data = layout.read_json(path)
    return None if data is None else RunRecord.from_json(data, layout.relative(path))


def load_runs(layout: Layout) -> list[RunRecord]:
    """Every run's typed record, oldest first (``created_at`` has whole seconds: runs of
    the same second by run id)."""
    runs = []
    for run_id in layout.list_dirs(layout.runs_dir()):
        record = load_run(layout, run_id)
        if record is not None:
            runs.append(record)
    return sorted(runs, key=lambda r: (r.created_at, r.run_id))


def write_run(layout: Layout, record: RunRecord) -> RunRecord:
    """Write the run record, stamped ``updated_at`` and the current format; returns what
    was written."""
    typed = replace(record, updated_at=now(), format=RUN_FORMAT)
    layout.write_json(layout.run_record_path(typed.run_id), typed.to_json())
    return typed


def resolve_run_ids(layout: Layout, given: list[str] | tuple[str, ...]) -> list[str]:
    """The full ids of ``given`` run ids or unique prefixes of them, as git takes commit
    prefixes: typing the first few characters that ``status`` shows is enough. Unknown or
    ambiguous ones are one-line errors naming the runs there are."""
    from mixscope.errors import MixscopeError

    known = sorted(r.run_id for r in load_runs(layout))
    if not known:
        raise MixscopeError(f"no runs in {layout.root}")
    out = []
    for prefix in given:
        prefix = str(prefix).strip()
        matches = [k for k in known if k == prefix] or [
            k for k in known if prefix and k.startswith(prefix)
        ]
        if not matches:
            raise MixscopeError(f"unknown run {prefix!r}; runs: {', '.join(known)}")
        if len(matches) > 1:
            raise MixscopeError(
                f"run {prefix!r} is ambiguous: {', '.join(matches)} (give more characters)"
            )
        out.append(matches[0])
    return out
