"""Is a checkpoint folder complete? Config, every weight file, no marker, and quiet.

Complete means: ``config.json`` present; the weights present — a single weight file, or
every shard named in a ``*.index.json`` weight map; no temporary or in-progress marker
(``*.tmp``, ``*.part``, ``*.incomplete``, ``*.lock``, ``IN_PROGRESS``…); and nothing in it
modified for ``quiet_seconds`` (a file still growing is not done).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "tf_model.h5", "flax_model.msgpack")
INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
MARKER_SUFFIXES = (".tmp", ".temp", ".part", ".partial", ".incomplete", ".lock", ".inprogress")
MARKER_NAMES = ("IN_PROGRESS", "in_progress", ".in_progress", "_SAVING", ".saving", "INCOMPLETE")


def incomplete_reason(
    folder: str | Path, quiet_seconds: float, now: float | None = None
) -> str | None:
    """Why the checkpoint is not (yet) complete, or None when it is."""
    root = Path(folder)
    if not (root / "config.json").is_file():
        return "no config.json"
    files = [p for p in root.rglob("*") if p.is_file()]
    for p in files:
        if p.name in MARKER_NAMES or p.name.lower().endswith(MARKER_SUFFIXES):
            return f"in-progress marker {p.relative_to(root)}"
    index = next((root / i for i in INDEX_FILES if (root / i).is_file()), None)
    if index is not None:
        try:
            weight_map = json.loads(index.read_text()).get("weight_map", {})
        except (OSError, ValueError):
            return f"unreadable {index.name}"
        missing = sorted({f for f in weight_map.values() if not (root / f).is_file()})
        if missing:
            return f"missing weight shard {missing[0]}" + (
                f" (+{len(missing) - 1})" if len(missing) > 1 else ""
            )
    elif not any((root / w).is_file() for w in WEIGHT_FILES):
        return "no weight file"
    newest = max(p.stat().st_mtime for p in files)
    age = (now if now is not None else time.time()) - newest
    if age < quiet_seconds:
        return f"modified {age:.0f}s ago (quiet period {quiet_seconds:g}s)"
    return None
