"""What the actor pool is doing, for ``mixscope status --actors``: ``runs/<run>/actors.json``.

Per actor: its node, state (starting, idle, busy, released, dead), the shards it holds,
shards and tokens done, tokens/s over its busy time, its start-up and model-load seconds
(a starting actor shows the shard reserved for it, ``actor_pool.py``).
Per node: alive or lost (and why), its actors. Per job: how long Ray took to start, when
the first actor was ready and the first shard done and, once the job ends, the
actor-seconds left idle at its end (the tail). Written atomically
(``Layout.write_json``: temporary name, then rename) at most every ``EVERY`` seconds and
at the end, by the driver's process only; readers never see half a file. Reading it is
``mixscope/status.py`` (``read_pool_status``, ``pool_tables``): status is a view.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from mixscope.store.layout import Layout

if TYPE_CHECKING:  # pragma: no cover
    from mixscope.runtime.actor_pool import ActorPool

EVERY = 2.0


class PoolStatus:
    def __init__(self, root: str, run_id: str, pool: ActorPool, ray_start_seconds: float):
        self.layout = Layout.open(root)
        self.path = self.layout.actors_path(run_id)
        self.pool = pool
        self.started = time.time()
        self.last = 0.0
        self.summary: dict[str, Any] = {"ray_start_s": ray_start_seconds}

    def finished(self, end: float) -> None:
        self.summary["seconds"] = round(end - self.started, 3)
        self.summary["tail_idle_actor_s"] = round(self.pool.tail_idle_seconds(end), 3)

    def snapshot(self) -> dict[str, Any]:
        pool = self.pool
        actors = [a.row() for a in pool.actors]
        nodes = []
        for node, info in sorted(pool.nodes.items()):
            mine = [a for a in actors if a["node"] == node]
            lost = pool.health.lost.get(node) or ("" if info.get("alive") else "not alive")
            if not mine and not lost:
                continue
            nodes.append(
                {
                    "node": node,
                    "address": info.get("address", ""),
                    "alive": bool(info.get("alive")),
                    "lost": lost,
                    "actors": len(mine),
                    "actor_deaths": pool.health.deaths.get(node, 0),
                    "resources": {
                        k: v for k, v in info.get("resources", {}).items() if "node:" not in k
                    },
                }
            )
        ready = [a.ready_at - a.created for a in pool.actors if a.ready_at]
        ready_at = [a.ready_at for a in pool.actors if a.ready_at]
        return {
            **self.summary,
            "updated_at": time.time(),
            "requested_bundles": pool.requested,
            "first_actor_ready_s": round(min(ready), 3) if ready else None,
            # from the pool's start: the first readiness reply, the first shard's end
            "first_ready_at_s": self._since(min(ready_at) if ready_at else None),
            "first_shard_done_at_s": self._since(pool.first_done),
            "actors": actors,
            "nodes": nodes,
            "lost_nodes": sorted(pool.health.lost),
        }

    def _since(self, t: float | None) -> float | None:
        return None if t is None else round(t - self.started, 3)

    def write(self, force: bool = False) -> None:
        if not force and time.time() - self.last < EVERY:
            return
        self.last = time.time()
        try:
            self.layout.write_json(self.path, self.snapshot())
        except OSError:  # status is a view: a full disk must not stop the job here
            pass
