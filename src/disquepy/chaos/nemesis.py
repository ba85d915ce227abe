"""The nemesis: a fault schedule drawn from the seed, then played against the cluster.

The whole schedule is drawn before the run starts (``schedule``), so a seed always
injects the same faults at the same offsets; only the real processes' timing differs
between replays. Kinds:

kill
    ``kill -9`` of one node, restarted after a pause (its AOF, synced before every
    reply with ``appendfsync always``, brings its jobs back). At most ``max_down``
    nodes are down at a time.
pause
    ``SIGSTOP`` then ``SIGCONT``: a node that stops answering without closing anything.
partition
    the bus between two sides is cut: random halves, one node isolated, or a bridge
    node that talks to both sides which cannot talk to each other. Frames are dropped
    silently (blackhole) or the connections are reset and refused (reset).
delay
    frames to and from one node (or on every link) held back by a fixed latency.
loss
    a fraction of all frames dropped.
cut
    every bus connection of one node aborted (the nodes reconnect).

Every kind is drawn at least once in a run, the first time within the first half
of the fault phase (a kill or pause may wait a little for a node to be back).
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import random
from dataclasses import dataclass
from typing import Any

from .cluster import Cluster
from .proxy import BusProxy, Pair

log = logging.getLogger("disquepy.chaos.nemesis")

KINDS = ("kill", "pause", "partition", "delay", "loss", "cut")
MEAN_GAP_S = {"kill": 6.0, "pause": 12.0, "partition": 7.0, "delay": 9.0, "loss": 10.0,
              "cut": 8.0}


def parse_kinds(spec: str) -> tuple[str, ...]:
    """``all``, ``none`` or a comma list of :data:`KINDS`."""
    out: list[str] = []
    for w in spec.replace(" ", "").split(","):
        if w in ("", "none"):
            continue
        if w == "all":
            out.extend(k for k in KINDS if k not in out)
        elif w in KINDS:
            if w not in out:
                out.append(w)
        else:
            raise ValueError(f"unknown fault kind {w!r} (choose from all, none, {', '.join(KINDS)})")
    return tuple(k for k in KINDS if k in out)


@dataclass(frozen=True, slots=True)
class Fault:
    at: float  # seconds from the start of the fault phase
    kind: str
    end: float  # when it is undone (== at for instant faults)
    # what and how (see _draw): node indexes, a partition's shape and pairs, a delay,
    # a loss rate, as the kind has them: no one static type, hence Any
    params: tuple[Any, ...]

    def describe(self) -> str:
        return f"{self.at:6.2f}s {self.kind} {self.params} until {self.end:.2f}s"


def _partition_pairs(
    rng: random.Random, n: int
) -> tuple[str, tuple[int, ...], tuple[int, ...], int | None, frozenset[Pair]]:
    """(shape, blocked ordered pairs)."""
    order = list(range(n))
    rng.shuffle(order)
    shape = rng.choice(("halves", "isolate", "bridge") if n >= 3 else ("isolate",))
    if shape == "isolate":
        a, b = {order[0]}, set(order[1:])
        bridge = None
    else:
        k = rng.randint(1, n - 1 if shape == "halves" else n - 2)
        a, b = set(order[:k]), set(order[k:])
        bridge = None
        if shape == "bridge":
            bridge = order[-1]
            b.discard(bridge)
    pairs = {(x, y) for x in a for y in b} | {(y, x) for x in a for y in b}
    return shape, tuple(sorted(a)), tuple(sorted(b)), bridge, frozenset(pairs)


def schedule(seed: int, n: int, duration: float, kinds: tuple[str, ...],
             max_down: int) -> list[Fault]:
    """The faults of a run, in time order."""
    rng = random.Random(f"{seed}:nemesis")
    faults: list[Fault] = []
    for kind in kinds:
        t = rng.uniform(0.05, 0.5) * duration
        busy_until = 0.0
        while t < duration * 0.95:
            f = _draw(rng, kind, t, n, duration)
            if kind in ("partition", "delay", "loss") and t < busy_until:
                pass  # one episode of these at a time
            else:
                faults.append(f)
                busy_until = f.end
            t += 0.2 + rng.expovariate(1 / MEAN_GAP_S[kind])
    faults.sort(key=lambda f: (f.at, KINDS.index(f.kind)))
    return _limit_down(faults, n, max_down, duration)


def _draw(rng: random.Random, kind: str, t: float, n: int, duration: float) -> Fault:
    if kind == "kill":
        return Fault(t, kind, min(t + rng.uniform(0.3, 5.0), duration), (rng.randrange(n),))
    if kind == "pause":
        return Fault(t, kind, min(t + rng.uniform(0.5, 4.0), duration), (rng.randrange(n),))
    if kind == "partition":
        shape, a, b, bridge, pairs = _partition_pairs(rng, n)
        mode = rng.choice(("blackhole", "reset"))
        end = min(t + rng.uniform(1.5, 8.0), duration)
        return Fault(t, kind, end, (shape, mode, a, b, bridge, pairs))
    if kind == "delay":
        ms = rng.randint(20, 400)
        target = rng.randrange(-1, n)  # -1: every link
        return Fault(t, kind, min(t + rng.uniform(1.0, 6.0), duration), (target, ms))
    if kind == "loss":
        return Fault(t, kind, min(t + rng.uniform(0.5, 4.0), duration),
                     (round(rng.uniform(0.05, 0.4), 3),))
    if kind == "cut":
        return Fault(t, kind, t, (rng.randrange(n),))
    raise ValueError(kind)


def _limit_down(faults: list[Fault], n: int, max_down: int, duration: float) -> list[Fault]:
    """Keep at most ``max_down`` nodes killed or paused at once: a kill or pause that
    hits a node already out goes to another node; with none free it waits until one
    is back (dropped if that is past the fault phase)."""
    out = []
    out_until: dict[int, float] = {}  # node -> end of its kill / pause
    heap = [(f.at, k, f) for k, f in enumerate(faults)]
    heapq.heapify(heap)
    seq = len(faults)
    while heap:
        _, _, f = heapq.heappop(heap)
        if f.kind in ("kill", "pause"):
            busy = {i: e for i, e in out_until.items() if e > f.at}
            if len(busy) >= max_down:
                at = min(busy.values()) + 0.1
                if at + (f.end - f.at) <= duration:
                    seq += 1
                    moved = Fault(at, f.kind, at + (f.end - f.at), f.params)
                    heapq.heappush(heap, (at, seq, moved))
                continue
            node = f.params[0]
            if node in busy:
                node = min(i for i in range(n) if i not in busy)
                f = Fault(f.at, f.kind, f.end, (node,))
            out_until[node] = f.end
        out.append(f)
    return out


class Nemesis:
    """Plays a schedule against a Cluster and its BusProxy; ``stop`` undoes it all."""

    def __init__(self, cluster: Cluster, proxy: BusProxy, faults: list[Fault]) -> None:
        self.cluster = cluster
        self.proxy = proxy
        self.faults = faults
        self.counts = {k: 0 for k in KINDS}
        self.partitions = {"halves": 0, "isolate": 0, "bridge": 0}
        self.restart_errors: list[str] = []
        self.kills: list[tuple[float, int]] = []  # (loop time, node index) of every kill -9

    async def run(self, t0: float) -> None:
        """Inject the schedule, ``t0`` being the loop time of offset 0. Cancel to stop."""
        loop = asyncio.get_running_loop()
        events = [(f.at, 0, i, f) for i, f in enumerate(self.faults)]
        events += [(f.end, 1, i, f) for i, f in enumerate(self.faults) if f.end > f.at]
        events.sort(key=lambda e: (e[0], e[1], e[2]))
        for at, undo, _, f in events:
            delay = t0 + at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if undo:
                await self._end(f)
            else:
                await self._begin(f)

    async def _begin(self, f: Fault) -> None:
        c, px = self.cluster, self.proxy
        log.info("fault: %s", f.describe())
        self.counts[f.kind] += 1
        if f.kind == "kill":
            c.kill(f.params[0])
            self.kills.append((asyncio.get_running_loop().time(), f.params[0]))
        elif f.kind == "pause":
            c.nodes[f.params[0]].pause()
        elif f.kind == "partition":
            shape, mode, _a, _b, _bridge, pairs = f.params
            self.partitions[shape] += 1
            px.partition(set(pairs), reset=mode == "reset")
        elif f.kind == "delay":
            target, ms = f.params
            n = c.n
            px.delays = {
                (s, d): ms / 1000
                for s in range(n) for d in range(n)
                if s != d and (target < 0 or target in (s, d))
            }
        elif f.kind == "loss":
            px.loss = f.params[0]
        elif f.kind == "cut":
            px.cut_node(f.params[0])

    async def _end(self, f: Fault) -> None:
        c, px = self.cluster, self.proxy
        log.info("undo: %s %s", f.kind, f.params[:1])
        if f.kind == "kill":
            await self._restart(f.params[0])
        elif f.kind == "pause":
            c.nodes[f.params[0]].resume()
        elif f.kind == "partition":
            px.heal_partition()
        elif f.kind == "delay":
            px.delays = {}
        elif f.kind == "loss":
            px.loss = 0.0

    async def _restart(self, i: int) -> None:
        node = self.cluster.nodes[i]
        if node.alive():
            return
        try:
            await self.cluster.start(i)
        except RuntimeError as e:
            self.restart_errors.append(f"node {i}: {e}")
            log.error("restart of node %d failed: %s", i, e)

    async def stop(self) -> None:
        """Heal the network, wake paused nodes, restart killed ones."""
        self.proxy.heal()
        for node in self.cluster.nodes:
            node.resume()
        for i, node in enumerate(self.cluster.nodes):
            if not node.alive():
                await self._restart(i)
