"""A fault-injecting proxy for the cluster bus, with no change to the server.

Every node's bus listens on ``127.0.0.1:port+10000``. Node *i* is given an alias
address ``127.0.1.(i+1)`` (all of 127.0.0.0/8 is loopback on Linux) and the cluster
is joined with ``CLUSTER MEET 127.0.1.(i+1) port_i``, so every peer reaches node *i*
at its alias, where this proxy listens and forwards to the real bus port.

A bus connection carries frames one way, from the node that opened it (its outbound
link) to the node it reaches. The proxy decodes the frames (``codec.bus.FrameReader``;
the header ``[type, sender_id, sender_port, ...]`` names the sender, also for a BATCH)
to learn the sending node, then opens the upstream connection *from the sender's
alias*: the receiving node sees its peer at the alias, so what it learns by MEET and
gossip keeps traffic on the proxies.

Per ordered pair (src, dst) the proxy can drop every frame (a partition), drop a
fraction (loss), hold frames back (delay; order on a connection is kept), and cut the
connections (the nodes reconnect with their back-off).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import cast

from ..codec.bus import BusMessage, BusProtocolError, FrameReader, encode_frame

log = logging.getLogger("disquepy.chaos.proxy")

Pair = tuple[int, int]  # (src, dst) node indexes, a direction of traffic

MAX_PENDING = 20_000  # frames held for one connection (delay, connect in progress)


def alias(i: int) -> str:
    """The loopback alias peers use to reach node i."""
    return f"127.0.1.{i + 1}"


class ProxyStats:
    __slots__ = ("forwarded", "dropped_partition", "dropped_loss", "delayed", "cut",
                 "refused", "connections")

    def __init__(self) -> None:
        self.forwarded = self.dropped_partition = self.dropped_loss = 0
        self.delayed = self.cut = self.refused = self.connections = 0

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.__slots__}


class _Up(asyncio.Protocol):
    """Upstream side: the proxy's connection to the real bus port of dst."""

    def __init__(self, pipe: _Pipe) -> None:
        self.pipe = pipe

    def connection_lost(self, exc: Exception | None) -> None:
        self.pipe.close()

    def data_received(self, data: bytes) -> None:
        pass  # a bus never answers on an inbound connection


class _Pipe(asyncio.Protocol):
    """One bus connection some node opened to dst's alias, and its upstream."""

    def __init__(self, proxy: BusProxy, dst: int) -> None:
        self.proxy = proxy
        self.dst = dst
        self.src: int | None = None
        self.down: asyncio.Transport | None = None  # transport from the sending node
        self.up: asyncio.Transport | None = None  # transport to dst's bus
        self.connecting = False
        self.reader = FrameReader()
        self.pending: deque[tuple[float, bytes]] = deque()  # (due loop time, frame bytes)
        self.timer: asyncio.TimerHandle | None = None
        self.closed = False

    # -------------------------------------------------------------- downstream
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.down = cast(asyncio.Transport, transport)  # a stream server's: a Transport
        self.proxy.pipes.add(self)
        self.proxy.stats.connections += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self.close()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.reader.feed(data)
        proxy = self.proxy
        while True:
            try:
                msg = self.reader.gets()
            except BusProtocolError as e:
                log.warning("bad frame to node %d: %s", self.dst, e)
                self.close()
                return
            if msg is False:
                return
            if self.src is None:
                src = proxy.port_index.get(msg[2]) if type(msg[2]) is int else None
                if src is None or src == self.dst:
                    log.warning("frame to node %d from unknown sender port %r", self.dst, msg[2])
                    self.close()
                    return
                self.src = src
            if not proxy.route(self, msg):
                if self.closed:
                    return
                continue
            self._queue(encode_frame(msg), proxy.delay_of(self.src, self.dst))

    # ----------------------------------------------------------------- forward
    def _queue(self, frame: bytes, delay: float) -> None:
        loop = asyncio.get_running_loop()
        if delay > 0:
            self.proxy.stats.delayed += 1
        if len(self.pending) >= MAX_PENDING:
            log.warning("pipe %s->%s: %d frames held, cutting", self.src, self.dst, MAX_PENDING)
            self.close()
            return
        self.pending.append((loop.time() + delay, frame))
        if self.up is None:
            if not self.connecting:
                self.connecting = True
                loop.create_task(self._connect())
            return
        self._pump()

    async def _connect(self) -> None:
        proxy = self.proxy
        loop = asyncio.get_running_loop()
        assert self.src is not None  # _queue runs once the first frame named the sender
        try:
            up, _ = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _Up(self), "127.0.0.1", proxy.bus_ports[self.dst],
                    local_addr=(alias(self.src), 0),
                ),
                3.0,
            )
        except (TimeoutError, OSError):
            self.close()  # dst is down: the sender sees its link fail and retries
            return
        if self.closed:
            up.close()
            return
        self.up = up
        self._pump()

    def _pump(self) -> None:
        self.timer = None
        if self.closed or self.up is None:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        out = []
        pending = self.pending
        while pending and pending[0][0] <= now:
            out.append(pending.popleft()[1])
        if out:
            self.proxy.stats.forwarded += len(out)
            self.up.writelines(out)
        if pending and self.timer is None:
            self.timer = loop.call_at(pending[0][0], self._pump)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.proxy.pipes.discard(self)
        if self.timer is not None:
            self.timer.cancel()
        self.pending.clear()
        for t in (self.down, self.up):
            if t is not None:
                t.abort()


