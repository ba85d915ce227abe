#!/usr/bin/env python3
"""The "floor" reference server for bench/run.py: a bare uvloop protocol.

It answers every PING with +PONG and does nothing else: no command parsing,
no dispatch, no data structures.  Whatever rate it reaches is the most any
Python asyncio (uvloop) server can do for PING on this machine, so comparing
it with Redis shows how much of disquepy's gap is the event loop itself.

Each chunk read is scanned for complete commands by counting the terminator
b"PING\\r\\n" (one bytes.count() call in C).  That covers RESP multibulk
requests (*1\\r\\n$4\\r\\nPING\\r\\n, as bench/loadgen and redis-cli send
them) and inline "PING\\r\\n", pipelined or not.  A command split across
reads is kept in a carry-over of at most 5 bytes (a partial "PING\\r"), so it
is counted once its end arrives.  All replies for a chunk go out in one
transport.write().  Anything that is not a PING is silently ignored.

Usage: .venv/bin/python bench/floor_server.py --port 7711
Needs uvloop (a disquepy dependency; run it with the project's venv python).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

TERM = b"PING\r\n"
TLEN = len(TERM)
PONG = b"+PONG\r\n"


class FloorProtocol(asyncio.Protocol):
    __slots__ = ("transport", "carry")

    def __init__(self) -> None:
        self.transport = None
        self.carry = b""

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.carry:
            data = self.carry + data
        n = data.count(TERM)
        if n:
            end = data.rfind(TERM) + TLEN
            # Only a partial terminator after the last command is worth keeping.
            self.carry = data[end:][-(TLEN - 1) :] if end < len(data) else b""
            self.transport.write(PONG * n)
        else:
            self.carry = data[-(TLEN - 1) :]


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(FloorProtocol, host, port)
    stop = loop.create_future()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set_result, None)
    async with server:
        await stop


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=7711)
    a = ap.parse_args()
    try:
        import uvloop  # type: ignore
    except ImportError:
        sys.exit("floor_server: uvloop is not installed; run it with the project's venv python")
    uvloop.run(serve(a.host, a.port))


if __name__ == "__main__":
    main()
