"""What an executor reports to the driver, one event per shard outcome."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mixscope.runtime.shard_result import ShardResult


@dataclass
class ShardEvent:
    kind: Literal["done", "retry", "failed"]
    shard_id: int
    attempt: int  # 1-based attempt that produced this event
    result: ShardResult | None = None  # for "done": the worker's files and counts
    error: str | None = None  # for "retry" / "failed"
