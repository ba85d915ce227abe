"""The cluster bus transport: one outbound TCP link per peer, frames in on inbound ones.

Like Redis Cluster, a node *sends* on the links it opened to its peers and *receives*
on the connections its peers opened to it (port + ``cluster-port-offset``). The bus
moves pre-encoded frames (``codec.bus.encode_frame``) and decodes inbound ones with a
``FrameReader`` per connection; it never interprets a message except for the sender
id (``msg[1]``) read by the fault-injection filter.

Outbound links
    ``sync_links`` says which peers we want and where they are. A link is *connecting*,
    *up* or *down* (waiting for its next attempt). Failed attempts and lost links are
    retried with exponential back-off and jitter (``BACKOFF_MIN`` doubling to
    ``BACKOFF_MAX``) for as long as the peer stays wanted; a link that stayed up for
    ``BACKOFF_STABLE`` seconds starts again from ``BACKOFF_MIN`` when it is lost.
    ``on_link(node_id, True/False)`` and one log line mark each up/down transition.

Sending
    ``send`` appends the frame to the link's deque (O(1)); the frames queued during a
    loop iteration go out together from one ``call_soon`` callback (``writelines``),
    so a burst costs one syscall, not one per frame. While a link is connecting, down
    or paused by its transport (``pause_writing``), frames stay queued up to
    ``SEND_QUEUE_MAX_BYTES`` / ``SEND_QUEUE_MAX_FRAMES``; past the bound the oldest are
    dropped and counted: the cluster protocol retries lost messages. Frames already
    handed to a transport that then fails are lost too, for the same reason.

Inbound
    Every complete frame goes to ``on_frame(msg, peer_ip)``. A malformed frame (or a
    callback that raises on it) closes that connection with a warning, at most one
    line per peer address every ``REFUSAL_LOG_INTERVAL``; a peer can never make the
    reader hold more than ``max_frame`` + 4 bytes, nor more of a frame than the node
    has memory left for (``room``). At most ``max_connections`` inbound connections
    are open at once. Those not authenticated yet (in their TLS handshake, or their
    cluster-secret one) are also counted in a ``limits.Pending``: at most
    ``max_unauthenticated`` of them, ``max_unauthenticated_per_ip`` per address; one
    more closes the oldest (logged), and each has ``HANDSHAKE_TIMEOUT`` seconds.

Authentication (``secret``: ``cluster-secret``; ``ssl_server``/``ssl_client``:
``tls-cluster``)
    With a secret, both ends of a connection run ``busauth.Handshake`` (version 2)
    before any frame: each proves the secret over both nonces, both node IDs and the
    direction, and over the TLS channel's ``tls-unique`` when there is TLS. The
    connector checks that the node it reached is the node it meant (``expected_id``:
    None for a node being met by address). On plain TCP the frames then travel in
    MAC'd records (``busauth.Sealer``/``Unsealer``); over TLS, TLS protects them.
    With TLS, ``peer_names`` (``tls-cluster-peer-name``) are glob patterns one of
    which the peer certificate's common name or a DNS name of its subjectAltName must
    match, checked by both ends: a certificate of the same CA issued to a client is
    not a node's. Anything else (a frame without a handshake, another magic or
    version, a wrong MAC, a relayed or reflected handshake, bytes past the handshake,
    ``HANDSHAKE_TIMEOUT`` passing) closes the connection, with one rate-limited
    warning line. The formats are documented in docs/SECURITY.md.

Fault injection
    ``set_drop(node_id, True)`` silently drops frames sent to that node and frames
    received from it (by ``msg[1]``); ``"*"`` drops everything, both ways, and
    ``set_drop("*", False)`` clears every drop rule.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl
from asyncio import sslproto
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from ..codec.bus import MAX_FRAME, BusMessage, BusProtocolError, FrameReader
from ..core.config import glob_match
from .busauth import (
    MAGIC,
    Handshake,
    HandshakeError,
    RecordError,
    Sealer,
    Unsealer,
)
from .limits import Pending
from .log import VERBOSE, RateLimited
from .sockopts import keepalive
from .tls import describe as describe_tls_error

# reconnect back-off, seconds: first retry ~BACKOFF_MIN, doubling up to BACKOFF_MAX,
# each delay jittered by x[0.5, 1.5) (and still capped at BACKOFF_MAX). The cap is
# Disque's: its cron retries a broken link every 100 ms, so a restarted node is linked
# again within ~0.1 s of listening (a 2 s cap left it looking failed for seconds, and
# REPLICATE n refused with NOREPL meanwhile). A refused loopback connect costs ~20 us.
BACKOFF_MIN = 0.02
BACKOFF_MAX = 0.1
# a link lost after being up at least this long retries from BACKOFF_MIN again
BACKOFF_STABLE = 2.0
# a connect attempt that has not completed by then counts as failed
CONNECT_TIMEOUT = 3.0
# per-link bound on frames waiting for a connection or a paused transport
SEND_QUEUE_MAX_BYTES = 64 << 20
SEND_QUEUE_MAX_FRAMES = 100_000
# transport buffer above which asyncio pauses us (we keep frames in our own bounded queue)
WRITE_HIGH_WATER = 1 << 20
# TCP keepalive: probe an idle link after this many seconds (as Redis's tcp-keepalive)
KEEPALIVE_IDLE = 60
LISTEN_BACKLOG = 511
# a connection that has not completed its TLS and cluster-secret handshakes by then is
# closed (both take a round trip or two: milliseconds)
HANDSHAKE_TIMEOUT = 3.0
# at most one log line per peer address and kind of refusal in this many seconds
REFUSAL_LOG_INTERVAL = 10.0
# defaults of cluster-bus-max-connections, -max-unauthenticated and -per-ip
MAX_CONNECTIONS = 1024
MAX_UNAUTHENTICATED = 32
MAX_UNAUTHENTICATED_PER_IP = 16
# a connection holding more than this of a frame not yet complete has the frame's
# announced size counted against the memory the node has left (Bus.room)
_BUDGET_CHECK_AT = 1 << 14
# CLUSTER MEET's probe without a secret: a node with one sends its handshake at once;
# a node without one sends nothing, so this long with nothing received means "none"
PROBE_QUIET = 0.25

ALL = "*"  # set_drop wildcard

_CONNECTING = "connecting"
_UP = "up"
_DOWN = "down"
_CLOSED = "closed"


def _tune_socket(transport: asyncio.BaseTransport) -> None:
    keepalive(transport, KEEPALIVE_IDLE, nodelay=True)


def certificate_names(cert: dict[str, Any]) -> list[str]:
    """The names a peer certificate (``getpeercert()``) goes by: its subject's common
    names, then the DNS names of its subjectAltName."""
    names = [value for rdn in cert.get("subject", ()) for key, value in rdn
             if key == "commonName"]
    names += [value for kind, value in cert.get("subjectAltName", ()) if kind == "DNS"]
    return names


def check_peer_certificate(transport: asyncio.BaseTransport, patterns: list[str]) -> str | None:
    """Why the TLS peer of ``transport`` is not a cluster node (None: it is one): its
    certificate must have a name matching one of ``patterns`` (tls-cluster-peer-name;
    none: any certificate of the CA)."""
    if not patterns:
        return None
    cert = transport.get_extra_info("peercert") or {}
    names = certificate_names(cert)
    if any(glob_match(p, n) for p in patterns for n in names):
        return None
    shown = ", ".join(names[:4]) or "none"
    return (f"its certificate ({shown}) matches no tls-cluster-peer-name: not a cluster "
            "node's")


def channel_binding(transport: asyncio.BaseTransport) -> bytes:
    """The TLS channel's ``tls-unique`` (empty on plain TCP)."""
    sslobj = transport.get_extra_info("ssl_object")
    if sslobj is None:
        return b""
    binding: bytes | None = sslobj.get_channel_binding("tls-unique")
    return binding or b""
