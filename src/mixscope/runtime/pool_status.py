"""What the actor pool is doing, for ``mixscope status --actors``: ``runs/<run>/actors.json``.

Per actor: its node, state (starting, idle, busy, released, dead), the shard it works on,
shards and tokens done, tokens/s over its busy time, its start-up and model-load seconds
(a starting actor shows the shard reserved for it, ``actor_pool.py``).
Per node: alive or lost (and why), its actors. Per job: how long Ray took to start, when
the first actor was ready and the first shard done and, once the job ends, the
actor-seconds left idle at its end (the tail). Written atomically
(``Layout.write_json``: temporary name, then rename) at most every ``EVERY`` seconds and
at the end, by the driver's process only; readers never see half a file.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from mixscope.store.layout import Layout

if TYPE_CHECKING:  # pragma: no cover
    from mixscope.runtime.actor_pool import ActorPool

EVERY = 2.0
FILE = "actors.json"


class PoolStatus:
    def __init__(self, root: str, run_id: str, pool: ActorPool, ray_start_seconds: float):
        self.layout = Layout.open(root)
        self.path = f"{self.layout.run_dir(run_id)}/{FILE}"
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


def read_pool_status(root: str, run_id: str) -> dict[str, Any] | None:
    """The last ``actors.json`` of a run, or None (a run of the local executor has none)."""
    layout = Layout.open(root)
    data = layout.read_json(f"{layout.run_dir(run_id)}/{FILE}")
    return data if isinstance(data, dict) else None


def pool_tables(state: dict[str, Any]) -> list[tuple[list[str], list[list[Any]]]]:
    """``actors.json`` as (headers, rows) tables: actors, then nodes (``status --actors``)."""
    actor_cols = ["actor", "node", "state", "shard", "shards", "tokens", "tok/s", "start_s"]
    actor_cols += ["load_s", "error"]
    cut = {"node": 12, "error": 60}
    actors = [[str(a.get(c, ""))[: cut[c]] if c in cut else a.get(c, "") for c in actor_cols]
              for a in state.get("actors", [])]  # fmt: skip
    node_cols = ["node", "address", "alive", "actors", "actor_deaths", "lost"]
    nodes = [[n.get(c, "") for c in node_cols] for n in state.get("nodes", [])]
    return [(actor_cols, actors), (node_cols, nodes)]
