"""disque-web's HTTP connections: uvicorn's own httptools protocol (handed to uvicorn the
documented way, ``Config(http=...)``) with two changes.

- **A deadline on each request's head** (request line and headers): ``HEAD_TIMEOUT``
  seconds. uvicorn bounds the head's size but not the time it takes: a client sending
  one header line now and then (slowloris) held a connection, and one of
  ``--limit-concurrency``'s slots, for as long as it liked. The timer is armed when a
  connection opens and when a new request begins on a kept-alive one, cancelled once
  the head is whole; on expiry the connection is closed (and logged). The body has its
  own deadline (``--body-timeout``, :mod:`disquepy.web.guard`).
- **One write per loop iteration**: uvicorn writes a response's head and its body
  separately, two ``send`` system calls for every answer, a third of disque-web's CPU
  per ``POST /jobs``. The connection's writes of one event-loop iteration are joined
  and sent together (:class:`CorkedTransport`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .guard import BODY_TIMEOUT

log = logging.getLogger("disquepy.web")

HEAD_TIMEOUT = BODY_TIMEOUT  # seconds, from the first byte of a request to its blank line


class CorkedTransport:
    """A transport whose writes of one event-loop iteration go out in one ``write`` of
    the real one (at the end of the iteration, or before a close); everything else is
    the real transport's."""

    __slots__ = ("_transport", "_loop", "_out")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._out: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self._out:
            self._loop.call_soon(self.flush)
        self._out.append(data)

    def flush(self) -> None:
        out = self._out
        if out:
            self._out = []
            if not self._transport.is_closing():
                self._transport.write(out[0] if len(out) == 1 else b"".join(out))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._out = []
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class HttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline on each request's head, and its
    writes of one loop iteration joined."""

    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        corked = CorkedTransport(transport, self.loop)
        super().connection_made(corked)  # type: ignore[arg-type]
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._head_timer is None:
            self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._head_timer = self.loop.call_later(HEAD_TIMEOUT, self._expired)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _expired(self) -> None:
        self._head_timer = None
        if self.cycle is not None and not self.cycle.response_complete:
            self._arm()  # a request is being answered: the next head's time starts after
            return
        if not self.transport.is_closing():
            peer = f"{self.client[0]}:{self.client[1]}" if self.client else "?"
            log.info("closing %s: no whole request head within %g s", peer, HEAD_TIMEOUT)
            self.transport.close()