class _Link:
    """The outbound link to one peer."""

    __slots__ = (
        "node_id",
        "addr",
        "state",
        "gen",
        "transport",
        "writable",
        "paused",
        "dirty",
        "queue",
        "qbytes",
        "backoff",
        "retry",
        "task",
        "up_since",
        "attempts",
        "overflowing",
        "dropped",
        "sealer",
    )

    def __init__(self, node_id: str, addr: tuple[str, int]) -> None:
        self.node_id = node_id
        self.addr = addr
        self.state = _DOWN
        self.gen = 0  # bumped per connect attempt: stale protocols and tasks see a mismatch
        self.transport: asyncio.Transport | None = None
        self.writable = False  # up and not paused: send may schedule a flush
        self.paused = False
        self.dirty = False  # in Bus._dirty, a flush is scheduled
        self.queue: deque[bytes] = deque()
        self.qbytes = 0
        self.backoff = BACKOFF_MIN
        self.retry: asyncio.TimerHandle | None = None  # the next attempt
        self.task: asyncio.Task[None] | None = None  # the connect attempt in progress
        self.up_since = 0.0
        self.attempts = 0
        self.overflowing = False  # logged once until the queue drains
        self.dropped = 0
        self.sealer: Sealer | None = None  # cluster-secret on plain TCP: MAC'd records


