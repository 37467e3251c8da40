"""What an executor reports to the driver, one event per shard outcome."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal


@dataclass
class ShardEvent:
    kind: Literal["done", "retry", "failed"]
    shard_id: int
    attempt: int  # 1-based attempt that produced this event
    result: dict[str, Any] | None = None  # for "done": the worker's description of its files
    error: str | None = None  # for "retry" / "failed"
