"""Per-checkpoint state kept under the results root: done, failed (with retries), running."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from mixscope.store.atomic import write_text


def checkpoint_id(key: str) -> str:
    return hashlib.blake2b(key.encode(), digest_size=8).hexdigest()


class CheckpointState:
    def __init__(self, root: str) -> None:
        self.uri = root.rstrip("/") if "://" in root else None  # object store: via Layout
        if self.uri is None:
            self.folder = Path(root).expanduser().resolve() / "_mixscope" / "checkpoints"
        else:
            from mixscope.store.layout import Layout

            self.layout = Layout.open(root)

    @property
    def lease_folder(self) -> Path | str:
        if self.uri is not None:
            base, _, query = self.uri.partition("?")
            return f"{base}/_mixscope/checkpoints/leases" + (f"?{query}" if query else "")
        return self.folder / "leases"

    def path(self, key: str) -> Path:
        return self.folder / f"{checkpoint_id(key)}.json"

    def _remote_path(self, key: str) -> str:
        return f"{self.layout.base}/_mixscope/checkpoints/{checkpoint_id(key)}.json"

    def get(self, key: str) -> dict[str, Any]:
        if self.uri is not None:
            return self.layout.read_json(self._remote_path(key)) or {}
        try:
            return json.loads(self.path(key).read_text())
        except (FileNotFoundError, ValueError):
            return {}

    def put(self, key: str, record: dict[str, Any]) -> None:
        if self.uri is not None:
            record = {**record, "key": key, "updated_at": time.time()}
            self.layout.write_json(self._remote_path(key), record)
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        record = {**record, "key": key, "updated_at": time.time()}
        path = self.path(key)
        write_text(path, json.dumps(record, indent=1, sort_keys=True))

    def all(self) -> list[dict[str, Any]]:
        if self.uri is not None:
            folder = f"{self.layout.base}/_mixscope/checkpoints"
            found = (self.layout.read_json(p) for p in self.layout.list_files(folder, ".json"))
            return [r for r in found if r is not None]
        if not self.folder.is_dir():
            return []
        out = []
        for p in sorted(self.folder.glob("*.json")):
            try:
                out.append(json.loads(p.read_text()))
            except ValueError:
                continue
        return out
