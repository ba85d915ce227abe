#!/usr/bin/env python3
"""A tiny fake Disque server for testing the benchmark harness.

It speaks just enough RESP to exercise bench/loadgen and bench/run.py
without the real server:

    PING                          -> +PONG
    ADDJOB queue body timeout ... -> +D-xxxxxxxx-<24 chars>-<4 hex>  (40 chars)
    GETJOB [NOHANG] [TIMEOUT ms] [COUNT n] [WITHCOUNTERS] FROM q [q ...]
                                  -> *n of [queue, id, body], or *-1 if none
                                     (never blocks: every GETJOB acts as NOHANG)
    ACKJOB id [id ...]            -> :number of known jobs acknowledged
    QLEN queue                    -> :length
    anything else                 -> -ERR unknown command

Jobs are kept in plain dicts and deques, so memory per job is not meant to be
representative.  Usage: python3 bench/fake_disque.py --port 7711
Stdlib only (uses uvloop when importable, for speed).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import os
import signal


class Store:
    """Queues of job IDs plus an id -> (queue, body) table."""

    def __init__(self) -> None:
        self.queues: dict[bytes, collections.deque[bytes]] = collections.defaultdict(
            collections.deque
        )
        self.jobs: dict[bytes, tuple[bytes, bytes]] = {}
        self.node = os.urandom(4).hex().encode()
        self.counter = 0

    def new_id(self) -> bytes:
        # D- | 8 hex node | - | 24 base64 chars | - | 4 hex TTL  = 40 bytes
        self.counter += 1
        rand = base64.b64encode(self.counter.to_bytes(18, "big"))
        return b"D-" + self.node + b"-" + rand + b"-0005"


def bulk(b: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(b), b)


class RespProtocol(asyncio.Protocol):
    """Parses pipelined RESP arrays of bulk strings (and inline commands)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        out = []
        while True:
            cmd = self._parse_one()
            if cmd is None:
                break
            if cmd is False:
                out.append(b"-ERR Protocol error\r\n")
                self.transport.write(b"".join(out))
                self.transport.close()
                return
            if cmd:
                out.append(self.dispatch(cmd))
        if out:
            self.transport.write(b"".join(out))

    def _parse_one(self):
        """Return a list of args, None if incomplete, False on protocol error."""
        buf = self.buf
        nl = buf.find(b"\r\n")
        if nl < 0:
            return None
        if buf[:1] != b"*":  # inline command
            line = bytes(buf[:nl])
            del buf[: nl + 2]
            return line.split()
        n = int(buf[1:nl])
        pos = nl + 2
        args = []
        for _ in range(n):
            nl = buf.find(b"\r\n", pos)
            if nl < 0:
                return None
            if buf[pos : pos + 1] != b"$":
                return False
            ln = int(buf[pos + 1 : nl])
            start = nl + 2
            if len(buf) < start + ln + 2:
                return None
            args.append(bytes(buf[start : start + ln]))
            pos = start + ln + 2
        del buf[:pos]
        return args

    def dispatch(self, args: list[bytes]) -> bytes:
        name = args[0].upper()
        st = self.store
        if name == b"PING":
            return b"+PONG\r\n"
        if name == b"ADDJOB":
            if len(args) < 4:
                return b"-ERR wrong number of arguments for 'addjob' command\r\n"
            jid = st.new_id()
            st.jobs[jid] = (args[1], args[2])
            st.queues[args[1]].append(jid)
            return b"+" + jid + b"\r\n"
        if name == b"GETJOB":
            count, i, queues = 1, 1, None
            while i < len(args):
                opt = args[i].upper()
                if opt in (b"NOHANG", b"WITHCOUNTERS"):
                    i += 1
                elif opt in (b"TIMEOUT", b"COUNT"):
                    if opt == b"COUNT":
                        count = int(args[i + 1])
                    i += 2
                elif opt == b"FROM":
                    queues = args[i + 1 :]
                    break
                else:
                    return b"-ERR syntax error\r\n"
            if not queues:
                return b"-ERR syntax error\r\n"
            jobs = []
            for q in queues:
                dq = st.queues.get(q)
                while dq and len(jobs) < count:
                    jid = dq.popleft()
                    if jid in st.jobs:
                        jobs.append((q, jid, st.jobs[jid][1]))
            if not jobs:
                return b"*-1\r\n"
            parts = [b"*%d\r\n" % len(jobs)]
            for q, jid, body in jobs:
                parts.append(b"*3\r\n" + bulk(q) + bulk(jid) + bulk(body))
            return b"".join(parts)
        if name == b"ACKJOB":
            n = sum(1 for jid in args[1:] if st.jobs.pop(jid, None) is not None)
            return b":%d\r\n" % n
        if name == b"QLEN" and len(args) == 2:
            return b":%d\r\n" % len(st.queues.get(args[1], ()))
        return b"-ERR unknown command '%s'\r\n" % args[0]


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    store = Store()
    server = await loop.create_server(lambda: RespProtocol(store), host, port)
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
        asyncio.run(serve(a.host, a.port))
    else:
        uvloop.run(serve(a.host, a.port))


if __name__ == "__main__":
    main()