class _OutProtocol(asyncio.Protocol):
    """One connection of an outbound link; the peer only ever sends its half of the
    handshake on it."""

    __slots__ = ("bus", "link", "gen", "hs", "timer")

    def __init__(self, bus: Bus, link: _Link, gen: int) -> None:
        self.bus = bus
        self.link = link
        self.gen = gen
        self.hs: Handshake | None = None  # set while the handshake runs
        self.timer: asyncio.TimerHandle | None = None

    # (a stream's transport: asyncio says BaseTransport)
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.bus._connected(self, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.bus._disconnected(self, exc)

    def data_received(self, data: bytes) -> None:
        hs = self.hs
        if hs is None:
            return  # nothing else is expected back on an outbound link: discard
        try:
            reply = hs.feed(data)
        except HandshakeError as e:
            self.bus._handshake_failed(self, str(e))
            return
        if reply and self.link.transport is not None:
            self.link.transport.write(reply)
        if hs.done:
            self.hs = None
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            link = self.link
            if link.transport is not None and link.transport.get_extra_info(
                    "ssl_object") is None:
                link.sealer = Sealer(hs.frame_key)
            self.bus._link_up(link)

    def pause_writing(self) -> None:
        link = self.link
        if link.gen == self.gen:
            link.paused = True
            link.writable = False

    def resume_writing(self) -> None:
        link = self.link
        if link.gen == self.gen and link.state is _UP:
            link.paused = False
            link.writable = True
            if link.queue:
                self.bus._write_out(link)


def _ssl_protocol(loop: asyncio.AbstractEventLoop) -> type:
    """The TLS protocol of ``loop``'s kind: uvloop's (what its TLS listeners use, in
    Cython; the stdlib's pure-Python one cost the bus over TLS ~15% of its jobs a
    second) or asyncio's."""
    try:
        # (uvloop's stubs leave out its SSLProtocol; mypyc's isolated build has no
        # uvloop at all, hence each code, and unused-ignore for the other case)
        from uvloop.loop import Loop, SSLProtocol  # type: ignore[attr-defined,import-not-found,unused-ignore]
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return sslproto.SSLProtocol
    return SSLProtocol if isinstance(loop, Loop) else sslproto.SSLProtocol


class _TlsAccept(asyncio.Protocol):
    """An inbound bus connection over TLS, until its handshake is done: counted as
    not authenticated from the moment it is accepted (a TLS listener shows a
    connection only once its handshake completed, and loop.start_tls comes too late:
    uvloop reads the ClientHello into the plain protocol first), then handed to its
    _InProtocol."""

    __slots__ = ("bus",)

    def __init__(self, bus: Bus) -> None:
        self.bus = bus

    def connection_made(self, raw: asyncio.Transport) -> None:  # type: ignore[override]
        bus = self.bus
        app = _InProtocol(bus)
        if not app.admit(raw):
            return
        loop = bus.loop
        waiter = loop.create_future()
        tls = _ssl_protocol(loop)(loop, app, bus.ssl_server, waiter, server_side=True,
                                  ssl_handshake_timeout=HANDSHAKE_TIMEOUT)
        app.raw = raw
        raw.set_protocol(tls)
        tls.connection_made(raw)
        waiter.add_done_callback(app.tls_done)


class _InProtocol(asyncio.Protocol):
    """One connection a peer opened to us: frames in, nothing out."""

    __slots__ = ("bus", "transport", "raw", "reader", "ip", "closing", "hs", "timer",
                 "first", "claim", "unsealer", "pending")

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.transport: asyncio.Transport | None = None
        # the TCP transport under TLS, while its handshake runs
        self.raw: asyncio.Transport | None = None
        self.reader = FrameReader(bus.max_frame)
        self.ip = "?"
        self.closing = False
        self.hs: Handshake | None = None  # set while the handshake runs
        self.timer: asyncio.TimerHandle | None = None
        self.first = True  # no byte received yet
        self.claim = 0  # bytes of the big frame being received, counted in bus._claimed
        self.unsealer: Unsealer | None = None  # cluster-secret on plain TCP
        self.pending = False  # in bus.pending (not authenticated yet)

    def admit(self, raw: asyncio.Transport) -> bool:
        """The connection was accepted: count it (False: refused and closed)."""
        bus = self.bus
        peer = raw.get_extra_info("peername")
        self.ip = peer[0] if peer else "?"
        if bus._closed:
            raw.close()
            return False
        _tune_socket(raw)
        if len(bus._inbound) >= bus.max_connections:
            self.transport = raw
            self.refuse(f"too many cluster bus connections ({bus.max_connections}, "
                        "cluster-bus-max-connections)", "limit")
            return False
        bus._inbound.add(self)
        bus.log.debug("Accepting cluster node connection from %s:%s", self.ip,
                      peer[1] if peer else "?")
        if bus.secret is not None or bus.ssl_server is not None:
            self.pending = True
            for old in bus.pending.add(self, self.ip):
                old.pending = False
                old.refuse("closed to make room for a newer connection (more than "
                           f"{bus.max_unauthenticated} not authenticated, or "
                           f"{bus.max_unauthenticated_per_ip} from {old.ip}: "
                           "cluster-bus-max-unauthenticated[-per-ip])", "evicted")
            self.timer = bus.loop.call_later(HANDSHAKE_TIMEOUT, self.refuse,
                                             f"no handshake within {HANDSHAKE_TIMEOUT:g}s")
        return True

    def tls_done(self, waiter: asyncio.Future[None]) -> None:
        """The TLS handshake ended (its callbacks run after connection_made, which
        is called only when it succeeded): on failure, log, count and forget it."""
        if self.transport is not None:
            return
        if not self.closing:
            e = None if waiter.cancelled() else waiter.exception()
            self.refuse("TLS handshake failed: " + (describe_tls_error(e) if e is not None
                                                    else "connection closed"))
        self.authenticated()
        self.bus._inbound.discard(self)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if self.raw is None and not self.admit(transport):  # plain TCP: just accepted
            return
        self.transport = transport
        self.raw = None
        bus = self.bus
        if self.closing:
            transport.close()
            return
        if bus.ssl_server is not None:
            why = check_peer_certificate(transport, bus.peer_names)
            if why is not None:
                self.refuse(why, "certificate")
                return
        if bus.secret is not None:
            self.hs = Handshake(bus.secret, connector=False, myid=bus.myid(),
                                binding=channel_binding(transport))
            transport.write(self.hs.hello())
        else:
            self.authenticated()

    def refuse(self, reason: str, kind: str | None = None) -> None:
        """Close an inbound connection that failed the handshake or a limit, logging
        why (one line per peer address and ``kind`` of refusal per interval)."""
        if self.closing:
            return
        bus = self.bus
        bus._refused_in += 1
        bus.refusals.warning(("in", self.ip, kind or reason),
                             "Refused cluster bus connection from %s: %s", self.ip, reason)
        self.close()

    def authenticated(self) -> None:
        """Out of the handshake (done, or failed): no longer counted as pending."""
        self.hs = None
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.pending:
            self.pending = False
            self.bus.pending.remove(self)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.hs is not None and not self.closing:
            self.refuse("connection closed during the cluster-secret handshake")
        self.authenticated()
        self.close()
        self.bus._inbound.discard(self)
        self.transport = None

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        bus = self.bus
        bus._bytes_in += len(data)
        if self.first:
            self.first = False
            if self.hs is None and data[:4] == MAGIC:
                self.refuse("the peer uses a cluster-secret and this node has none")
                return
        if self.hs is not None:
            hs = self.hs
            try:
                reply = hs.feed(data)
            except HandshakeError as e:
                self.refuse(str(e))
                return
            assert self.transport is not None  # (not closing)
            if reply:
                self.transport.write(reply)
            if not hs.done:
                return
            self.authenticated()
            bus._authenticated_in += 1
            bus.log.log(VERBOSE, "Cluster bus connection from %s (node %.8s) authenticated",
                        self.ip, hs.peer_id)
            if self.transport.get_extra_info("ssl_object") is None:
                self.unsealer = Unsealer(hs.frame_key)
            data = hs.rest
            if not data:
                return
        if self.unsealer is not None:
            try:
                data = self.unsealer.feed(data)
            except RecordError as e:
                self.garbage(str(e), "mac")
                return
            if not data:
                return
        reader = self.reader
        reader.feed(data)
        on_frame = bus.on_frame
        drop = bus._drop  # mutated in place by set_drop, so this stays current
        ip = self.ip
        n = 0
        try:
            while True:
                msg = reader.gets()
                if msg is False:
                    break
                if drop and (ALL in drop or msg[1] in drop):
                    bus._dropped_in += 1
                    continue
                n += 1
                on_frame(msg, ip)
                if self.closing:
                    return
        except BusProtocolError as e:
            self.garbage(str(e))
            return
        except Exception as e:  # (the driver logs the core's own errors, with a traceback)
            self.garbage(f"error handling a frame: {e!r}", "error")
            return
        finally:
            bus._frames_in += n
        claim = reader.pending_frame() if len(reader) > _BUDGET_CHECK_AT else 0
        if claim != self.claim:  # a big frame is arriving in parts: does it fit?
            bus.claim(claim - self.claim)
            self.claim = claim
            room = bus.room()  # (what is claimed is counted as used already)
            if claim and room < 0:
                self.garbage(f"a frame of {claim} bytes does not fit in maxmemory "
                             f"({max(0, room + claim)} bytes left)", "memory")

    def garbage(self, reason: str, kind: str = "frame") -> None:
        """Close a connection that sent what is no frame (or too big a one): counted,
        and logged once per peer address and kind every REFUSAL_LOG_INTERVAL seconds."""
        bus = self.bus
        bus._protocol_errors += 1
        bus.refusals.warning(("garbage", self.ip, kind),
                             "Closing cluster bus connection from %s: %s", self.ip, reason)
        self.close()

    def close(self) -> None:
        if self.claim:
            self.bus.claim(-self.claim)
            self.claim = 0
        if not self.closing:
            self.closing = True
            t = self.transport or self.raw
            if t is not None:
                t.close()


class Bus:
    """The cluster bus of one node. See the module docstring."""

    def __init__(
        self,
        on_frame: Callable[[BusMessage, str], None],
        on_link: Callable[[str, bool], None],
        loop: asyncio.AbstractEventLoop,
        log: logging.Logger,
        *,
        max_frame: int = MAX_FRAME,
        max_queue_bytes: int = SEND_QUEUE_MAX_BYTES,
        max_queue_frames: int = SEND_QUEUE_MAX_FRAMES,
        backlog: int = LISTEN_BACKLOG,
        rng: random.Random | None = None,
        secret: bytes | None = None,
        ssl_server: ssl.SSLContext | None = None,
        ssl_client: ssl.SSLContext | None = None,
        max_connections: int = MAX_CONNECTIONS,
        max_unauthenticated: int = MAX_UNAUTHENTICATED,
        max_unauthenticated_per_ip: int = MAX_UNAUTHENTICATED_PER_IP,
        room: Callable[[], int] | None = None,
        on_claimed: Callable[[int], None] | None = None,
        myid: Callable[[], str] = lambda: "0" * 40,
        expected_id: Callable[[str], str | None] = lambda node_id: node_id,
        peer_names: list[str] | None = None,
    ) -> None:
        self.on_frame = on_frame
        self.on_link = on_link
        self.loop = loop
        self.log = log
        self.max_frame = max_frame
        self.max_queue_bytes = max_queue_bytes
        self.max_queue_frames = max_queue_frames
        self.backlog = backlog
        self._rng = rng or random.Random()
        self.secret = secret or None  # cluster-secret: every link runs Handshake first
        self.ssl_server = ssl_server  # tls-cluster: inbound connections over mutual TLS
        self.ssl_client = ssl_client  # ... and outbound ones
        self.max_connections = max_connections  # inbound, at once
        self.max_unauthenticated = max_unauthenticated  # inbound, in their handshake
        self.max_unauthenticated_per_ip = max_unauthenticated_per_ip
        self.pending: Pending[_InProtocol] = Pending(max_unauthenticated,
                                                     max_unauthenticated_per_ip)
        self.myid = myid  # this node's ID (it changes with CLUSTER RESET HARD)
        # the node ID a link's peer must have: itself, or None for a node being met by
        # address (CLUSTER MEET), whose ID is not known yet
        self.expected_id = expected_id
        self.peer_names = peer_names or []  # tls-cluster-peer-name
        # bytes the node can still take (maxmemory - used_memory): a frame arriving
        # in parts must fit, or its connection is closed before it is all buffered
        self.room = room or (lambda: 1 << 62)
        self._claimed = 0  # bytes of the big frames arriving, all connections together
        self.on_claimed = on_claimed  # told the new total (the node counts it as used)
        self.refusals = RateLimited(log, REFUSAL_LOG_INTERVAL)
        self._servers: list[asyncio.Server] = []
        self._links: dict[str, _Link] = {}
        self._inbound: set[_InProtocol] = set()
        self._drop: set[str] = set()
        self._dirty: list[_Link] = []
        self._flush_handle: asyncio.Handle | None = None
        self._closed = False
        # counters
        self._frames_out = 0
        self._bytes_out = 0
        self._frames_in = 0
        self._bytes_in = 0
        self._dropped_out = 0  # fault injection, outbound
        self._dropped_in = 0  # fault injection, inbound
        self._dropped_overflow = 0
        self._dropped_no_link = 0
        self._connects = 0
        self._reconnects = 0
        self._connect_failures = 0
        self._links_lost = 0
        self._protocol_errors = 0
        self._refused_in = 0  # inbound connections that failed the handshake
        self._authenticated_in = 0
        self._handshake_failures = 0  # outbound ones

    def claim(self, delta: int) -> None:
        self._claimed += delta
        if self.on_claimed is not None:
            self.on_claimed(self._claimed)

    # ------------------------------------------------------------------ listen
    async def listen(self, bind_addrs: list[str], port: int, start_serving: bool = True) -> None:
        """Listen on every bind address; on failure close what was opened and raise.
        With ``start_serving=False`` the port is held (bound, listening) but no peer is
        accepted until :meth:`start_serving`: the node takes its ports before it writes
        any file, and serves once its identity is loaded."""
        servers = []
        try:
            # with TLS, _TlsAccept runs the handshake, so that the connections still
            # in it are counted (and can be closed) as not authenticated yet
            factory = _TlsAccept if self.ssl_server is not None else _InProtocol
            for addr in bind_addrs:
                srv = await self.loop.create_server(
                    lambda: factory(self),
                    addr,
                    port,
                    backlog=self.backlog,
                    reuse_address=True,
                    start_serving=start_serving,
                )
                servers.append(srv)
        except BaseException:
            for srv in servers:
                srv.close()
            raise
        self._servers.extend(servers)

    async def start_serving(self) -> None:
        for srv in self._servers:
            await srv.start_serving()

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """The (ip, port) pairs actually listened on (useful with port 0)."""
        out = []
        for srv in self._servers:
            for sock in srv.sockets or ():
                name = sock.getsockname()
                out.append((name[0], name[1]))
        return out

    # ------------------------------------------------------------------ links
    def sync_links(self, peers: dict[str, tuple[str, int]]) -> None:
        """Make the outbound links exactly ``peers`` (node_id -> (ip, bus_port)).

        New ids get a link (connecting now), ids no longer listed lose theirs (closed
        silently: no ``on_link`` call, their queued frames are discarded), and a link
        whose address changed reconnects to the new one (``on_link(id, False)`` first
        if it was up, then ``True`` when the new connection is made).
        """
        if self._closed:
            return
        links = self._links
        for node_id in [nid for nid in links if nid not in peers]:
            gone = links.pop(node_id)
            self.log.debug("Closing cluster bus link to node %.8s", node_id)
            self._shutdown_link(gone)
            gone.state = _CLOSED
            gone.queue.clear()
            gone.qbytes = 0
        for node_id, (ip, port) in peers.items():
            addr = (ip, int(port))
            link = links.get(node_id)
            if link is None:
                link = links[node_id] = _Link(node_id, addr)
                self._start_connect(link)
            elif link.addr != addr:
                self.log.info("Node %.8s moved to %s:%d: reconnecting", node_id, ip, addr[1])
                was_up = link.state is _UP
                self._shutdown_link(link)
                link.addr = addr
                link.backoff = BACKOFF_MIN
                if was_up:
                    self.loop.call_soon(self._notify, node_id, False)
                self._start_connect(link)

    def _shutdown_link(self, link: _Link) -> None:
        """Forget the link's connection, attempt and timer (any state)."""
        link.gen += 1
        link.writable = False
        link.paused = False
        if link.retry is not None:
            link.retry.cancel()
            link.retry = None
        if link.task is not None:
            link.task.cancel()
            link.task = None
        if link.transport is not None:
            link.transport.close()  # its connection_lost is stale now: ignored
            link.transport = None
        link.state = _DOWN

    def _start_connect(self, link: _Link) -> None:
        link.retry = None
        link.gen += 1
        link.state = _CONNECTING
        link.attempts += 1
        if link.attempts > 1:
            self._reconnects += 1
        link.task = self.loop.create_task(self._connect(link, link.gen))

    async def _connect(self, link: _Link, gen: int) -> None:
        ip, port = link.addr
        try:
            kw: dict[str, Any] = {}
            if self.ssl_client is not None:
                kw = {"ssl": self.ssl_client, "server_hostname": ip,
                      "ssl_handshake_timeout": HANDSHAKE_TIMEOUT}
            await asyncio.wait_for(
                self.loop.create_connection(lambda: _OutProtocol(self, link, gen), ip, port,
                                            **kw),
                CONNECT_TIMEOUT + (HANDSHAKE_TIMEOUT if kw else 0),
            )
        except asyncio.CancelledError:
            if link.gen == gen and not self._closed:
                raise  # not cancelled by us: the loop is going away
        except Exception as e:  # OSError, TimeoutError, a bad address...
            # still connecting: a plain failure. A timeout can also hit an attempt that
            # got connected already: create_connection then closes the transport it made
            # (uvloop without a connection_lost), so that link is broken: reconnect.
            if link.gen == gen and link.state is _UP:
                self._link_broken(link)
            elif link.gen == gen and link.state is _CONNECTING:
                self._connect_failures += 1
                if isinstance(e, ssl.SSLError):  # a real problem, not a node still down
                    self.refusals.warning(
                        ("tls", link.node_id), "TLS with node %.8s at %s:%d failed: %s",
                        link.node_id, ip, port, describe_tls_error(e))
                else:
                    self.log.debug(
                        "Connecting to node %.8s at %s:%d failed: %s",
                        link.node_id,
                        ip,
                        port,
                        e or type(e).__name__,
                    )
                link.state = _DOWN
                self._schedule_retry(link)
        finally:
            if link.gen == gen:
                link.task = None

    def _schedule_retry(self, link: _Link) -> None:
        if self._closed or self._links.get(link.node_id) is not link:
            return
        b = link.backoff
        delay = min(BACKOFF_MAX, b * (0.5 + self._rng.random()))
        link.backoff = min(BACKOFF_MAX, b * 2)
        link.retry = self.loop.call_later(delay, self._start_connect, link)

    def _connected(self, proto: _OutProtocol, transport: asyncio.Transport) -> None:
        link = proto.link
        if link.gen != proto.gen or link.state is not _CONNECTING or self._closed:
            transport.close()  # a stale attempt that completed anyway
            return
        if transport.is_closing():
            # uvloop: the connect timeout fired as the connection completed; this
            # transport is closed already and will never report connection_lost
            self._connect_failures += 1
            link.state = _DOWN
            self._schedule_retry(link)
            return
        _tune_socket(transport)
        with contextlib.suppress(AttributeError, ValueError, NotImplementedError):
            transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        link.transport = transport
        link.sealer = None
        if self.ssl_client is not None:
            why = check_peer_certificate(transport, self.peer_names)
            if why is not None:
                self._handshake_failed(proto, why)
                return
        if self.secret is not None:  # up only once the peer proved the secret
            proto.hs = Handshake(self.secret, connector=True, myid=self.myid(),
                                 expect=self.expected_id(link.node_id),
                                 binding=channel_binding(transport))
            transport.write(proto.hs.hello())
            proto.timer = self.loop.call_later(
                HANDSHAKE_TIMEOUT, self._handshake_failed, proto,
                f"no handshake reply within {HANDSHAKE_TIMEOUT:g}s")
            return
        self._link_up(link)

    def _link_up(self, link: _Link) -> None:
        link.state = _UP
        link.paused = False
        link.writable = True
        link.up_since = self.loop.time()
        self._connects += 1
        ip, port = link.addr
        self.log.info("Connected to node %.8s at %s:%d", link.node_id, ip, port)
        if link.queue:
            self._write_out(link)  # what was queued while connecting, in order
        self._notify(link.node_id, True)

    def _disconnected(self, proto: _OutProtocol, exc: Exception | None) -> None:
        link = proto.link
        if link.gen != proto.gen:
            return  # stale connection (address changed, removed) or already handled
        if proto.hs is not None and link.state is _CONNECTING:
            self._handshake_failed(proto, "connection closed during the cluster-secret "
                                   "handshake (same cluster-secret on both nodes?)")
        elif link.state is _UP:
            self._link_broken(link)

    def _handshake_failed(self, proto: _OutProtocol, reason: str) -> None:
        """The outbound handshake failed: close, log (rate-limited), retry later."""
        link = proto.link
        proto.hs = None
        if proto.timer is not None:
            proto.timer.cancel()
            proto.timer = None
        if link.gen != proto.gen or link.state is not _CONNECTING:
            return
        self._handshake_failures += 1
        self._connect_failures += 1
        ip, port = link.addr
        self.refusals.warning(("out", link.node_id, reason),
                              "Cluster bus handshake with node %.8s at %s:%d failed: %s",
                              link.node_id, ip, port, reason)
        link.gen += 1  # what the closed connection still reports is stale now
        if link.transport is not None:
            link.transport.close()
            link.transport = None
        link.state = _DOWN
        self._schedule_retry(link)

    def _link_broken(self, link: _Link) -> None:
        """An up link lost its connection: down, reconnect with back-off, tell the node."""
        if link.transport is not None and not link.transport.is_closing():
            link.transport.close()
        link.gen += 1  # whatever the old connection still reports is stale now
        link.transport = None
        link.writable = False
        link.paused = False
        link.state = _DOWN
        self._links_lost += 1
        self.log.warning("Connection with node %.8s lost", link.node_id)
        if self.loop.time() - link.up_since >= BACKOFF_STABLE:
            link.backoff = BACKOFF_MIN
        self._schedule_retry(link)
        self._notify(link.node_id, False)

    def _notify(self, node_id: str, up: bool) -> None:
        try:
            self.on_link(node_id, up)
        except Exception:
            self.log.warning(
                "Cluster bus on_link callback failed for node %.8s", node_id, exc_info=True
            )

    # ------------------------------------------------------------------ sending
    def send(self, node_id: str, frame: bytes) -> None:
        """Queue ``frame`` on the link to ``node_id``; written at the end of this loop
        iteration if the link is up, on connect otherwise."""
        if self._drop and (ALL in self._drop or node_id in self._drop):
            self._dropped_out += 1
            return
        link = self._links.get(node_id)
        if link is None:
            self._dropped_no_link += 1
            return
        q = link.queue
        q.append(frame)
        link.qbytes += len(frame)
        if link.qbytes > self.max_queue_bytes or len(q) > self.max_queue_frames:
            self._trim(link)
        if link.writable and not link.dirty:
            link.dirty = True
            self._dirty.append(link)
            if self._flush_handle is None:
                self._flush_handle = self.loop.call_soon(self._flush)

    def flush_now(self) -> None:
        """Write the queued frames now instead of at the end of the iteration (the
        caller runs at the end of it already)."""
        h = self._flush_handle
        if h is not None:
            h.cancel()
            self._flush()

    def send_many(self, node_ids: Iterable[str], frame: bytes) -> None:
        """The same encoded frame to several nodes."""
        send = self.send
        for node_id in node_ids:
            send(node_id, frame)

    def _trim(self, link: _Link) -> None:
        """Drop the oldest frames until the queue is within bounds (keep the newest)."""
        q = link.queue
        max_bytes, max_frames = self.max_queue_bytes, self.max_queue_frames
        n = 0
        while len(q) > 1 and (link.qbytes > max_bytes or len(q) > max_frames):
            link.qbytes -= len(q.popleft())
            n += 1
        self._dropped_overflow += n
        link.dropped += n
        if n and not link.overflowing:
            link.overflowing = True
            self.log.warning(
                "Cluster bus queue to node %.8s full (%s): dropping the oldest frames",
                link.node_id,
                link.state,
            )

    def _flush(self) -> None:
        self._flush_handle = None
        dirty, self._dirty = self._dirty, []
        for link in dirty:
            link.dirty = False
            if link.writable:
                self._write_out(link)

    def _write_out(self, link: _Link) -> None:
        q = link.queue
        n = len(q)
        if not n:
            return
        t = link.transport
        try:
            if t is None or t.is_closing():
                raise RuntimeError("transport closed")
            sealer = link.sealer
            if sealer is not None:
                t.writelines(sealer.seal(q[0] if n == 1 else b"".join(q)))
            elif n == 1:
                t.write(q[0])
            else:
                t.writelines(q)
        except RuntimeError:
            # closed under us (uvloop may close a fresh transport without telling the
            # protocol, and without is_closing() saying so): reconnect, keep the frames
            self._link_broken(link)
            return
        self._frames_out += n
        self._bytes_out += link.qbytes
        q.clear()
        link.qbytes = 0
        link.overflowing = False

    # ------------------------------------------------------------- fault injection
    def set_drop(self, node_id: str, on: bool) -> None:
        """Silently drop frames to and from ``node_id`` (``"*"``: all of them).

        ``set_drop("*", False)`` heals everything: it also clears per-node drops."""
        if on:
            self._drop.add(node_id)
        elif node_id == ALL:
            self._drop.clear()  # in place: inbound protocols hold a reference to the set
        else:
            self._drop.discard(node_id)

    # ------------------------------------------------------------------ state
    def is_up(self, node_id: str) -> bool:
        link = self._links.get(node_id)
        return link is not None and link.state is _UP

    def link_info(self) -> dict[str, dict[str, Any]]:
        """Per outbound link: address, state, queued frames/bytes, overflow drops."""
        return {
            nid: {
                "addr": lk.addr,
                "state": lk.state,
                "queued_frames": len(lk.queue),
                "queued_bytes": lk.qbytes,
                "dropped_overflow": lk.dropped,
            }
            for nid, lk in self._links.items()
        }

    def stats(self) -> dict[str, int]:
        links = self._links.values()
        return {
            "frames_sent": self._frames_out,
            "bytes_sent": self._bytes_out,
            "frames_received": self._frames_in,
            "bytes_received": self._bytes_in,
            "links": len(self._links),
            "links_up": sum(1 for lk in links if lk.state is _UP),
            "inbound_connections": len(self._inbound),
            "unauthenticated_inbound": len(self.pending),
            "queued_frames": sum(len(lk.queue) for lk in links),
            "queued_bytes": sum(lk.qbytes for lk in links),
            "dropped_injected_out": self._dropped_out,
            "dropped_injected_in": self._dropped_in,
            "dropped_overflow": self._dropped_overflow,
            "dropped_no_link": self._dropped_no_link,
            "connects": self._connects,
            "reconnects": self._reconnects,
            "connect_failures": self._connect_failures,
            "links_lost": self._links_lost,
            "protocol_errors": self._protocol_errors,
            "refused_inbound": self._refused_in,
            "authenticated_inbound": self._authenticated_in,
            "handshake_failures": self._handshake_failures,
        }

    # ------------------------------------------------------------------ close
    def close(self) -> None:
        """Stop listening and close every link and inbound connection (no callbacks)."""
        if self._closed:
            return
        self._closed = True
        for srv in self._servers:
            srv.close()
        for link in self._links.values():
            self._shutdown_link(link)
            link.state = _CLOSED
        self._links.clear()
        for proto in list(self._inbound):
            proto.close()
        self._inbound.clear()
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        self._dirty.clear()

    async def probe(self, ip: str, port: int) -> str | None:
        """CLUSTER MEET's check of the bus at ``ip:port`` before the node meets it: why
        that node would refuse this one (or this one it) as a peer, or None when the
        link would work, or when nothing answers (the MEET then goes on, retried as
        for any node that is down, as in Disque). One connection, closed after."""
        kw: dict[str, Any] = {}
        if self.ssl_client is not None:
            kw = {"ssl": self.ssl_client, "server_hostname": ip,
                  "ssl_handshake_timeout": HANDSHAKE_TIMEOUT}
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(ip, port, **kw),
                                                    CONNECT_TIMEOUT + HANDSHAKE_TIMEOUT)
        except ssl.SSLError as e:
            return f"TLS with that node failed: {describe_tls_error(e)}"
        except (TimeoutError, OSError):
            return None
        closed = "that node closed the connection"
        if self.ssl_client is not None:
            closed += " (does its tls-cluster-peer-name match this node's certificate?)"
            why = check_peer_certificate(writer.transport, self.peer_names)
            if why is not None:
                writer.close()
                return f"that node is refused: {why}"
        hs = None
        if self.secret is not None:
            hs = Handshake(self.secret, connector=True, myid=self.myid(),
                           binding=channel_binding(writer.transport))
        try:
            if hs is None:
                try:
                    data = await asyncio.wait_for(reader.read(64), PROBE_QUIET)
                except TimeoutError:
                    return None  # quiet: no secret there either
                if data[:4] == MAGIC:
                    return "that node uses a cluster-secret and this node has none"
                return closed if not data else None
            writer.write(hs.hello())
            deadline = self.loop.time() + HANDSHAKE_TIMEOUT
            while not hs.done:
                data = await asyncio.wait_for(reader.read(4096),
                                              max(0.0, deadline - self.loop.time()))
                if not data:
                    if hs.peer_nonce is None:
                        why = ("that node has no cluster-secret (it refused this node's "
                               "handshake)")
                        if self.ssl_client is not None:
                            why += (", or its tls-cluster-peer-name does not match this "
                                    "node's certificate")
                        return why
                    return "wrong cluster-secret (that node refused this node's)"
                reply = hs.feed(data)
                if reply:
                    writer.write(reply)
            return None
        except HandshakeError as e:
            return str(e)
        except ssl.SSLError as e:
            return f"TLS with that node failed: {describe_tls_error(e)}"
        except TimeoutError:
            return f"no cluster-secret handshake within {HANDSHAKE_TIMEOUT:g}s"
        except OSError as e:
            return f"that node closed the connection ({e.strerror or e})"
        finally:
            writer.close()

    async def wait_closed(self) -> None:
        """After ``close``: wait until the listening sockets are closed."""
        for srv in self._servers:
            await srv.wait_closed()
        self._servers.clear()


__all__ = ["Bus", "BACKOFF_MIN", "BACKOFF_MAX", "SEND_QUEUE_MAX_BYTES", "SEND_QUEUE_MAX_FRAMES"]
