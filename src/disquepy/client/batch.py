"""Batches on the wire: many commands in one write, their replies read in order.

This is the client's one way of sending many commands at once (the worker's fetch/ack
loop, :meth:`Disque.add_jobs`, every :class:`~disquepy.client.Pipeline`, and in the
asyncio client every ADDJOB, single or batched): the commands are encoded by the
project's own RESP encoder (:mod:`disquepy.codec.resp`: a request is an array of bulk
strings) into one buffer, and the replies are read by a hiredis reader. No redis-py
command object, packer or response callback per command.

* The sync client (:func:`round_trip`) writes a batch with one ``sendall`` on a
  connection borrowed from its redis-py pool (which did the connecting, ``AUTH`` and
  TLS) and reads the replies with that connection's hiredis reader: about half a
  microsecond of client CPU per command (bench/client.py, "per stage").
* The asyncio client (:class:`Wire`, one per node) coalesces: the batches that callers
  hand it during one event-loop iteration (disque-web's concurrent ``POST /jobs``, each
  an ``add_job``; ``add_jobs`` chunks; pipelines) go out in one write, and each caller
  gets its own replies back. See :class:`Wire` for its connections.

Error replies come back as :class:`~disquepy.client.ResponseError` instances in their
place (not raised), so one refused command does not hide the others' replies; a
connection error (or a timeout) is raised, the connection closed.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Iterable, Sequence
from typing import Any

import hiredis
import redis.asyncio as aredis
import redis.exceptions as rexc
from redis.exceptions import ResponseError as _RedisResponseError

from ..codec.resp import bulk_array
from .errors import convert_error, reply_error

#: commands per write of a large batch (:meth:`Disque.add_jobs`): each chunk is one round
#: trip, so a node's output for one client stays small whatever the batch's size
CHUNK = 1000


def encode(args: Sequence[Any]) -> bytes:
    """One request as RESP: ``["ADDJOB", "q", b"body", 0]`` -> ``*4\\r\\n$6\\r\\nADDJOB...``
    (``int`` and ``float`` arguments as their decimal text)."""
    return bulk_array([a if type(a) is bytes or type(a) is str
                       else b"%d" % a if type(a) is int else text(a) for a in args])


def text(a: Any) -> bytes | str:
    """A command argument as what a bulk string carries: ``7`` -> ``"7"``."""
    if isinstance(a, bytes | str):
        return a
    if isinstance(a, bytearray | memoryview):
        return bytes(a)
    if isinstance(a, int | float):
        return repr(a)
    raise TypeError(f"a command argument must be bytes, str, int or float, "
                    f"not {type(a).__name__}")


def encode_many(commands: Iterable[Sequence[Any]]) -> bytes:
    """Several requests, one buffer (what one write sends)."""
    return b"".join(map(encode, commands))


def round_trip(pool: Any, payload: bytes, n: int) -> list[Any]:
    """Write ``payload`` (``n`` encoded requests) on a connection of redis-py ``pool``
    and read the ``n`` replies, errors as instances. A connection error or timeout
    closes the connection and is raised (redis-py's ``ConnectionError``/``TimeoutError``)."""
    conn = pool.get_connection()
    try:
        conn.send_packed_command([payload], check_health=False)
        out: list[Any] = []
        read = conn.read_response
        for _ in range(n):
            try:
                out.append(read())
            except _RedisResponseError as e:
                out.append(convert_error(e))
        return out
    except BaseException:
        conn.disconnect()
        raise
    finally:
        pool.release(conn)


# ---------------------------------------------------------------------------- asyncio


class _Call:
    """One caller's batch on a lane: ``n`` replies to collect, then ``fut`` is set."""

    __slots__ = ("fut", "n", "replies", "sent")

    def __init__(self, fut: asyncio.Future[list[Any]], n: int, sent: float) -> None:
        self.fut = fut
        self.n = n
        self.replies: list[Any] = []
        self.sent = sent


class _Lane(asyncio.Protocol):
    """One connection of a :class:`Wire`: what callers hand it is written at the end of
    the loop iteration, in one write, or (while replies to an earlier write are awaited)
    at the end of the iteration those replies came in, all together: the node would not
    run them sooner, as it answers a connection's commands in order, and fewer writes
    cost both sides less (a write to the node costs disque-web more than a request's
    Python work). Replies are read as they arrive (the event
    loop calls :meth:`data_received`: no task per connection or per write) and handed
    to the callers in order. One timer watches the oldest call: no reply within
    ``timeout`` fails the connection and every call on it."""

    def __init__(self, wire: Wire, conn: Any, timeout: float | None) -> None:
        self.wire = wire
        self.conn = conn  # the redis-py connection that connected and authenticated
        self.timeout = timeout
        self.reader = hiredis.Reader(replyError=reply_error)
        self.calls: collections.deque[_Call] = collections.deque()  # written, then held
        self.out: list[bytes] = []  # payloads not written yet
        self.held = 0  # replies owed for ``out``
        self.unread = 0  # replies owed for what was written
        self.flushing = False  # a write is scheduled for the end of this iteration
        self.timer: asyncio.TimerHandle | None = None
        self.failed: BaseException | None = None
        # redis-py made the connection (AUTH, TLS...); its transport now reports to us
        writer = conn._writer  # redis.asyncio's StreamWriter: the only way to reach it
        if writer is None or writer.transport.is_closing():
            raise rexc.ConnectionError("connection closed before use")
        self.transport: asyncio.Transport = writer.transport
        self.transport.set_protocol(self)

    def send(self, payload: bytes, n: int) -> asyncio.Future[list[Any]]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[list[Any]] = loop.create_future()
        if n <= 0:
            fut.set_result([])
            return fut
        if self.failed is not None:
            fut.set_exception(self.failed)
            return fut
        self.calls.append(_Call(fut, n, loop.time()))
        self.out.append(payload)
        self.held += n
        if not self.unread and not self.flushing:
            self.flushing = True
            loop.call_soon(self._flush)
        if self.timer is None and self.timeout is not None:
            self.timer = loop.call_later(self.timeout, self._check)
        return fut

    def _flush(self) -> None:
        self.flushing = False
        out = self.out
        if self.failed is not None or not out:
            return
        self.out = []
        self.unread += self.held
        self.held = 0
        self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    def data_received(self, data: bytes) -> None:
        reader = self.reader
        reader.feed(data)
        calls = self.calls
        while True:
            try:
                reply = reader.gets()
            except hiredis.ProtocolError as e:
                self.fail(rexc.ConnectionError(f"protocol error from the node: {e}"))
                return
            if reply is False:  # incomplete (RESP2 has no boolean reply)
                break
            if not self.unread:  # a reply nobody asked for: the stream is lost
                self.fail(rexc.ConnectionError("unexpected reply from the node"))
                return
            self.unread -= 1
            call = calls[0]
            replies = call.replies
            replies.append(reply)
            if len(replies) == call.n:
                calls.popleft()
                if not call.fut.done():  # not cancelled
                    call.fut.set_result(replies)
        if not self.unread and self.out and not self.flushing:
            # what came meanwhile goes at the end of this iteration, with what this
            # iteration's other events add (requests read after this reply)
            self.flushing = True
            asyncio.get_running_loop().call_soon(self._flush)

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(rexc.ConnectionError(
            f"connection to the node lost{': ' + str(exc) if exc else ''}"))

    def _check(self) -> None:
        self.timer = None
        if not self.calls or self.failed is not None or self.timeout is None:
            return
        loop = asyncio.get_running_loop()
        late = self.calls[0].sent + self.timeout - loop.time()
        if late <= 0:  # no reply in time: the replies after it can no longer be matched
            self.fail(rexc.TimeoutError(f"no reply within {self.timeout} s"))
        else:
            self.timer = loop.call_later(late, self._check)

    def fail(self, exc: BaseException) -> None:
        """Every call on the lane gets ``exc``; the connection is closed."""
        if self.failed is not None:
            return
        self.failed = exc
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        calls, self.calls = self.calls, collections.deque()
        self.out = []
        for call in calls:
            if not call.fut.done():
                call.fut.set_exception(exc)
        self.transport.close()
        self.wire.lost(self)

    def busy_since(self) -> float | None:
        """When the oldest call still waiting was handed to the lane (None: idle)."""
        return self.calls[0].sent if self.calls else None


class Wire:
    """The asyncio client's batches to one node, coalesced: ``await call(payload, n)``
    sends ``n`` encoded requests and returns their ``n`` replies (errors as instances).

    Calls made during one event-loop iteration share one write on one connection (a
    *lane*). A call goes on the first lane whose oldest unanswered call is younger than
    ``SLOW``, so a node that answers at once gets everything on one connection, while a
    lane held up (a node answers a connection's commands in order, and a synchronously
    replicated ADDJOB holds the ones behind it until its copies exist) gets company, up
    to ``MAX_LANES`` connections. The connections come from ``pool`` (a redis-py pool:
    it connects, authenticates, speaks TLS); once connected, a lane's replies are read
    by its own hiredis reader as they arrive. A lane that fails (connection lost, no
    reply within ``timeout``) fails the calls on it with redis-py's ``ConnectionError``
    or ``TimeoutError``: the caller decides what to send again, and where.
    """

    SLOW = 0.002  # seconds: a lane whose oldest call waits longer is held up
    MAX_LANES = 16

    def __init__(self, pool: aredis.ConnectionPool, timeout: float | None) -> None:
        self.pool = pool
        self.timeout = timeout
        self.lanes: list[_Lane] = []
        self.dead: list[_Lane] = []  # failed lanes whose connection goes back to the pool
        self._opening: asyncio.Future[_Lane] | None = None  # a lane being opened: shared

    def call(self, payload: bytes, n: int) -> Awaitable[list[Any]]:
        """The ``n`` replies to the requests in ``payload`` (see the class): awaitable."""
        lane = self._pick()
        if lane is None:
            return self._call_new(payload, n)
        return lane.send(payload, n)

    async def _call_new(self, payload: bytes, n: int) -> list[Any]:
        return await (await self._open()).send(payload, n)

    def _pick(self) -> _Lane | None:
        lanes = self.lanes
        if not lanes:
            return None
        now = asyncio.get_running_loop().time()
        for lane in lanes:
            since = lane.busy_since()
            if since is None or now - since < self.SLOW:
                return lane
        if len(lanes) >= self.MAX_LANES:
            return min(lanes, key=lambda x: len(x.calls))
        return None

    async def _open(self) -> _Lane:
        if self._opening is not None:  # another call is opening one: take it too
            return await asyncio.shield(self._opening)
        opening = self._opening = asyncio.get_running_loop().create_future()
        try:
            await self._bury()
            conn = await self.pool.get_connection()
            try:
                lane = _Lane(self, conn, self.timeout)
            except BaseException:
                await self._release(conn)
                raise
        except BaseException as e:
            if isinstance(e, asyncio.CancelledError):
                opening.cancel()
            else:
                opening.set_exception(e)
                opening.exception()  # retrieved: no "never retrieved" warning
            raise
        finally:
            self._opening = None
        self.lanes.append(lane)
        opening.set_result(lane)
        return lane

    def lost(self, lane: _Lane) -> None:
        """``lane`` failed: no more calls on it (its connection is released later)."""
        if lane in self.lanes:
            self.lanes.remove(lane)
            self.dead.append(lane)

    async def _bury(self) -> None:
        dead, self.dead = self.dead, []
        for lane in dead:
            await self._release(lane.conn)

    async def _release(self, conn: Any) -> None:
        # nowait: the transport answers to the lane now, not to redis-py's stream
        await conn.disconnect(nowait=True)
        await self.pool.release(conn)

    async def close(self) -> None:
        for lane in list(self.lanes):
            lane.fail(rexc.ConnectionError("closed"))
        await self._bury()
        await self.pool.disconnect()


__all__ = ["CHUNK", "encode", "encode_many", "round_trip", "text", "Wire"]
