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
        self.folder = Path(root).expanduser().resolve() / "_mixscope" / "checkpoints"

    @property
    def lease_folder(self) -> Path:
        return self.folder / "leases"

    def path(self, key: str) -> Path:
        return self.folder / f"{checkpoint_id(key)}.json"

    def get(self, key: str) -> dict[str, Any]:
        try:
            return json.loads(self.path(key).read_text())
        except (FileNotFoundError, ValueError):
            return {}

    def put(self, key: str, record: dict[str, Any]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        record = {**record, "key": key, "updated_at": time.time()}
        path = self.path(key)
        write_text(path, json.dumps(record, indent=1, sort_keys=True))

    def all(self) -> list[dict[str, Any]]:
        if not self.folder.is_dir():
            return []
        out = []
        for p in sorted(self.folder.glob("*.json")):
            try:
                out.append(json.loads(p.read_text()))
            except ValueError:
                continue
        return out
