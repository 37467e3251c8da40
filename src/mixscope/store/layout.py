"""Where everything of a results root lives (a local path or an object-store URI).

    ROOT/stats/<kind>/run_id=<run>/gen-<g>-<id>.parquet          consolidated statistics
    ROOT/stats/<kind>/run_id=<run>/_partial/part-<shard>.parquet  a shard's statistics
    ROOT/tokens/run_id=<run>/part-<shard>.parquet        per-token detail (full | sample)
    ROOT/documents/run_id=<run>/part-<shard>.parquet     doc_id → source file, offset, id
    ROOT/_mixscope/runs/<run>/run.json                   the run record
    ROOT/_mixscope/runs/<run>/plan.json                  the shard plan
    ROOT/_mixscope/runs/<run>/commits/<shard>.json       the manifest: one record per shard
    ROOT/_mixscope/runs/<run>/failures/<shard>.json      last error of a failed shard
    ROOT/_mixscope/runs/<run>/stats/<g>.json             consolidation g: its files, shards
    ROOT/_mixscope/runs/<run>/actors.json                the actor pool's last state
    ROOT/_mixscope/runs/<run>/driver.lock                the run lock (local roots; a lease
                                                         ``driver.lease`` on object stores)
    ROOT/_mixscope/checkpoints/<id>.json                 a checkpoint's sync state
    ROOT/_mixscope/checkpoints/leases/<id>.lease         who analyses a checkpoint now

Every path is built here (one method each): no other module spells a file name.

Data folders are hive-partitioned by ``run_id`` so pandas, polars, DuckDB and Spark read
them directly; the ``_mixscope`` folder starts with ``_`` so dataset readers skip it.
Temporary files start with ``.`` and end in ``.tmp``: no ``*.parquet`` glob ever sees one.

On S3 roots (``s3://bucket/prefix``) there is no rename and no temporary name: each file is
one PUT under its final name (atomic: the whole object or none), data files before the
commit record that names them, and exclusive creates are conditional PUTs
(``If-None-Match: *``); see store/objectstore.py and docs/storage.md.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from mixscope.errors import CorruptRecordError, MixscopeError
from mixscope.store.atomic import temp_name


def open_root(root: str) -> tuple[pafs.FileSystem, str]:
    """A pyarrow filesystem and base path for a local path or URI (s3://, gs://, …)."""
    import os

    if "://" not in root:
        root = os.path.abspath(os.path.expanduser(root))
        return pafs.LocalFileSystem(), root.rstrip("/") or "/"
    try:
        fs, path = pafs.FileSystem.from_uri(root)
    except (pa.ArrowInvalid, ValueError):
        # protocols pyarrow has no native filesystem for (memory://, hf://, …) via fsspec
        import fsspec

        protocol, _, rest = root.partition("://")
        try:
            spec_fs = fsspec.filesystem(protocol)
        except (ImportError, ValueError) as exc:
            raise MixscopeError(f"no filesystem for output root {root}: {exc}") from None
        return pafs.PyFileSystem(pafs.FSSpecHandler(spec_fs)), "/" + rest.strip("/")
    return fs, path.rstrip("/")


@dataclass
class Layout:
    root: str
    fs: pafs.FileSystem
    base: str

    @classmethod
    def open(cls, root: str) -> Layout:
        """The layout of ``root``; an S3 root's endpoint must answer first (a bounded probe,
        once per process: store/reach.py), else one line says it cannot be reached."""
        fs, base = open_root(root)
        layout = cls(root, fs, base)
        if layout.is_s3:
            from mixscope.store import reach

            reach.require(root)
        return layout

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)

    @property
    def is_s3(self) -> bool:
        """An S3 (or S3-compatible) root: single-object PUTs, conditional writes."""
        return isinstance(self.fs, pafs.S3FileSystem)

    def uri(self, path: str) -> str:
        """``path`` as other readers (DuckDB, s3fs) name it: ``s3://bucket/key`` on S3."""
        if self.is_s3 and "://" not in path:
            return "s3://" + path.lstrip("/")
        return path

    def data_dir(self, kind: str, run_id: str) -> str:
        return f"{self.base}/{kind}/run_id={run_id}"

    def data_file(self, kind: str, run_id: str, shard_id: int) -> str:
        return f"{self.data_dir(kind, run_id)}/part-{shard_id:06d}.parquet"

    def stats_dir(self, kind: str, run_id: str) -> str:
        return f"{self.base}/stats/{kind}/run_id={run_id}"

    def shard_file(self, kind: str, run_id: str, shard_id: int) -> str:
        """A shard's file of ``kind``: data (tokens, documents) or a statistics partial."""
        from mixscope.store.schema import STATS

        if kind in STATS:
            return f"{self.stats_dir(kind, run_id)}/_partial/part-{shard_id:06d}.parquet"
        return self.data_file(kind, run_id, shard_id)

    def generation_file(self, kind: str, run_id: str, generation: int) -> str:
        """A new, never reused name for consolidated statistics of ``generation``."""
        tag = uuid.uuid4().hex[:8]
        return f"{self.stats_dir(kind, run_id)}/gen-{generation:06d}-{tag}.parquet"

    def consolidation_dir(self, run_id: str) -> str:
        return f"{self.run_dir(run_id)}/stats"

    def generation_record(self, run_id: str, generation: int) -> str:
        """Consolidation ``generation``'s record (store/generations.py)."""
        return f"{self.consolidation_dir(run_id)}/{generation:06d}.json"

    def run_dir(self, run_id: str) -> str:
        return f"{self.base}/_mixscope/runs/{run_id}"

    def runs_dir(self) -> str:
        return f"{self.base}/_mixscope/runs"

    def run_record_path(self, run_id: str) -> str:
        """The run record (store/run_record.py)."""
        return f"{self.run_dir(run_id)}/run.json"

    def plan_path(self, run_id: str) -> str:
        """The run's shard plan (corpus/plan.py)."""
        return f"{self.run_dir(run_id)}/plan.json"

    def actors_path(self, run_id: str) -> str:
        """The actor pool's last state (runtime/pool_status.py)."""
        return f"{self.run_dir(run_id)}/actors.json"

    def lock_path(self, run_id: str) -> str:
        """The local run lock's file (runtime/run_lock.py: ``flock``)."""
        return f"{self.run_dir(run_id)}/driver.lock"

    def run_lease_folder(self, run_id: str) -> str:
        """Where an object-store root's run lock lives, as a URI (store/lease.py)."""
        return self._root_uri(f"_mixscope/runs/{run_id}")

    def checkpoints_dir(self) -> str:
        """The per-checkpoint state records (checkpoints/state.py)."""
        return f"{self.base}/_mixscope/checkpoints"

    def checkpoint_state_path(self, checkpoint_id: str) -> str:
        return f"{self.checkpoints_dir()}/{checkpoint_id}.json"

    def checkpoint_lease_folder(self) -> str:
        """Where the checkpoint leases live: a local folder, or a URI (store/lease.py)."""
        if self.is_local:
            return f"{self.checkpoints_dir()}/leases"
        return self._root_uri("_mixscope/checkpoints/leases")

    def _root_uri(self, sub: str) -> str:
        """``sub`` under the root as a URI, the root's query (``?endpoint_override=…``) kept
        at the end."""
        base, _, query = self.root.partition("?")
        return f"{base.rstrip('/')}/{sub}" + (f"?{query}" if query else "")

    def commits_dir(self, run_id: str) -> str:
        return f"{self.run_dir(run_id)}/commits"

    def commit_file(self, run_id: str, shard_id: int) -> str:
        return f"{self.commits_dir(run_id)}/{shard_id:06d}.json"

    def failures_dir(self, run_id: str) -> str:
        return f"{self.run_dir(run_id)}/failures"

    def failure_file(self, run_id: str, shard_id: int) -> str:
        return f"{self.failures_dir(run_id)}/{shard_id:06d}.json"

    def relative(self, path: str) -> str:
        """``path`` relative to the root, as commit records store it (a root can be moved)."""
        prefix = self.base.rstrip("/") + "/"
        return path[len(prefix) :] if path.startswith(prefix) else path

    def absolute(self, path: str) -> str:
        """A path from a commit record, under this root (absolute ones from old records too)."""
        if path.startswith("/") or "://" in path:
            return path
        return f"{self.base}/{path}"

    # -- small atomic primitives -------------------------------------------------------

    def write_bytes_atomic(self, path: str, data: bytes | pa.Buffer) -> None:
        """Write to a hidden temporary name in the same folder, then rename over ``path``.

        S3: one PUT under the final name, atomic by itself (a rename there would be a copy
        and a delete, neither atomic nor cheaper); no folder markers are created.
        """
        if self.is_s3:
            with self.fs.open_output_stream(path) as out:
                out.write(data)
            return
        self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        tmp = temp_name(path)
        try:
            with self.fs.open_output_stream(tmp) as out:
                out.write(data)
            self.fs.move(tmp, path)
        except BaseException:  # e.g. disk full: no half-written temporary stays behind
            with contextlib.suppress(OSError):
                self.fs.delete_file(tmp)
            raise

    def write_json(self, path: str, obj: Any) -> None:
        self.write_bytes_atomic(path, json.dumps(obj, indent=1, sort_keys=True).encode())

    def write_json_exclusive(self, path: str, obj: Any) -> bool:
        """Create ``path`` with ``obj`` unless it exists; False if someone else created it.

        Local roots: a complete temporary file hard-linked to the name (atomic, exclusive).
        S3: a conditional PUT (``If-None-Match: *``), atomic and exclusive where the
        endpoint honours it. Other object stores: checked, then written (best effort).
        """
        data = json.dumps(obj, indent=1, sort_keys=True).encode()
        if self.is_s3:
            from mixscope.store import objectstore

            return objectstore.put_if_absent(self.root, path, data)
        if not self.is_local:
            if self.read_json(path) is not None:
                return False
            self.write_bytes_atomic(path, data)
            return True
        import os

        folder, name = path.rsplit("/", 1)
        os.makedirs(folder, exist_ok=True)
        tmp = f"{folder}/.{name}.{uuid.uuid4().hex[:8]}.tmp"
        try:  # the temporary goes whatever fails, its own write included (disk full)
            with open(tmp, "wb") as f:
                f.write(data)
            os.link(tmp, path)
        except FileExistsError:
            return False
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        return True

    def read_json(self, path: str) -> Any | None:
        """The record at ``path``; None if there is none; ``CorruptRecordError`` if it is
        not valid JSON (truncated or overwritten after it was written)."""
        try:
            with self.fs.open_input_stream(path) as f:
                data = f.read()
        except FileNotFoundError:
            return None
        except OSError as exc:  # some filesystems raise OSError for missing files
            if "not found" in str(exc).lower() or "no such file" in str(exc).lower():
                return None
            raise
        try:
            return json.loads(data.decode())
        except ValueError:
            where = self.relative(path)
            raise CorruptRecordError(f"{where}: not valid JSON (truncated?)") from None

    def list_files(self, folder: str, suffix: str = "") -> list[str]:
        selector = pafs.FileSelector(folder, allow_not_found=True)
        infos = self.fs.get_file_info(selector)
        names = [i.path for i in infos if i.type == pafs.FileType.File]
        return sorted(
            p for p in names if p.endswith(suffix) and not p.rsplit("/", 1)[-1].startswith(".")
        )

    def list_dirs(self, folder: str) -> list[str]:
        selector = pafs.FileSelector(folder, allow_not_found=True)
        return sorted(
            i.base_name
            for i in self.fs.get_file_info(selector)
            if i.type == pafs.FileType.Directory
        )

    def delete(self, path: str) -> None:
        if self.is_s3:  # a plain DELETE: pyarrow's would leave a folder marker behind
            from mixscope.store import objectstore

            objectstore.delete(self.root, path)
            return
        try:
            self.fs.delete_file(path)
        except FileNotFoundError:
            pass

    def read_table(self, path: str) -> pa.Table:
        import pyarrow.parquet as pq

        return pq.read_table(path, filesystem=self.fs)
