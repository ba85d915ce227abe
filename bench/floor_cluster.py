#!/usr/bin/env python3
"""The "floor" cluster for bench/cluster.py: the least work a Python cluster node can do
to replicate a job synchronously.

A floor node speaks RESP to clients on --port and the cluster bus framing
(disquepy.codec.bus: length-prefixed msgpack) to its peers on port+10000, with uvloop,
as disquepy does. It answers ``ADDJOB ... REPLICATE n`` (n > 1) the way a Disque node
does on the wire and nothing more:

- the origin sends each peer a REPLJOB item shaped like disquepy's (job ID, queue,
  body, seven integers, the node list), grouped per peer into one frame per loop
  iteration;
- a peer answers each item with a GOTJOB carrying the job ID, grouped the same way;
- the origin replies ``+<id>`` to the client once every peer has answered.

Nothing is stored, validated, scheduled or timed out; IDs come from a counter. Any other
request (ADDJOB without REPLICATE n > 1 included) gets a canned reply at once, as in
bench/floor_server.py. So the rate a floor cluster reaches is the most any Python asyncio
cluster with this message flow can do on this machine, and the ratio of that rate to a
server's REPLICATE 1 rate bounds the ratio that server's cluster can reach.

Usage: .venv/bin/python bench/floor_cluster.py --port P --peers P1,P2
(start one per port; --peers are the other nodes' client ports)
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from disquepy.codec.bus import FrameReader, encode_frame  # noqa: E402
from disquepy.codec.resp import make_reader  # noqa: E402

BUS_OFFSET = 10000
REPLJOB, GOTJOB = 1, 2  # this floor's own message types (its nodes talk to each other only)
OK = b"+OK\r\n"
CANNED = {b"PING": b"+PONG\r\n", b"ADDJOB": b"+D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1\r\n"}


def replicas(argv: list) -> int:
    """The REPLICATE count of an ADDJOB (1 when absent or unreadable)."""
    for i in range(4, len(argv) - 1):
        if argv[i].upper() == b"REPLICATE":
            try:
                return int(argv[i + 1])
            except ValueError:
                return 1
    return 1


class Node:
    """One floor node: its clients, its bus links and what is waiting for copies."""

    def __init__(self, port: int, peers: list[int]) -> None:
        self.port = port
        self.myid = f"{port:040x}"
        self.peers = peers  # client ports of the other nodes
        self.ids = [f"{p:040x}" for p in [port, *peers]]
        self.links: dict[int, asyncio.Transport] = {}  # peer port -> outbound bus link
        self.out: dict[int, list] = {}  # peer port -> items of this iteration, per type
        self.pending: dict[bytes, list] = {}  # job ID -> [client transport, copies missing]
        self.seq = 0
        self.flush_scheduled = False
        self.loop = asyncio.get_running_loop()

    def queue(self, peer: int, mtype: int, item) -> None:
        per = self.out.get(peer)
        if per is None:
            per = self.out[peer] = [[], []]
        per[mtype - 1].append(item)
        if not self.flush_scheduled:
            self.flush_scheduled = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        """One frame per peer per loop iteration: [BATCH-like list of both types]."""
        self.flush_scheduled = False
        out, self.out = self.out, {}
        for peer, (repl, got) in out.items():
            t = self.links.get(peer)
            if t is None or t.is_closing():
                continue
            msg = [0, self.myid, self.port, 0, repl, got]
            t.write(encode_frame(msg))

    def addjob(self, transport, argv: list) -> bytes | None:
        n = replicas(argv)
        if n <= 1 or not self.peers:
            return CANNED[b"ADDJOB"]
        self.seq += 1
        jid = b"D-%08x-%024x-05a1" % (self.port, self.seq)
        item = [jid, argv[1], argv[2], self.seq * 1_000_000, 86400, 0, 300, n, 0, 0,
                self.ids]
        self.pending[jid] = [transport, len(self.peers)]
        for p in self.peers:
            self.queue(p, REPLJOB, item)
        return None

    def on_frame(self, msg: list) -> None:
        sender, repl, got = msg[2], msg[4], msg[5]
        for item in repl:
            self.queue(sender, GOTJOB, item[0])
        pending = self.pending
        for jid in got:
            entry = pending.get(jid)
            if entry is None:
                continue
            entry[1] -= 1
            if entry[1] == 0:
                del pending[jid]
                t = entry[0]
                if not t.is_closing():
                    t.write(b"+" + jid + b"\r\n")


class ClientProtocol(asyncio.Protocol):
    def __init__(self, node: Node) -> None:
        self.node = node
        self.transport = None
        self.reader = make_reader()

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        out = []
        try:
            self.reader.feed(data)
            while (argv := self.reader.gets()) is not False:
                name = argv[0].upper()
                if name == b"ADDJOB" and len(argv) >= 4:
                    reply = self.node.addjob(self.transport, argv)
                    if reply is not None:
                        out.append(reply)
                else:
                    out.append(CANNED.get(name, OK))
        except Exception:  # malformed input (not from bench/loadgen): drop the client
            self.transport.close()
            return
        if out:
            self.transport.write(b"".join(out))


class BusProtocol(asyncio.Protocol):
    """An inbound bus link: frames from one peer."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.reader = FrameReader()

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        on_frame = self.node.on_frame
        while (msg := self.reader.gets()) is not False:
            on_frame(msg)


async def connect_peers(node: Node, host: str, timeout: float = 30.0) -> None:
    """Outbound bus links to every peer, retried until the peer listens."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    for p in node.peers:
        while True:
            try:
                t, _ = await loop.create_connection(asyncio.Protocol, host, p + BUS_OFFSET)
                node.links[p] = t
                break
            except OSError:
                if loop.time() > deadline:
                    raise
                await asyncio.sleep(0.05)


async def serve(host: str, port: int, peers: list[int]) -> None:
    loop = asyncio.get_running_loop()
    node = Node(port, peers)
    bus = await loop.create_server(lambda: BusProtocol(node), host, port + BUS_OFFSET)
    clients = await loop.create_server(lambda: ClientProtocol(node), host, port)
    await connect_peers(node, host)
    stop = loop.create_future()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set_result, None)
    async with bus, clients:
        await stop


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=7711)
    ap.add_argument("--peers", default="", help="client ports of the other floor nodes")
    a = ap.parse_args()
    peers = [int(p) for p in a.peers.split(",") if p]
    try:
        import uvloop  # type: ignore
    except ImportError:
        sys.exit("floor_cluster: uvloop is not installed; run it with the project's venv python")
    uvloop.run(serve(a.host, a.port, peers))


if __name__ == "__main__":
    main()
