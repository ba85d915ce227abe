"""Fault injection: what goes wrong, when, drawn from the run's fault RNG.

Steady faults are set once per run (loss and duplication rates, delay jitter with a
long tail and reordering, clock offsets and drift). Episodes start at exponentially
spaced times while the faulty phase lasts and end on their own: partitions (random
halves, one node isolated, or a bridge node that sees both sides; links reset,
frames queued, or a silent blackhole), crashes (a process kill, or a power loss that
drops unsynced AOF records) followed by a restart, clogged links, loss bursts.
``stop`` ends everything: the network heals and crashed nodes restart.

Episodes are numbered from 1 in the order they are drawn; a schedule can leave some
out (``skip``, for shrinking): its own random draws are still made, so the episodes
after it come from the same random stream (the run itself may take another course).
"""

from __future__ import annotations

import heapq
import random
from typing import TYPE_CHECKING

from .clock import NodeClock
from .network import PARTITION_MODES, Partition

if TYPE_CHECKING:
    from .world import World

# mean gap between episode starts, ms
MEAN_GAP_MS = {"partition": 9000, "crash": 8000, "clog": 6000, "loss": 12000}
INF = float("inf")


class FaultInjector:
    __slots__ = (
        "kinds",
        "rng",
        "n",
        "counts",
        "events",
        "seq",
        "running",
        "max_down",
        "pending_restart",
        "partition_end",
        "skip",
        "episodes",
    )

    def __init__(
        self,
        kinds: frozenset[str],
        rng: random.Random,
        n: int,
        skip: frozenset[int] = frozenset(),
    ) -> None:
        self.kinds = kinds
        self.rng = rng
        self.n = n
        self.counts = {
            k: 0
            for k in ("loss", "dup", "delay", "partition", "crash", "crash_power", "clog", "skew")
        }
        self.events: list[tuple[int, int, str, tuple[object, ...]]] = []  # (time, seq, action, args)
        self.seq = 0
        self.running = False
        self.max_down = max(1, (n - 1) // 2)
        self.pending_restart: dict[int, int] = {}  # node -> restart time
        self.partition_end = 0
        self.skip = skip  # episode numbers drawn but not injected (shrinking)
        self.episodes = 0  # episodes drawn so far

    # -------------------------------------------------------------- steady
    def make_clocks(self, origin: int) -> list[NodeClock]:
        clocks = []
        for _ in range(self.n):
            if "skew" in self.kinds:
                off = self.rng.randint(-1500, 1500)
                ppm = self.rng.randint(-300, 300)
                self.counts["skew"] += 1
                clocks.append(NodeClock(origin, off, ppm))
            else:
                clocks.append(NodeClock(origin))
        return clocks

    def skew_tolerance(self, clocks: list[NodeClock], elapsed: int) -> int:
        """How far apart two node clocks can be after ``elapsed`` ms."""
        offs = [c.offset for c in clocks]
        ppm = max(abs(c.ppm) for c in clocks)
        return max(offs) - min(offs) + 2 * ppm * elapsed // 1_000_000 + 2

    def start(self, world: World, now: int) -> None:
        net = world.net
        rng = self.rng
        if "loss" in self.kinds:
            net.loss = rng.uniform(0.002, 0.03)
        if "dup" in self.kinds:
            net.dup = rng.uniform(0.002, 0.02)
        if "delay" in self.kinds:
            net.mean_ms = rng.uniform(2, 25)
            net.tail_p = rng.uniform(0.005, 0.03)
            net.fifo = False
        self.running = True
        for kind, gap in MEAN_GAP_MS.items():
            if kind in self.kinds:
                self._at(now + int(rng.expovariate(1 / gap)), kind, ())

    def _at(self, t: int, action: str, args: tuple[object, ...]) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, action, args))

    def next_time(self) -> float:
        return self.events[0][0] if self.events else INF

    # ------------------------------------------------------------ episodes
    def fire(self, world: World) -> None:
        t, _, action, args = heapq.heappop(self.events)
        getattr(self, "_" + action)(world, t, *args)

    def _episode(self) -> bool:
        """Number the episode being drawn; False if the schedule leaves it out (its
        random draws are made all the same, so the others stay as they were)."""
        self.episodes += 1
        return self.episodes not in self.skip

    def _again(self, kind: str, t: int) -> None:
        if self.running:
            self._at(t + 1 + int(self.rng.expovariate(1 / MEAN_GAP_MS[kind])), kind, ())

    def _partition(self, world: World, t: int) -> None:
        rng = self.rng
        self._again("partition", t)
        if world.net.partition is not None or self.n < 2:
            return
        order = list(range(self.n))
        rng.shuffle(order)
        shape = rng.choice(("halves", "isolate", "bridge") if self.n >= 3 else ("isolate",))
        side = [0] * self.n
        if shape == "isolate":
            side[order[0]] = 1
        else:
            k = rng.randint(1, self.n - 1)
            for i in order[:k]:
                side[i] = 1
            if shape == "bridge":
                side[order[-1]] = -1
                if len({s for s in side if s >= 0}) < 2:
                    side[order[0]] = 1 - side[order[1]]
        p = Partition(side, rng.choice(PARTITION_MODES), shape)
        if not self._episode():
            rng.randint(1000, 12_000)  # the draw the episode makes
            return
        self.counts["partition"] += 1
        world.set_partition(p)
        end = t + rng.randint(1000, 12_000)
        self._at(end, "heal", ())

    def _heal(self, world: World, t: int) -> None:
        world.set_partition(None)

    def _crash(self, world: World, t: int) -> None:
        rng = self.rng
        self._again("crash", t)
        alive = [i for i in range(self.n) if world.nodes[i] is not None]
        if self.n - len(alive) >= self.max_down or not alive:
            return
        victim = rng.choice(alive)
        power = rng.random() < 0.5
        if not self._episode():
            rng.randint(300, 8000)  # the restart delay the episode draws
            return
        self.counts["crash"] += 1
        if power:
            self.counts["crash_power"] += 1
        world.crash(victim, power)
        at = t + rng.randint(300, 8000)
        self.pending_restart[victim] = at
        self._at(at, "restart", (victim,))

    def _restart(self, world: World, t: int, i: int) -> None:
        if world.nodes[i] is None:
            self.pending_restart.pop(i, None)
            world.restart(i)

    def _clog(self, world: World, t: int) -> None:
        rng = self.rng
        self._again("clog", t)
        if self.n < 2:
            return
        until = t + rng.randint(500, 6000)
        extra = rng.randint(200, 3000)
        a = rng.randrange(self.n)
        if rng.random() < 0.5:  # one direction of one link
            b = rng.choice([i for i in range(self.n) if i != a])
            links = [(a, b)]
        else:  # everything to and from one node
            links = [(a, b) for b in range(self.n) if b != a]
            links += [(b, a) for b in range(self.n) if b != a]
        if not self._episode():
            return
        for key in links:
            world.net.clogs[key] = (until, extra)
        self.counts["clog"] += 1

    def _loss(self, world: World, t: int) -> None:
        rng = self.rng
        self._again("loss", t)
        net = world.net
        base = net.loss
        burst = rng.uniform(0.1, 0.5)
        end = t + rng.randint(300, 3000)
        if not self._episode():
            return
        net.loss = burst
        self._at(end, "loss_end", (base,))

    def _loss_end(self, world: World, t: int, base: float) -> None:
        if self.running:
            world.net.loss = base

    def stop(self, world: World) -> None:
        """Faults off: heal, unclog, calm the network, restart every crashed node."""
        self.running = False
        self.events.clear()
        self.pending_restart.clear()
        world.net.calm()
        world.set_partition(None)
        for i in range(self.n):
            if world.nodes[i] is None:
                world.restart(i)

    def finish_counts(self, world: World) -> dict[str, int]:
        st = world.net.stats
        out = dict(self.counts)
        out["loss"] = st.lost
        out["dup"] = st.duplicated
        out["delay"] = st.tail_delayed
        return out
