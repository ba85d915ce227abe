"""The simulated cluster bus: frames in flight, delays, loss, duplication, partitions.

Frames are the real bus frames (``codec.bus.encode_frame``), queued in a heap of
``(deliver_at, seq, src, dst, dst_incarnation, frame)``; ``seq`` makes the order total
and the run deterministic. Without the ``delay`` fault each directed link is FIFO (as
a TCP connection is); with it, frames get random delays with a long tail and may
overtake each other.

While a node's link to a peer is down (peer crashed, or a partition that resets
connections) the sender's bus queues frames for that peer, as the real bus does, and
sends them when the link comes back (to whichever incarnation of the peer is up by
then); the queue is bounded, dropping the oldest. A frame in flight is lost when its
destination crashed or restarted since it was sent (the connection was reset), or when
the two nodes are partitioned at delivery time.
"""

from __future__ import annotations

import heapq
import random
from collections import deque

# one frame in flight: (deliver_at, seq, src, dst, dst_incarnation, frame)
Flight = tuple[int, int, int, int, int, bytes]

BACKLOG_MAX = 5000  # frames queued per directed link while it is down

# partition modes: how the cut looks to the nodes
DROP = "drop"  # links go down, frames sent across are dropped (like DEBUG BUS-DROP)
HOLD = "hold"  # links go down, the bus queues frames until the partition heals
BLACKHOLE = "blackhole"  # links stay up, frames silently vanish
PARTITION_MODES = (DROP, HOLD, BLACKHOLE)


class Partition:
    """Nodes on different sides cannot talk; a bridge node (side -1) talks to all."""

    __slots__ = ("side", "mode", "shape")

    def __init__(self, side: list[int], mode: str, shape: str) -> None:
        self.side = side
        self.mode = mode
        self.shape = shape

    def cut(self, a: int, b: int) -> bool:
        sa, sb = self.side[a], self.side[b]
        return sa != sb and sa >= 0 and sb >= 0

    def __repr__(self) -> str:
        return f"<Partition {self.shape} {self.mode} {self.side}>"


class NetStats:
    __slots__ = (
        "sent",
        "delivered",
        "lost",
        "duplicated",
        "tail_delayed",
        "clogged",
        "dropped_partition",
        "dropped_reset",
        "held",
        "held_overflow",
        "no_route",
    )

    def __init__(self) -> None:
        self.sent = 0
        self.delivered = 0
        self.lost = 0
        self.duplicated = 0
        self.tail_delayed = 0
        self.clogged = 0
        self.dropped_partition = 0
        self.dropped_reset = 0
        self.held = 0
        self.held_overflow = 0
        self.no_route = 0

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}


class Network:
    __slots__ = (
        "rng",
        "heap",
        "seq",
        "fifo",
        "last_at",
        "loss",
        "dup",
        "mean_ms",
        "tail_p",
        "tail_ms",
        "clogs",
        "backlog",
        "partition",
        "stats",
    )

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.heap: list[Flight] = []
        self.seq = 0
        self.fifo = True
        self.last_at: dict[tuple[int, int], int] = {}  # (src, dst) -> latest scheduled delivery (FIFO links)
        self.loss = 0.0
        self.dup = 0.0
        self.mean_ms = 1.0  # exponential jitter on top of 1 ms
        self.tail_p = 0.0
        self.tail_ms: tuple[int, int] = (100, 1200)
        self.clogs: dict[tuple[int, int], tuple[int, int]] = {}  # (src, dst) -> (until, extra ms)
        self.backlog: dict[tuple[int, int], deque[bytes]] = {}  # (src, dst) -> deque of frames
        self.partition: Partition | None = None
        self.stats = NetStats()

    def calm(self) -> None:
        """Faults off: a healthy LAN (what the run ends with)."""
        self.loss = self.dup = self.tail_p = 0.0
        self.mean_ms = 1.0
        self.fifo = True
        self.clogs.clear()
        self.partition = None

    # ------------------------------------------------------------ topology
    def cut(self, a: int, b: int) -> bool:
        p = self.partition
        return p is not None and p.cut(a, b)

    def link_possible(self, a: int, b: int) -> bool:
        """Would a connection from a to b be up? (A blackhole keeps links up.)"""
        p = self.partition
        return p is None or p.mode == BLACKHOLE or not p.cut(a, b)

    def drops_when_cut(self, a: int, b: int) -> bool:
        p = self.partition
        return p is not None and p.mode == DROP and p.cut(a, b)

    # ------------------------------------------------------------- sending
    def _delay(self, now: int, src: int, dst: int) -> int:
        rng = self.rng
        d = 1 + int(rng.expovariate(1.0 / self.mean_ms))
        if self.tail_p and rng.random() < self.tail_p:
            d += rng.randint(*self.tail_ms)
            self.stats.tail_delayed += 1
        if self.clogs:
            c = self.clogs.get((src, dst))
            if c is not None:
                if c[0] > now:
                    d += c[1]
                    self.stats.clogged += 1
                else:
                    del self.clogs[(src, dst)]
        return d

    def transmit(self, now: int, src: int, dst: int, dst_inc: int, frame: bytes) -> None:
        st = self.stats
        st.sent += 1
        rng = self.rng
        if self.loss and rng.random() < self.loss:
            st.lost += 1
            return
        copies = 1
        if self.dup and rng.random() < self.dup:
            copies = 2
            st.duplicated += 1
        for _ in range(copies):
            at = now + self._delay(now, src, dst)
            if self.fifo:
                key = (src, dst)
                last = self.last_at.get(key, 0)
                if at < last:
                    at = last
                self.last_at[key] = at
            self.seq += 1
            heapq.heappush(self.heap, (at, self.seq, src, dst, dst_inc, frame))

    def hold(self, src: int, dst: int, frame: bytes) -> None:
        q = self.backlog.get((src, dst))
        if q is None:
            q = self.backlog[(src, dst)] = deque()
        q.append(frame)
        self.stats.held += 1
        if len(q) > BACKLOG_MAX:
            q.popleft()
            self.stats.held_overflow += 1

    def take_backlog(self, src: int, dst: int) -> deque[bytes]:
        return self.backlog.pop((src, dst), None) or deque()

    def forget_sender(self, src: int) -> None:
        """The sender crashed: what its bus had queued is gone with the process."""
        for key in [k for k in self.backlog if k[0] == src]:
            del self.backlog[key]

    def next_time(self) -> float:
        return self.heap[0][0] if self.heap else float("inf")

    def pop(self) -> Flight:
        return heapq.heappop(self.heap)
