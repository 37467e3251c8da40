"""Which nodes may get new actors: a node whose actors die is backed off, then given up.

An actor that dies (its process, or the whole node: spot preemption, a drained GPU node)
counts against its node; a shard that merely raises does not (that is the shard's input,
see ``RetryPolicy``). After the k-th death in a row a node gets no new actor for
``backoff · 2^(k-1)`` seconds; after ``max_failures`` in a row it is given up for the rest
of the job and reported (``lost``), so a node that keeps failing is not handed shards
forever. A shard finished on a node resets its count. Ray-free: the pool asks it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class NodeHealth:
    max_failures: int = 3
    backoff: float = 5.0
    failures: dict[str, int] = field(default_factory=dict)  # node → deaths in a row
    until: dict[str, float] = field(default_factory=dict)  # node → backed off until
    lost: dict[str, str] = field(default_factory=dict)  # node → why it was given up / died
    deaths: dict[str, int] = field(default_factory=dict)  # node → actor deaths in all

    def failed(self, node: str, why: str, now: float | None = None) -> None:
        now = time.time() if now is None else now
        self.deaths[node] = self.deaths.get(node, 0) + 1
        k = self.failures.get(node, 0) + 1
        self.failures[node] = k
        self.until[node] = now + self.backoff * 2 ** (k - 1)
        if k >= self.max_failures:
            self.lost[node] = f"gave up after {k} actor deaths in a row: {why}"

    def dead(self, node: str, why: str) -> None:
        """The cluster says the node is gone (``ray.nodes()``: not alive)."""
        self.lost.setdefault(node, why)

    def succeeded(self, node: str) -> None:
        self.failures.pop(node, None)
        self.until.pop(node, None)
        if node in self.lost and self.lost[node].startswith("gave up"):
            del self.lost[node]

    def usable(self, node: str, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        return node not in self.lost and self.until.get(node, 0.0) <= now
