#!/usr/bin/env python3
"""The floor of a uvloop shell: a server that speaks Disque's protocol and does nothing.

It parses each request (hiredis) and answers it with a canned reply of the right shape
(ADDJOB: a job ID; GETJOB: COUNT jobs of 16 bytes; ACKJOB: the count of its IDs; any
other command: +OK), one ``transport.write`` per read, as plain a shell as uvloop allows.
What it costs per request is what our node pays before any work: bench/run.py's single
section runs it beside ours and C Disque ("floor" column, docs/PERFORMANCE.md).

    .venv/bin/python bench/floor.py --port 7799
"""

from __future__ import annotations

import argparse
import asyncio
import gc
from typing import Any

import hiredis
import uvloop

JOB_ID = b"D-dcb833cf-8YL1NT17e9+wsA/09NqxscQI-05a1"
ONE_JOB = b"*3\r\n$1\r\nq\r\n$40\r\n" + JOB_ID + b"\r\n$16\r\n" + b"x" * 16 + b"\r\n"
ADDED = b"$40\r\n" + JOB_ID + b"\r\n"
MAX_COUNT = 10_000


def answer(argv: list[bytes]) -> bytes:
    cmd = argv[0].upper()
    if cmd == b"ADDJOB":
        return ADDED
    if cmd == b"GETJOB":
        n = 1
        for i in range(1, len(argv) - 1):
            if argv[i].upper() == b"COUNT" and argv[i + 1].isdigit():
                n = min(int(argv[i + 1]), MAX_COUNT)
        return b"*%d\r\n" % n + ONE_JOB * n
    if cmd == b"ACKJOB":
        return b":%d\r\n" % (len(argv) - 1)
    if cmd == b"PING":
        return b"+PONG\r\n"
    return b"+OK\r\n"


class Floor(asyncio.Protocol):
    def __init__(self) -> None:
        self.reader = hiredis.Reader()
        self.transport: Any = None  # (uvloop's transports are no asyncio.Transport)

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.reader.feed(data)
        out = []
        while (argv := self.reader.gets()) is not False:
            out.append(answer(argv) if isinstance(argv, list) and argv else b"-ERR\r\n")
        if out:
            self.transport.write(b"".join(out))


async def serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(Floor, "127.0.0.1", port)
    async with srv:
        await srv.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    a = ap.parse_args()
    gc.freeze()  # (as the node does: no collection walks the startup objects)
    uvloop.run(serve(a.port))


if __name__ == "__main__":
    main()
