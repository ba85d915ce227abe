"""One client connection: bytes in, commands to the node, replies out in one write.

Requests that arrive are buffered (``data_received``); once the loop iteration's reads
are in, its ``ClientBatch`` runs, for each connection that got some, every complete
command in the buffer (pipelining), in order, and then sends all their replies with a
single ``transport.write``.
A command whose reply comes later (a GETJOB that blocks, an ADDJOB waiting for its
copies, a command the shell finishes) stops the loop: later commands from the same
client wait, still buffered, until that reply is sent (``resume``), so replies never
reorder, while other clients go on being served.

``client-output-buffer-limit normal <hard> <soft> <seconds>`` is enforced here, on the
replies the transport still holds because the client does not read them: reaching
the hard limit, or staying at or above the soft limit for longer than the soft
seconds, closes the client and drops its pending output, as in Disque.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from time import perf_counter_ns, time
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

from ..codec import resp
from ..codec.resp import ProtocolError, QueryBufferLimitError
from .log import VERBOSE, log
from .sockopts import keepalive

if TYPE_CHECKING:
    from ..core.client import Client
    from ..core.config import OutputBufferLimit
    from .driver import Driver
    from .limits import ClientGate, Slot
    from .tls import TlsServerProtocol


class ClientTransport(Protocol):
    """What a client connection writes to: an asyncio transport, or the TLS layer
    (server/tls.py) that offers the same calls."""

    def write(self, data: bytes) -> None: ...
    def close(self) -> None: ...
    def abort(self) -> None: ...
    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...
    def get_write_buffer_size(self) -> int: ...
    def get_extra_info(self, name: str, default: Any = None) -> Any: ...

# a client with this many unparsed bytes buffered while blocked stops being read
# (statics: a compiled call through them looks up no module global)
_ns: Final = perf_counter_ns
_time: Final = time
_PAUSE_READING_AT: Final = 1 << 20


class ClientBatch:
    """The client connections' work of one event-loop iteration, done in phases rather
    than connection by connection. uvloop hands over each ready socket's bytes, which
    are only stored; one ``call_soon`` then (1) decrypts the TLS connections' records,
    (2) runs every connection's commands and has the driver deliver the node's outputs
    (bus messages, AOF records, replies to other clients), (3) writes each connection's
    replies, all of them in one write (a TLS connection's are encrypted then), (4) hands
    the TLS records to their sockets. Replies written outside a batch (a blocked GETJOB
    served by a bus frame, the AOF releasing what it held) wait for the next one, so
    they keep their order.

    Done connection by connection, the kernel, the interpreter, the core and OpenSSL
    took turns and each ran cold, and a client was woken for every reply. In phases
    (``bench/tls.py --against``, docs/PERFORMANCE.md) 16-deep pipelines of 50 clients run
    about 1.17x as fast; unpipelined, the gain is small when each client's replies come
    in bursts, and up to 3 µs of CPU per TLS request when clients and node fall into
    lock-step, one reply waking a client at a time.
    Redis likewise gathers replies for beforeSleep. A command waits for the reads of its
    iteration only: each batch is at most one iteration's work.
    """

    __slots__ = ("loop", "after_commands", "reads", "commands", "sends", "flushes",
                 "scheduled", "in_commands", "net_in", "net_out", "paused_until",
                 "_call_soon", "_run", "t_ns", "base_ns", "base_ms")

    def __init__(self, loop: asyncio.AbstractEventLoop, after_commands: Callable[[], None]
                 ) -> None:
        self.loop = loop
        self.after_commands = after_commands  # the driver's after_commands
        # bytes read from and written to clients, for INFO: the driver moves them to
        # the node once per loop iteration (Driver.count_net)
        self.net_in = 0
        self.net_out = 0
        self.paused_until = 0.0  # CLIENT PAUSE: no command runs before (loop time)
        self.reads: list[TlsServerProtocol] = []  # records to decrypt
        self.commands: list[ClientProtocol] = []  # requests to run
        self.sends: list[ClientProtocol] = []  # replies to write
        self.flushes: list[TlsServerProtocol] = []  # records to hand to the socket
        self.scheduled = False
        # running the commands phase: the replies written meanwhile leave in this
        # batch's send phase, after after_commands wrote the AOF records they depend on
        self.in_commands = False
        # the commands phase's clock: one read at its start (base_ns, base_ms: the
        # monotonic and the wall clock), then the end of each command (t_ns), which is
        # the next one's start, whichever connection it is from; process() derives its
        # ``now`` from them instead of reading the clocks again for every connection
        self.t_ns = 0
        self.base_ns = 0
        self.base_ms = 0
        # (made once: a bound method and a method lookup per loop iteration otherwise)
        self._call_soon: Callable[[Callable[[], None]], object] = loop.call_soon
        self._run: Callable[[], None] = self.run

    def _want(self) -> None:
        if not self.scheduled:
            self.scheduled = True
            self._call_soon(self._run)

    def read_later(self, p: TlsServerProtocol) -> None:
        if not p.read_queued:
            p.read_queued = True
            self.reads.append(p)
            self._want()

    def run_later(self, c: ClientProtocol) -> None:
        if not c.queued:
            c.queued = True
            self.commands.append(c)
            self._want()

    def send_later(self, c: ClientProtocol) -> None:
        if not c.out_queued:
            c.out_queued = True
            self.sends.append(c)
            self._want()

    def flush_later(self, p: TlsServerProtocol) -> None:
        if not p.flush_queued:
            p.flush_queued = True
            self.flushes.append(p)
            self._want()

    def _crashed(self, e: Exception, transport: ClientTransport | None,
                 protocol: object) -> None:
        """What uvloop does when a protocol's data_received raises: report, abort."""
        self.loop.call_exception_handler({
            "message": "Fatal error: protocol.data_received() call failed.",
            "exception": e, "transport": transport, "protocol": protocol})
        if transport is not None:  # (a connection lost meanwhile has none)
            transport.abort()

    def run(self) -> None:
        try:
            if self.reads:
                reads, self.reads = self.reads, []
                for p in reads:
                    p.read_queued = False
                    try:
                        p._read()
                    except Exception as e:  # a bug in the command path: this client only
                        # (read untyped: compiled, a typed read would check the class)
                        self._crashed(e, p, getattr(p, "app", None))
            if self.commands:
                commands, self.commands = self.commands, []
                paused = self.paused_until
                self.t_ns = self.base_ns = _ns()
                self.base_ms = int(_time() * 1000)
                self.in_commands = True
                for c in commands:
                    c.queued = False
                    if c.closing or c.waiting or paused and c.held_by_pause():
                        continue
                    try:
                        c.process()
                        c.account()
                    except Exception as e:
                        c.closing = True
                        self._crashed(e, c.transport, c)
                self.in_commands = False
                self.after_commands()
            if self.sends:
                sends, self.sends = self.sends, []
                sent = 0
                for c in sends:
                    c.out_queued = False
                    sent += c.send()
                self.net_out += sent
            if self.flushes:
                flushes, self.flushes = self.flushes, []
                for p in flushes:
                    p.flush_queued = False
                    if not p.closed:
                        p._flush()
        finally:
            self.scheduled = False
            self.in_commands = False
            if self.reads or self.commands or self.sends or self.flushes:
                self._want()  # queued by a later phase (a TLS connection resumed reading)


class ClientProtocol:
    __slots__ = ("driver", "node", "batch", "transport", "reader", "client", "paused",
                 "closing", "waiting", "soft_since", "queued", "out", "out_queued", "gate",
                 "slot", "unauth", "ip", "gets", "feed")

    def __init__(self, driver: Driver, gate: ClientGate | None = None) -> None:
        self.driver = driver
        self.gate = gate
        self.slot: Slot | None = None  # while not authenticated: this connection's entry in the gate
        self.unauth = False  # the reader applies the limits before AUTH
        self.ip = "?"
        self.node = driver.node
        self.batch: ClientBatch = driver.batch
        self.transport: ClientTransport | None = None  # set by connection_made
        self.client: Client | None = None  # likewise, unless refused there
        self.paused = False
        self.closing = False
        self.waiting = False  # a command's reply is still to come: run nothing after it
        self.soft_since: float | None = None  # when pending output reached the soft limit
        self.queued = False  # in the batch's commands
        self.out: list[bytes] = []  # replies not written yet
        self.out_queued = False  # in the batch's sends
        cfg = driver.config
        self.reader = resp.make_reader(
            pure=driver.pure_resp,
            max_bulk_len=cfg.proto_max_bulk_len,
            max_multibulk=cfg.proto_max_multibulk_len,
            query_buffer_limit=cfg.client_query_buffer_limit,
        )
        # the reader's gets, bound once: process() calls it per command (the reader
        # has no static type here, and a call by name looks the method up each time)
        self.gets: Callable[[], Any] = self.reader.gets
        self.feed: Callable[[bytes], None] = self.reader.feed  # (likewise, per read)

    # ----------------------------------------------------------- asyncio API
    def connection_made(self, transport: ClientTransport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        addr = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.ip = peer[0] if peer else "?"
        now = self.driver.now()
        gate = self.gate
        if (gate.full(self.ip) if gate is not None
                else len(self.node.clients) >= self.driver.config.maxclients):
            if gate is None:
                self.node.stats.rejected_connections += 1
            else:  # a TLS connection, counted in its handshake (a plain one: not in it)
                gate.release(cast("Slot", transport))
            transport.write(resp.error("ERR max number of clients reached"))
            transport.close()
            self.closing = True
            return
        self.client = client = self.node.new_client(self, addr, now)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            client.fd = sock.fileno()
        client.out_probe = self.pending_output
        if self.driver.config.tcp_keepalive > 0:  # CONFIG SET: for connections after it
            keepalive(transport, self.driver.config.tcp_keepalive)
        if gate is not None:  # a TLS connection is in the gate since its handshake
            self.slot = cast("Slot", transport) if transport in gate.pending else self
            if client.authed:
                gate.release(self.slot)
                self.slot = None
            elif self.slot is self:
                gate.admit(self)
        if not client.authed:  # Redis's limits on what may come before AUTH
            self.unauth = True
            self.reader.set_unauthenticated(True)
        log.debug("Accepted %s", addr)

    def authenticated(self) -> None:
        """The client authenticated (or needs no password any more): lift the limits
        on its requests, and it no longer counts as not authenticated."""
        self.unauth = False
        self.reader.set_unauthenticated(False)
        if self.slot is not None:
            assert self.gate is not None  # (a slot is in the gate)
            self.gate.release(self.slot)
            self.slot = None

    def expire(self, seconds: int | None) -> None:
        """The gate closes this connection: not authenticated within ``seconds``, or
        (None) to make room for a newer one."""
        assert self.gate is not None and self.transport is not None  # (a slot in the gate)
        if seconds is not None:
            self.gate.refusals.log(VERBOSE, ("timeout", self.ip), "Closing a client "
                                   "connection from %s: not authenticated within %d s "
                                   "(client-auth-timeout)", self.ip, seconds)
        self.slot = None
        self.closing = True
        self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        if self.slot is not None:
            assert self.gate is not None  # (a slot is in the gate)
            self.gate.release(self.slot)
            self.slot = None
        client = self.client
        if client is not None:
            self.node.client_closed(client)
            client.conn = None  # break the protocol <-> client cycle (see gc.freeze)
            self.driver.after_event()
        self.transport = None

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        assert self.client is not None and self.transport is not None  # (not closing)
        batch = self.batch
        batch.net_in += len(data)
        try:
            self.feed(data)
        except QueryBufferLimitError:
            log.warning("Closing client that reached max query buffer length: %s",
                        self.client.addr)
            self.close()
            return
        if not self.waiting:
            batch.run_later(self)
            return
        if not self.paused and len(self.reader) > _PAUSE_READING_AT:
            self.paused = True
            self.transport.pause_reading()
        self.account()

    def account(self) -> None:
        """Count the request bytes still buffered in used_memory."""
        held = len(self.reader)
        client = self.client
        assert client is not None  # (ran its commands)
        if held != client.qbuf:
            self.node.set_client_buffer(client, held)

    def eof_received(self) -> bool | None:
        """The client half-closed: None, the transport closes (asyncio.Protocol's own
        answer, spelled out: a compiled class has no asyncio base to inherit it from)."""
        return None

    def pause_writing(self) -> None:  # the peer reads slower than we write
        assert self.transport is not None  # (the transport calls it)
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        assert self.transport is not None  # (the transport calls it)
        if not self.paused:
            self.transport.resume_reading()

    # --------------------------------------------------------------- work
    def process(self) -> None:
        """Run every complete buffered command until done or the client blocks (or a
        CLIENT PAUSE holds them: checked by the batch, and by resume)."""
        client, gets = self.client, self.gets
        assert client is not None  # (a connection with commands has its client)
        node = self.node  # (its methods called on it: native calls, compiled)
        batch = self.batch
        in_batch = batch.in_commands
        if in_batch:  # the batch's clock (see ClientBatch): the last command's end
            t = batch.t_ns
            now = batch.base_ms + (t - batch.base_ns) // 1_000_000
        else:
            now = int(_time() * 1000)
            t = _ns()
        client.last_cmd_time = now
        first = None  # the first reply; `more` holds them all once there are several
        more = None
        unauth = self.unauth
        if unauth and client.authed:  # CONFIG SET requirepass "" meanwhile
            self.authenticated()
            unauth = False
        # one clock read a command: its end is the next one's start
        while True:
            try:
                argv = gets()
            except QueryBufferLimitError:
                self.close()
                return
            except ProtocolError as e:
                err = resp.error("ERR " + str(e))
                self.write(err if first is None else
                           first + err if more is None else b"".join(more) + err)
                self.close()  # after what it has to send
                return
            if argv is False:
                break
            reply = node.execute(client, argv, now)
            t1 = _ns()
            node.command_took(t1 - t)  # (with its parse: Reader.gets, ~0.1 us)
            t = t1
            if unauth and client.authed:  # AUTH: its limits go for what follows
                self.authenticated()
                unauth = False
            if reply is None:  # its reply comes later: later commands wait for it
                self.waiting = True
                break
            if first is None:
                first = reply
            elif more is None:
                more = [first, reply]
            else:
                more.append(reply)
        if in_batch:
            batch.t_ns = t
        if not unauth and not client.authed:  # logged out (a failed AUTH, issue #29)
            self.unauth = True
            self.reader.set_unauthenticated(True)
        if first is not None:
            self.send_replies(first if more is None else b"".join(more))

    def held_by_pause(self) -> bool:
        """CLIENT PAUSE runs: this client's commands wait for its end (Driver.unpause)."""
        driver = self.driver
        if driver.loop.time() >= self.batch.paused_until:
            return False
        driver.paused.add(self)
        return True

    def pending_output(self) -> tuple[int, int]:
        """Replies not sent yet (CLIENT LIST oll, omem): (chunks here, bytes here and in
        the transport)."""
        held = sum(map(len, self.out))
        if self.transport is not None:
            held += self.transport.get_write_buffer_size()
        return len(self.out), held

    def send_replies(self, data: bytes) -> None:
        """Write a batch of replies, after the AOF records they depend on (with
        appendfsync always the AOF holds them until its group fsync). In a batch's
        commands phase the records are written once for all its connections, before
        its send phase (Driver.after_commands); outside it (a pipeline resumed by a
        reply), here."""
        driver = self.driver
        if self.node.aof.out and not self.batch.in_commands:
            driver.flush_aof()
        if self.closing:
            return
        aof = driver.aof
        if aof is not None and aof.holding:
            aof.hold(self, data)
        else:
            self.write(data)

    def resume(self) -> None:
        """This client's pending reply was sent: go on with its pipeline."""
        self.waiting = False
        client = self.client
        if self.unauth and client is not None and client.authed:  # an AUTH answered later
            self.authenticated()
        if self.paused:
            self.paused = False
            assert self.transport is not None  # (paused: connected)
            self.transport.resume_reading()
        if len(self.reader) and not (self.batch.paused_until and self.held_by_pause()):
            self.process()

    def write(self, data: bytes) -> None:
        if not self.closing:
            self.out.append(data)
            if not self.out_queued:
                self.batch.send_later(self)

    def send(self) -> int:
        """Write the replies not written yet; how many bytes (INFO's net output)."""
        out = self.out
        if not out or self.closing:
            return 0
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()  # (the same list again: write() appends to it)
        assert self.transport is not None  # (not closing)
        self.transport.write(data)
        if self.driver.obuf_limit is not None:
            self.check_output_limit()
        return len(data)

    def check_output_limit(self, limit: OutputBufferLimit | None = None, unsent: int = 0
                           ) -> None:
        """Close the client if its pending output breaks client-output-buffer-limit
        (``limit``, for monitors: MONITOR_LIMIT; ``unsent``: bytes written but not yet
        handed to the transport). Also runs from a timer armed when the soft limit is
        first reached: a client that stopped reading is no longer read either
        (pause_writing), so no later write would come to check it."""
        if limit is None:
            limit = self.driver.obuf_limit
        if self.closing or limit is None:
            return
        assert self.client is not None and self.transport is not None  # (not closing)
        pending = self.transport.get_write_buffer_size() + unsent
        hard, soft, seconds = limit
        over = hard and pending >= hard
        if soft and pending >= soft and not over:
            now = self.driver.loop.time()
            if self.soft_since is None:
                self.soft_since = now
                self.driver.loop.call_later(seconds + 0.01, self.check_output_limit, limit)
            over = now - self.soft_since > seconds
        elif not over:
            self.soft_since = None
        if over:
            log.warning("Client addr=%s closed for overcoming of output buffer limits "
                        "(%d bytes pending; limits: hard %d, soft %d for %d s)",
                        self.client.addr, pending, hard, soft, seconds)
            self.closing = True
            self.transport.abort()  # its pending replies are dropped with it

    def close(self) -> None:
        if not self.closing:
            # what is sent now goes after the AOF records it depends on (a client killed
            # or refused in the batch that ran its commands)
            driver = self.driver
            if self.node.aof.out:
                driver.flush_aof()
            aof = driver.aof
            if aof is not None:
                aof.flush_now()
            self.batch.net_out += self.send()
            self.closing = True
            assert self.transport is not None  # (not closing)
            self.transport.close()
