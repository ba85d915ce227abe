#!/usr/bin/env python3
"""The "floor" reference server for bench/run.py: a bare uvloop RESP protocol.

Every request is parsed with disquepy's fastest request reader (the C one when it
was built, else hiredis-backed) and answered with a canned reply picked by the
command's name: PING +PONG, ADDJOB a fixed job ID, GETJOB a fixed one-job array,
ACKJOB :1, LPUSH :1, RPOP a fixed bulk, anything else +OK. No dispatch, no data
structures, nothing remembered: whatever rate it reaches is the most any Python
asyncio (uvloop) server that speaks RESP can do on this machine for that workload,
so its ratio to Redis is the ceiling of disquepy's ratio.

All replies for a chunk go out in one transport.write(), as disquepy does.

Usage: .venv/bin/python bench/floor_server.py --port 7711
Needs uvloop and the disquepy package (run it with the project's venv python).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from disquepy.codec.resp import make_reader  # noqa: E402

_ID = b"D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1"
_BODY = b"0123456789abcdef"
REPLIES = {
    b"PING": b"+PONG\r\n",
    b"ADDJOB": b"+" + _ID + b"\r\n",
    b"GETJOB": b"*1\r\n*3\r\n$1\r\nq\r\n$40\r\n" + _ID + b"\r\n$16\r\n" + _BODY + b"\r\n",
    b"ACKJOB": b":1\r\n",
    b"LPUSH": b":1\r\n",
    b"RPOP": b"$16\r\n" + _BODY + b"\r\n",
}
OK = b"+OK\r\n"


class FloorProtocol(asyncio.Protocol):
    __slots__ = ("transport", "reader")

    def __init__(self) -> None:
        self.transport = None
        self.reader = make_reader()

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        reader = self.reader
        out = []
        get = REPLIES.get
        try:
            reader.feed(data)
            while (argv := reader.gets()) is not False:
                out.append(get(argv[0].upper(), OK))
        except Exception:  # malformed input (not from bench/loadgen): drop the client
            self.transport.close()
            return
        if out:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))


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