class BusProxy:
    """Proxies for every node's bus, and the fault rules they apply."""

    def __init__(self, ports: list[int], rng: random.Random, offset: int = 10000) -> None:
        self.ports = list(ports)
        self.bus_ports = [p + offset for p in ports]
        self.port_index = {p: i for i, p in enumerate(ports)}
        self.rng = rng  # per-frame loss draws (timing-dependent: not part of the replay)
        self.blocked: set[Pair] = set()  # (src, dst) pairs that drop every frame
        self.reset_pairs: set[Pair] = set()  # blocked pairs whose connections are also refused
        self.loss: float = 0.0
        self.delays: dict[Pair, float] = {}  # (src, dst) -> seconds
        self.pipes: set[_Pipe] = set()
        self.servers: list[asyncio.Server] = []
        self.stats = ProxyStats()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        for i, bp in enumerate(self.bus_ports):
            srv = await loop.create_server(partial(_Pipe, self, i), alias(i), bp)
            self.servers.append(srv)

    def close(self) -> None:
        for srv in self.servers:
            srv.close()
        for p in list(self.pipes):
            p.close()

    # ------------------------------------------------------------------ rules
    def route(self, pipe: _Pipe, msg: BusMessage) -> bool:
        """Whether to forward this frame (False: drop it, maybe closing the pipe)."""
        key = (pipe.src, pipe.dst)
        if key in self.blocked:
            if key in self.reset_pairs:
                self.stats.refused += 1
                pipe.close()
            self.stats.dropped_partition += 1
            return False
        if self.loss and self.rng.random() < self.loss:
            self.stats.dropped_loss += 1
            return False
        return True

    def delay_of(self, src: int, dst: int) -> float:
        return self.delays.get((src, dst), 0.0)

    def partition(self, pairs: set[Pair], reset: bool) -> None:
        """Drop every frame between these ordered pairs; ``reset`` also cuts their
        connections now and refuses new ones until the heal."""
        self.blocked = set(pairs)
        self.reset_pairs = set(pairs) if reset else set()
        if reset:
            self.cut(lambda p: (p.src, p.dst) in self.blocked)

    def heal_partition(self) -> None:
        self.blocked = set()
        self.reset_pairs = set()

    def cut(self, which: Callable[[_Pipe], bool] | None = None) -> int:
        """Abort the connections ``which(pipe)`` selects (all by default)."""
        n = 0
        for p in list(self.pipes):
            if which is None or which(p):
                p.close()
                n += 1
        self.stats.cut += n
        return n

    def cut_node(self, i: int) -> int:
        return self.cut(lambda p: p.src == i or p.dst == i)

    def heal(self) -> None:
        """Every rule off (connections stay as they are)."""
        self.heal_partition()
        self.loss = 0.0
        self.delays = {}
