"""The hot ``POST /jobs`` without FastAPI's per-request layers, and ADDJOBs pipelined.

A job submitted over HTTP used to cost disque-web about 0.4-0.6 ms of CPU: FastAPI's
routing, dependency solving, body validation and response serialization, then the
asyncio redis client. Two levers, both invisible to a client of the API:

* :class:`FastJobs`, a plain ASGI middleware in front of the app, answers a
  well-formed ``POST /jobs`` itself: the body validated by the same ``JobIn`` model
  (one ``model_validate_json``), the same ADDJOB, a prebuilt 202 reply. Anything
  else — another route, a body that does not validate, a payload too large, a header
  out of bounds — goes to the FastAPI app unchanged (the body replayed), so errors keep
  their exact form.
* :class:`NodePipe`, connections to the node the client library uses, on which the
  ADDJOBs of concurrent requests are written together and their replies matched in
  order (pipelining, hiredis' parser); one connection while the node answers at once,
  more while ADDJOBs wait for their copies. A failure there (connection lost, timeout,
  ``-LEAVING`` and the like) is retried through :class:`~disquepy.client.AsyncDisque`
  with the same idempotency key, which fails over between nodes and never adds the job
  twice.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import hiredis
from pydantic import ValidationError

from ..client.args import addjob_args
from ..codec.resp import bulk_array

log = logging.getLogger("disquepy.web")

Prepare = Callable[[Any, "str | None"], Any]


class PipeError(Exception):
    """The pipe could not get a reply (the caller retries through the client)."""


def _encode(args: list) -> bytes:
    """A request as RESP: what a reply array of bulk strings looks like."""
    return bulk_array([b"%d" % a if type(a) is int else a for a in args])


class _Conn(asyncio.Protocol):
    """The connection: futures waiting for replies in order, each with when it was sent;
    one timer watches the oldest (no per-request timeout object)."""

    def __init__(self, timeout: float) -> None:
        self.reader = hiredis.Reader()
        self.waiting: collections.deque[tuple[asyncio.Future, float]] = collections.deque()
        self.transport: Any = None  # asyncio's or uvloop's transport
        self.closed = False
        self.timeout = timeout
        self.timer: asyncio.TimerHandle | None = None
        self.out: list[bytes] = []  # commands of this loop iteration, written at its end

    def send(self, data: bytes) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.waiting.append((fut, loop.time()))
        if not self.out:
            loop.call_soon(self._flush)
        self.out.append(data)
        if self.timer is None:
            self.timer = loop.call_later(self.timeout, self._check)
        return fut

    def _flush(self) -> None:
        """One write for the commands of the requests served in one loop iteration (one
        syscall, and one read for the node, instead of one each)."""
        out, self.out = self.out, []
        if not self.closed:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    def _check(self) -> None:
        self.timer = None
        if not self.waiting or self.closed:
            return
        loop = asyncio.get_running_loop()
        late = self.waiting[0][1] + self.timeout - loop.time()
        if late <= 0:  # no reply in time: the replies after it can no longer be matched
            self.fail(PipeError("timeout"))
        else:
            self.timer = loop.call_later(late, self._check)

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while True:
            try:
                reply = self.reader.gets()
            except hiredis.ProtocolError as e:
                self.fail(PipeError(f"protocol error: {e}"))
                return
            if reply is False:
                return
            if not self.waiting:  # a reply nobody asked for: the stream is lost
                self.fail(PipeError("unexpected reply"))
                return
            fut = self.waiting.popleft()[0]
            if not fut.done():
                fut.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(PipeError(f"connection lost: {exc}"))

    def fail(self, exc: Exception) -> None:
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        while self.waiting:
            fut = self.waiting.popleft()[0]
            if not fut.done():
                fut.set_exception(exc)
        if self.transport is not None:
            self.transport.close()


class NodePipe:
    """Pipelined connections to ``addr``: requests go down the first connection whose
    oldest unanswered command is younger than ``SLOW`` (so a fast node gets them all on
    one, written together), and a new connection is opened, up to ``MAX_CONNS``, when
    every one is held up (an ADDJOB waiting for its copies blocks the commands behind it
    on its connection: the node answers a connection's commands in order)."""

    SLOW = 0.002  # seconds
    MAX_CONNS = 16

    def __init__(self, username: str | None = None, password: str | None = None,
                 timeout: float = 10.0) -> None:
        self.username = username
        self.password = password
        self.timeout = timeout
        self.addr: tuple[str, int] | None = None
        self._conns: list[_Conn] = []
        self._opening: asyncio.Future | None = None

    async def _connection(self, addr: tuple[str, int]) -> _Conn:
        if self.addr != addr:  # the client moved to another node: follow it
            self.close()
            self.addr = addr
        conns = self._conns
        if conns:
            now = asyncio.get_running_loop().time()
            for c in conns:
                if c.closed:
                    continue
                if not c.waiting or now - c.waiting[0][1] < self.SLOW:
                    return c
            conns[:] = [c for c in conns if not c.closed]
            if len(conns) >= self.MAX_CONNS:
                return min(conns, key=lambda c: len(c.waiting))
        if self._opening is not None:  # another request is opening one: share it
            return await asyncio.shield(self._opening)
        loop = asyncio.get_running_loop()
        self._opening = loop.create_future()
        try:
            _, c = await asyncio.wait_for(loop.create_connection(
                lambda: _Conn(self.timeout), addr[0], addr[1]), self.timeout)
            if self.password:
                auth = ["AUTH", self.password] if self.username is None else [
                    "AUTH", self.username, self.password]
                ok = await self._send(c, auth)
                if isinstance(ok, Exception):
                    c.fail(PipeError(str(ok)))
                    raise PipeError(f"AUTH: {ok}")
            if self.addr != addr:  # moved while connecting: the client's way instead
                c.fail(PipeError("node changed"))
                raise PipeError("node changed")
            conns.append(c)
            self._opening.set_result(c)
            return c
        except BaseException as e:
            err = e if isinstance(e, PipeError) else PipeError(repr(e))
            self._opening.set_exception(err)
            self._opening.exception()  # retrieved: no "never retrieved" warning
            raise err from None
        finally:
            self._opening = None

    async def _send(self, c: _Conn, args: list) -> Any:
        return await c.send(_encode(args))

    async def call(self, addr: tuple[str, int], args: list) -> Any:
        """The reply to ``args`` on ``addr`` (an error reply is returned, not raised);
        PipeError when none came."""
        c = await self._connection(addr)
        return await self._send(c, args)

    def close(self) -> None:
        for c in self._conns:
            c.fail(PipeError("closed"))
        self._conns = []


class FastJobs:
    """ASGI middleware: a valid ``POST /jobs`` answered here; everything else by ``app``.

    ``prepare(job, idempotency_key)`` (the app's) turns a validated ``JobIn`` into the
    ADDJOB's ``(queue, body, options)`` or ``None`` (a payload too large: the app
    answers); ``add(queue, body, options)`` is the client library's way (the fallback);
    ``accepted(job, jid)`` the 202 body and ``submitted(job)`` counts it.
    """

    def __init__(self, app: Any, *, model: Any, prepare: Prepare,
                 client: Callable[[], Any], fallback: Callable[..., Awaitable[str]],
                 accepted: Callable[[Any, str], dict], submitted: Callable[[Any], None],
                 error: Callable[[BaseException], Any], pipe: NodePipe | None) -> None:
        self.app = app
        self.model = model
        self.prepare = prepare
        self.client = client
        self.fallback = fallback
        self.accepted = accepted
        self.submitted = submitted
        self.error = error
        self.pipe = pipe

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if (scope["type"] != "http" or scope["method"] != "POST"
                or scope["path"] not in ("/jobs", "/jobs/")):
            await self.app(scope, receive, send)
            return
        key = None
        for name, value in scope["headers"]:
            if name == b"content-type":
                if not value.startswith(b"application/json"):
                    return await self.app(scope, receive, send)
            elif name == b"idempotency-key":
                key = value.decode("latin-1")
        body, messages = await _read_body(receive)
        if body is None or (key is not None and not 0 < len(key) <= 200):
            return await self.app(scope, _replay(messages, receive), send)
        try:
            job = self.model.model_validate_json(body)
        except ValidationError:
            return await self.app(scope, _replay(messages, receive), send)
        prepared = self.prepare(job, key)
        if prepared is None:
            return await self.app(scope, _replay(messages, receive), send)
        queue, jbody, opts = prepared
        try:
            jid = await self._add(queue, jbody, opts)
        except Exception as e:  # a Disque error reply or no node: the app's answer
            await self.error(e)(scope, receive, send)
            return
        self.submitted(job)
        out = json.dumps(self.accepted(job, jid), separators=(",", ":")).encode()
        await send({"type": "http.response.start", "status": 202, "headers": [
            (b"content-type", b"application/json"), (b"content-length", b"%d" % len(out)),
            (b"location", b"/jobs/" + jid.encode())]})
        await send({"type": "http.response.body", "body": out})

    async def _add(self, queue: str, body: bytes, opts: dict) -> str:
        aio = self.client()
        addr = aio.address
        if addr is not None and self.pipe is not None:
            args = addjob_args(queue, body, 0, opts.get("replicate"), opts.get("delay"),
                               opts.get("retry"), opts.get("ttl"), None, False,
                               opts["idempotent"])
            try:
                reply = await self.pipe.call(addr, args)
            except PipeError as e:
                log.debug("POST /jobs: pipe to %s failed (%s): through the client", addr, e)
            else:
                if isinstance(reply, bytes):
                    return reply.decode("ascii")
                # an error reply: the client decides (fail over, or raise it)
        return await self.fallback(queue, body, **opts)


async def _read_body(receive: Any) -> tuple[bytes | None, list]:
    """The request body (None past 8 MB: the app answers) and the messages read."""
    messages = []
    chunks = []
    size = 0
    while True:
        m = await receive()
        messages.append(m)
        if m["type"] != "http.request":
            return None, messages
        chunk = m.get("body", b"")
        size += len(chunk)
        if size > 8 * 1024 * 1024:
            return None, messages
        chunks.append(chunk)
        if not m.get("more_body", False):
            return b"".join(chunks), messages


def _replay(messages: list, receive: Any) -> Any:
    pending = collections.deque(messages)

    async def again() -> dict:
        if pending:
            return pending.popleft()
        return await receive()
    return again
