"""The elastic actor pool of the Ray executor: where actors run, how many, and the demand.

**Demand.** The pool states what it wants with ``ray.autoscaler.sdk.request_resources``:
one bundle (the actor's CPUs / GPUs) per actor it wants, ``min(max_workers, shards in
flight + queued)``. Why that and not pending actors: the request is acted on at once
(bypassing the autoscaler's upscaling-speed limits, as a batch job wants), it is released
in one call (``bundles=[]``) the moment the remaining shards no longer need it, and no
model is loaded by an actor that Ray places late, after its work is gone. Actors are only
created where a poll of the live nodes (``ray.nodes()``, available resources per node)
shows room, pinned to that node (``NodeAffinitySchedulingStrategy``, hard), so the pool
chooses nodes itself and can keep away from a failing one (``node_health.py``). The cost:
``request_resources`` is a floor on the cluster's total size, so on a cluster that other
jobs fill the autoscaler may judge it met while no node has room for us; the pool then
runs on what it has and grows when room appears. Without an autoscaler (the embedded
local Ray, a fixed cluster) the request is inert.

**Growth and loss.** Between results (every ``POLL`` seconds at most) the pool polls the
nodes: new room → new actors (up to the want); a node no longer alive → its actors are
gone and it is reported lost; once the queue is empty, idle actors beyond ``min_workers``
(and one spare while shards still run, for a retry) are released, so a finished tail
gives its GPUs back to the autoscaler.

**The first shard travels with the actor.** Each actor is created with the shard at the
head of the queue reserved for it (``Actor.first_shard``, a constructor argument), so its worker
reads and tokenizes that shard while its model loads (``worker.py``) instead of after the
readiness reply; the reply then gets it that shard at once. Why reserve at creation and
not submit ``process`` behind ``startup()``: the model still loads in the constructor, so
readiness, and a model that cannot load (``started``: the job fails once, no shard's
retries used), mean what they meant; and a reserved shard is not an attempt — an actor
that dies or is dropped before it is ready hands its shard back to the head of the queue
with its attempt count unchanged, and a ready actor left without work takes the
reservation of one still loading (``next_shard``), so a slow start never holds a shard
back from an idle actor. ``OVERLAP_FIRST_SHARD = False`` is the start-up before this
(no reservation: a benchmark knob, ``benchmarks/startup.py``).

**Shards in flight.** An actor holds up to ``runtime.shards_in_flight`` shards (``Actor.
in_flight``; the executor fills every actor to one before any to two, ``open``), so its
model starts the next shard while the last one's files are written (``worker.py``). Its
state is busy while it holds any. One death is one death: every shard it held comes back
as an error of its own, but only the first that finds the actor live charges its node
(``died``); a result that arrives from an actor already dead (its ``finish`` ended just
before the kill) counts as that shard's success, not the node's. Busy seconds count the
time an actor held at least one shard, once however many it held.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mixscope.runtime.node_health import NodeHealth

if TYPE_CHECKING:  # pragma: no cover
    from mixscope.corpus.plan import Shard

#: seconds between polls of the cluster's nodes while shards run
POLL = 1.0
#: benchmark knob (benchmarks/startup.py): False creates actors without a first shard, so
#: reading and tokenizing start only after the model loaded (the start-up before overlap)
OVERLAP_FIRST_SHARD = True

#: a queued shard and the attempt it will be
Item = tuple["Shard", int]


@dataclass
class Actor:
    handle: Any
    node: str
    created: float
    ready_at: float | None = None
    info: dict[str, Any] = field(default_factory=dict)
    state: str = "starting"  # starting | idle | busy | released | dead
    in_flight: dict[int, float] = field(default_factory=dict)  # shard id → when handed out
    first_shard: Item | None = None  # reserved at creation, prefetched while the model loads
    turns: int = 0  # shards handed out so far: the next one's turn (worker.py)
    busy_since: float | None = None  # from when busy time is not yet in busy_seconds
    last_end: float | None = None  # when its last shard ended
    shards: int = 0
    tokens: int = 0
    busy_seconds: float = 0.0
    error: str = ""

    def row(self) -> dict[str, Any]:
        rate = self.tokens / self.busy_seconds if self.busy_seconds > 0 else 0.0
        return {
            "actor": self.handle._actor_id.hex()[:12],
            "node": self.node,
            "host": self.info.get("host", ""),
            "pid": self.info.get("pid", ""),
            "state": self.state,
            "shard": self._shard_text(),
            "shards": self.shards,
            "tokens": self.tokens,
            "tok/s": round(rate),
            "start_s": round(self.ready_at - self.created, 3) if self.ready_at else "",
            "load_s": self.info.get("load_seconds", ""),
            "error": self.error,
        }

    def _shard_text(self) -> str | int:
        if len(self.in_flight) == 1:
            return next(iter(self.in_flight))
        if self.in_flight:
            return ", ".join(map(str, self.in_flight))
        return "" if self.first_shard is None else f"{self.first_shard[0].shard_id} (reserved)"

    def alive(self) -> bool:
        return self.state in ("starting", "idle", "busy")


class ActorPool:
    def __init__(
        self,
        ray: Any,
        actor_cls: Any,
        options: dict[str, Any],
        args: tuple[Any, ...],
        bundle: dict[str, float],
        health: NodeHealth,
        min_workers: int,
        max_workers: int,
        queue: deque[Item] | None = None,
    ) -> None:
        self.ray, self.actor_cls, self.options, self.args = ray, actor_cls, options, args
        self.queue: deque[Item] = deque() if queue is None else queue  # the executor's
        self.bundle = {k: v for k, v in bundle.items() if v > 0}
        self.health = health
        self.min_workers, self.max_workers = min_workers, max_workers
        self.actors: list[Actor] = []
        self.starting: dict[Any, Actor] = {}  # startup() ref → actor
        self.requested = 0  # bundles last asked of the autoscaler
        self.nodes: dict[str, dict[str, Any]] = {}  # node id → {alive, resources, ...}
        self.last_poll = 0.0
        self.ever_ready = False
        self.first_done: float | None = None  # when the job's first shard ended

    # -- the cluster ------------------------------------------------------------------
    def _available(self) -> dict[str, dict[str, float]]:
        """node id → resources free now (the GCS view; our starting actors subtracted)."""
        try:
            from ray._private.state import available_resources_per_node

            free = {k: dict(v) for k, v in available_resources_per_node().items()}
        except Exception:  # a Ray without it: totals minus what our actors hold
            free = {n: dict(d["resources"]) for n, d in self.nodes.items() if d["alive"]}
            for a in self.live():
                if a.state != "starting":
                    self._take(free.setdefault(a.node, {}), 1)
        for a in self.starting.values():  # placed a moment ago: maybe not in the view yet
            self._take(free.setdefault(a.node, {}), 1)
        return free

    def _take(self, free: dict[str, float], n: int) -> None:
        for k, v in self.bundle.items():
            free[k] = free.get(k, 0.0) - n * v

    def _fits(self, free: dict[str, float]) -> bool:
        return all(free.get(k, 0.0) >= v - 1e-9 for k, v in self.bundle.items())

    def poll_nodes(self) -> None:
        """Refresh the node table; actors of nodes that died are gone."""
        self.last_poll = time.time()
        for n in self.ray.nodes():
            node_id = n["NodeID"]
            entry = self.nodes.setdefault(node_id, {"joined": time.time()})
            resources = {k: float(v) for k, v in (n.get("Resources") or {}).items()}
            entry.update(
                alive=bool(n["Alive"]),
                # a dead node reports no resources: keep what it had, so status says which
                # node was lost (its custom resources name it)
                resources=resources or entry.get("resources", {}),
                address=n.get("NodeManagerAddress", ""),
            )
            if not n["Alive"]:
                mine = [a for a in self.live() if a.node == node_id]
                if mine or node_id in self.health.failures:
                    self.health.dead(node_id, "node died")
                for a in mine:
                    if a.state in ("starting", "idle"):
                        self._drop(a, "dead", "node died")

    # -- actors -----------------------------------------------------------------------
    def live(self) -> list[Actor]:
        return [a for a in self.actors if a.state in ("starting", "idle", "busy")]

    def idle(self) -> list[Actor]:
        return [a for a in self.actors if a.state == "idle"]

    def _create(self, node: str) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        first_shard = self.queue.popleft() if OVERLAP_FIRST_SHARD and self.queue else None
        handle = self.actor_cls.options(
            **self.options, scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)
        ).remote(*self.args, None if first_shard is None else first_shard[0])
        actor = Actor(handle, node, time.time(), first_shard=first_shard)
        self.actors.append(actor)
        self.starting[handle.startup.remote()] = actor

    def _drop(self, actor: Actor, state: str, error: str = "") -> None:
        # what it holds comes back as errors of its own (the executor's refs): kept till then
        actor.state, actor.error = state, error
        if actor.first_shard is not None:  # not an attempt: back to the head, attempt unchanged
            self.queue.appendleft(actor.first_shard)
            actor.first_shard = None
        for ref, a in list(self.starting.items()):
            if a is actor:
                del self.starting[ref]
        try:
            self.ray.kill(actor.handle, no_restart=True)
        except Exception:
            pass

    def started(self, ref: Any) -> Actor | None:
        """The readiness reply of a starting actor: idle now, or dropped (its node charged).
        Raises the constructor's error when no actor has ever started (a model that cannot
        load fails once, not once per node)."""
        actor = self.starting.pop(ref)
        try:
            actor.info = self.ray.get(ref)
        except (self.ray.exceptions.RayActorError, self.ray.exceptions.RayTaskError) as exc:
            init_failed = getattr(exc, "actor_init_failed", False) or isinstance(
                exc, self.ray.exceptions.RayTaskError
            )
            self._drop(actor, "dead", str(exc).strip().splitlines()[-1][:300] if str(exc) else "")
            if init_failed and not self.ever_ready:
                raise
            self.health.failed(actor.node, "actor did not start")
            return None
        actor.state, actor.ready_at = "idle", time.time()
        self.ever_ready = True
        return actor

    def reserved(self) -> int:
        """Shards reserved by actors not yet given them (neither queued nor in flight)."""
        return sum(1 for a in self.live() if a.first_shard is not None)

    def open(self, depth: int) -> Iterator[Actor]:
        """Ready actors with room, fewest shards held first: every one that holds none, then
        every one that holds one, … below ``depth`` (``runtime.shards_in_flight``); an
        actor handed a shard meanwhile is offered again at the next level."""
        for level in range(depth):
            for a in [a for a in self.actors if len(a.in_flight) == level]:
                if a.state in ("idle", "busy"):  # not released or dead since the list
                    yield a

    def next_shard(self, actor: Actor) -> Item | None:
        """The shard for this ready actor: its reservation, else the queue's head, else (for
        an idle actor) the reservation of an actor still starting (prefetched there in
        vain, but no shard waits on a model load while an actor is idle; a busy actor
        has work: it takes no reservation)."""
        if actor.first_shard is not None:
            item, actor.first_shard = actor.first_shard, None
            return item
        if self.queue:
            return self.queue.popleft()
        if actor.in_flight:
            return None
        for other in self.starting.values():
            if other.first_shard is not None:
                item, other.first_shard = other.first_shard, None
                return item
        return None

    def handed(self, actor: Actor, shard_id: int) -> int:
        """``shard_id`` goes to ``actor``: it is busy; the shard's turn on it (worker.py)."""
        now = time.time()
        if not actor.in_flight:
            actor.busy_since = now
        actor.in_flight[shard_id] = now
        actor.state = "busy"
        turn, actor.turns = actor.turns, actor.turns + 1
        return turn

    def _ended(self, actor: Actor, shard_id: int) -> None:
        """A shard the actor held came back (done, raised or lost with it)."""
        now = time.time()
        actor.in_flight.pop(shard_id, None)
        if actor.busy_since is not None:  # busy time counted once, however many it held
            actor.busy_seconds += now - actor.busy_since
            actor.busy_since = now if actor.in_flight else None
        actor.last_end = now
        if actor.state == "busy" and not actor.in_flight:
            actor.state = "idle"

    def died(self, actor: Actor, shard_id: int, why: str) -> None:
        """A task of the actor ended in its death: the first such news charges its node
        and forgets the actor; the other shards it held only come back (one death)."""
        self._ended(actor, shard_id)
        if actor.alive():
            self._drop(actor, "dead", why)
            self.health.failed(actor.node, why)

    def raised(self, actor: Actor, shard_id: int) -> None:
        """A shard raised on a live actor (its input's fault, not the node's)."""
        self._ended(actor, shard_id)

    def finished(self, actor: Actor, shard_id: int, tokens: int) -> None:
        self._ended(actor, shard_id)
        actor.tokens += tokens
        actor.shards += 1
        self.first_done = self.first_done or time.time()
        if actor.alive():  # not a success of a node whose actor died after this result
            self.health.succeeded(actor.node)

    def usable(self, actor: Actor) -> bool:
        """May this ready actor get a shard? Not on a node that was given up (released if
        it holds none; else it finishes what it holds)."""
        if actor.node in self.health.lost:
            if not actor.in_flight:
                self._drop(actor, "released", "node given up")
            return False
        return True

    def busy(self) -> int:
        """Actors that hold at least one shard."""
        return sum(1 for a in self.actors if a.state == "busy")

    # -- size and demand --------------------------------------------------------------
    def reconcile(self, want: int, queue_empty: bool, force: bool = False) -> None:
        """Grow towards ``want`` actors (shards in flight + queued; reserved ones are added
        here) where room is, state the demand, release extras."""
        if not force and time.time() - self.last_poll < POLL:
            return
        self.poll_nodes()
        want = min(want + self.reserved(), self.max_workers)  # reserved: neither queued nor run
        have = len(self.live())
        if have < want:
            free = self._available()
            for node, room in sorted(free.items()):
                info = self.nodes.get(node)
                if info is None or not info.get("alive") or not self.health.usable(node):
                    continue
                while have < want and self._fits(room):
                    self._create(node)
                    self._take(room, 1)
                    have += 1
        self._demand(want if have < want else 0)
        if queue_empty:  # the tail: idle actors give their node back, but for min_workers
            # and one spare while shards run (a shard whose node dies is retried at once)
            busy = self.busy()
            extra = len(self.live()) - max(self.min_workers, busy + 1 if busy else 0)
            for a in self.idle():
                if extra <= 0:
                    break
                if a.first_shard is not None:  # ready a moment ago: its shard comes next
                    continue
                self._drop(a, "released")
                extra -= 1

    def _demand(self, bundles: int) -> None:
        if bundles == self.requested:
            return
        try:
            from ray.autoscaler.sdk import request_resources

            request_resources(bundles=[dict(self.bundle)] * bundles)
        except Exception:  # no autoscaler state to write to: nothing to ask
            return
        self.requested = bundles

    def shutdown(self) -> None:
        self._demand(0)
        for a in self.live():
            self._drop(a, "released")

    def tail_idle_seconds(self, end: float) -> float:
        """Actor-seconds idle at the job's end: for each actor that started, from its last
        shard's end (or its start) to ``end``, released early or not (a measure of the
        shard order, ``benchmarks/elastic.py``)."""
        total = 0.0
        for a in self.actors:
            if a.ready_at is None:
                continue
            since = a.last_end or a.ready_at
            total += max(0.0, end - since)
        return total
