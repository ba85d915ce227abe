"""A request's head (request line and headers) must arrive within ``HEAD_TIMEOUT`` seconds.

uvicorn bounds the head's size but not the time it takes: a client sending one header
line now and then (slowloris) holds a connection, and one of ``--limit-concurrency``'s
slots, for as long as it likes. This is uvicorn's own httptools protocol (handed to it
the documented way, ``Config(http=...)``) with one timer more: armed when a connection
opens and when a new request begins on a kept-alive one, cancelled once the head is
whole; on expiry the connection is closed (and logged). The body has its own deadline
(``--body-timeout``, :mod:`disquepy.web.guard`).
"""

from __future__ import annotations

import asyncio
import logging

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .guard import BODY_TIMEOUT

log = logging.getLogger("disquepy.web")

HEAD_TIMEOUT = BODY_TIMEOUT  # seconds, from the first byte of a request to its blank line


class HeadTimeoutProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline on each request's head."""

    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
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
            return  # a request is being answered: its head came whole
        if not self.transport.is_closing():
            peer = f"{self.client[0]}:{self.client[1]}" if self.client else "?"
            log.info("closing %s: no whole request head within %g s", peer, HEAD_TIMEOUT)
            self.transport.close()
