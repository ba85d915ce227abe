"""A minimal asyncio RESP client for the fault run: one command at a time, no retries.

redis-py's clients retry on connection errors, which would send an ADDJOB twice and
blur the history; this one fails loudly instead and leaves the decision to the caller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import hiredis

# A reply as hiredis parses it: bytes, int, None, a list of those, or a hiredis
# ReplyError, depending on the command: no one static type, hence Any.
Reply = Any
# A command argument as ``encode`` takes it.
Arg = bytes | str | int


class ReplyError(Exception):
    """The server answered with an error reply."""


class ConnLost(Exception):
    """No reply: the connection failed, was refused, or the reply timed out."""


def encode(args: Sequence[Arg]) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, int):
            a = b"%d" % a
        elif isinstance(a, str):
            a = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    """One connection to one node; ``call`` raises ConnLost and is then unusable."""

    __slots__ = ("host", "port", "reader", "writer", "parser")

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.parser = hiredis.Reader()

    async def open(self, timeout: float = 2.0) -> None:
        try:
            self.reader, self.writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port), timeout
            )
        except (TimeoutError, OSError) as e:
            raise ConnLost(f"connect to {self.port}: {e!r}") from None

    async def call(self, command: str, *args: Arg, timeout: float = 5.0) -> Reply:
        """Send one command, return its reply; error replies raise ReplyError."""
        if self.writer is None:
            await self.open()
        assert self.writer is not None  # open() set it or raised
        try:
            self.writer.write(encode((command, *args)))
            reply = await asyncio.wait_for(self._read(), timeout)
        except (TimeoutError, OSError, asyncio.IncompleteReadError, EOFError) as e:
            self.close()
            raise ConnLost(f"{command} on {self.port}: {e!r}") from None
        if isinstance(reply, hiredis.ReplyError):
            raise ReplyError(str(reply))
        return reply

    async def _read(self) -> Reply:
        assert self.reader is not None  # only called by call(), once open
        while True:
            reply = self.parser.gets()
            if reply is not False:
                return reply
            data = await self.reader.read(65536)
            if not data:
                raise EOFError("connection closed")
            self.parser.feed(data)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.writer = self.reader = None
        self.parser = hiredis.Reader()


class Pool:
    """One lazily opened connection per node port, replaced after a failure."""

    __slots__ = ("host", "conns")

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.conns: dict[int, Conn] = {}

    async def call(self, port: int, command: str, *args: Arg, timeout: float = 5.0) -> Reply:
        conn = self.conns.get(port)
        if conn is None:
            conn = self.conns[port] = Conn(self.host, port)
        try:
            return await conn.call(command, *args, timeout=timeout)
        except ConnLost:
            self.conns.pop(port, None)
            raise

    def close(self) -> None:
        for c in self.conns.values():
            c.close()
        self.conns.clear()
