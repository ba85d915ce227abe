"""Tests for disquepy.server.bus: the cluster bus transport over real loopback sockets.

Each test runs its own event loop (asyncio and uvloop) with every wait bounded.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct

import msgpack
import pytest

from disquepy.codec.bus import encode_frame
from disquepy.server import bus as busmod
from disquepy.server.bus import Bus

try:
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None

LOOPS = ["asyncio"] + (["uvloop"] if uvloop is not None else [])
TIMEOUT = 5.0
LOG = logging.getLogger("disquepy.test.bus")
IP = "127.0.0.1"

ID_A = "a" * 40
ID_B = "b" * 40
ID_C = "c" * 40


@pytest.fixture(params=LOOPS)
def run(request):
    """Run a coroutine function to completion on a fresh loop of the given kind."""

    def runner(fn):
        async def bounded():
            await asyncio.wait_for(fn(), 20.0)

        if request.param == "uvloop":
            return uvloop.run(bounded())
        return asyncio.run(bounded())

    return runner


def reserve_port() -> socket.socket:
    """A bound, not listening socket: connecting to its port is refused, and no other
    test can take the port until it is closed."""
    s = socket.socket()
    s.bind((IP, 0))
    return s


def raw_frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def msg(sender: str, *fields) -> list:
    return [1, sender, 7711, 0, *fields]


class Node:
    """A Bus plus what its callbacks saw."""

    def __init__(self, node_id: str, **kw) -> None:
        self.id = node_id
        self.frames: list = []
        self.ips: list = []
        self.links: list = []
        self.bus = Bus(self.on_frame, self.on_link, asyncio.get_running_loop(), LOG, **kw)

    def on_frame(self, m: list, ip: str) -> None:
        self.frames.append(m)
        self.ips.append(ip)

    def on_link(self, node_id: str, up: bool) -> None:
        self.links.append((node_id, up))

    async def listen(self, port: int = 0) -> Node:
        await self.bus.listen([IP], port)
        return self

    @property
    def addr(self) -> tuple[str, int]:
        return self.bus.addresses[0]

    def payloads(self, sender: str | None = None) -> list:
        return [m[4] for m in self.frames if sender is None or m[1] == sender]


async def until(pred, timeout: float = TIMEOUT) -> None:
    async def poll():
        while not pred():
            await asyncio.sleep(0.005)

    await asyncio.wait_for(poll(), timeout)


async def started(*ids: str) -> list[Node]:
    return [await Node(i).listen() for i in ids]


def mesh(nodes: list[Node]) -> None:
    for n in nodes:
        n.bus.sync_links({m.id: m.addr for m in nodes if m is not n})


def close_all(*nodes: Node) -> None:
    for n in nodes:
        n.bus.close()


# --------------------------------------------------------------------------- tests
def test_three_nodes_exchange_frames_in_order(run):
    async def main():
        a, b, c = nodes = await started(ID_A, ID_B, ID_C)
        mesh(nodes)
        for i in range(100):
            a.bus.send(ID_B, encode_frame(msg(ID_A, i)))
            a.bus.send_many([ID_B, ID_C], encode_frame(msg(ID_A, 1000 + i)))
            b.bus.send(ID_C, encode_frame(msg(ID_B, i)))
            c.bus.send(ID_A, encode_frame(msg(ID_C, i)))
        await until(lambda: len(b.frames) == 200 and len(c.frames) == 200 and len(a.frames) == 100)
        want = [x for i in range(100) for x in (i, 1000 + i)]
        assert b.payloads(ID_A) == want
        assert c.payloads(ID_A) == [1000 + i for i in range(100)]
        assert c.payloads(ID_B) == list(range(100))
        assert a.payloads(ID_C) == list(range(100))
        assert set(a.ips + b.ips + c.ips) == {IP}
        await until(lambda: all(len(n.links) == 2 for n in nodes))
        assert sorted(a.links) == [(ID_B, True), (ID_C, True)]
        assert a.bus.is_up(ID_B) and a.bus.is_up(ID_C)
        st = a.bus.stats()
        assert st["frames_sent"] == 300
        assert st["frames_received"] == 100
        assert st["links_up"] == 2 and st["links"] == 2
        assert st["inbound_connections"] == 2
        assert st["bytes_sent"] == sum(
            len(encode_frame(msg(ID_A, i))) + 2 * len(encode_frame(msg(ID_A, 1000 + i)))
            for i in range(100)
        )
        close_all(*nodes)

    run(main)


def test_frames_sent_before_the_peer_listens_are_delivered(run):
    async def main():
        reserved = reserve_port()
        port = reserved.getsockname()[1]
        a = Node(ID_A)
        a.bus.sync_links({ID_B: (IP, port)})
        for i in range(50):
            a.bus.send(ID_B, encode_frame(msg(ID_A, i)))
        await until(lambda: a.bus.stats()["connect_failures"] >= 2)
        assert a.links == []  # never up yet: no callback
        assert a.bus.stats()["queued_frames"] == 50
        reserved.close()
        b = await Node(ID_B).listen(port)
        await until(lambda: len(b.frames) == 50)
        assert b.payloads() == list(range(50))
        assert a.links == [(ID_B, True)]
        st = a.bus.stats()
        assert st["reconnects"] >= 2 and st["queued_frames"] == 0
        close_all(a, b)

    run(main)


def test_link_down_and_up_callbacks_when_peer_restarts(run):
    async def main():
        a, b = await started(ID_A, ID_B)
        port = b.addr[1]
        a.bus.sync_links({ID_B: b.addr})
        await until(lambda: a.links == [(ID_B, True)])
        b.bus.close()
        await b.bus.wait_closed()
        await until(lambda: a.links == [(ID_B, True), (ID_B, False)])
        assert not a.bus.is_up(ID_B)
        a.bus.send(ID_B, encode_frame(msg(ID_A, "while down")))
        b2 = await Node(ID_B).listen(port)
        await until(lambda: len(a.links) == 3)
        assert a.links[2] == (ID_B, True)
        await until(lambda: b2.payloads() == ["while down"])
        st = a.bus.stats()
        assert st["links_lost"] == 1 and st["connects"] == 2
        close_all(a, b2)

    run(main)


def test_sync_links_removes_and_moves_links(run):
    async def main():
        a, b, c = await started(ID_A, ID_B, ID_C)
        a.bus.sync_links({ID_B: b.addr})
        a.bus.send(ID_B, encode_frame(msg(ID_A, 1)))
        await until(lambda: b.payloads() == [1])
        assert b.bus.stats()["inbound_connections"] == 1
        # the address of "B" changes to C's: the link moves there
        a.bus.sync_links({ID_B: c.addr})
        a.bus.send(ID_B, encode_frame(msg(ID_A, 2)))
        await until(lambda: c.payloads() == [2])
        await until(lambda: b.bus.stats()["inbound_connections"] == 0)
        assert a.links == [(ID_B, True), (ID_B, False), (ID_B, True)]
        # removed: the connection closes, later sends are counted and dropped
        a.bus.sync_links({})
        await until(lambda: c.bus.stats()["inbound_connections"] == 0)
        a.bus.send(ID_B, encode_frame(msg(ID_A, 3)))
        st = a.bus.stats()
        assert st["links"] == 0 and st["dropped_no_link"] == 1
        assert len(a.links) == 3  # removal fires no callback
        assert b.payloads() == [1] and c.payloads() == [2]
        close_all(a, b, c)

    run(main)


def test_set_drop_both_directions_and_wildcard(run):
    async def main():
        a, b, c = nodes = await started(ID_A, ID_B, ID_C)
        mesh(nodes)
        a.bus.set_drop(ID_B, True)
        a.bus.send(ID_B, encode_frame(msg(ID_A, "lost")))
        b.bus.send(ID_A, encode_frame(msg(ID_B, "lost")))
        c.bus.send(ID_A, encode_frame(msg(ID_C, "kept")))
        a.bus.send(ID_C, encode_frame(msg(ID_A, "kept")))
        await until(lambda: a.payloads(ID_C) == ["kept"] and c.payloads() == ["kept"])
        # frames from B really reach A's socket and are dropped there: wait for them
        await until(lambda: a.bus.stats()["dropped_injected_in"] == 1)
        a.bus.set_drop(ID_B, False)
        a.bus.send(ID_B, encode_frame(msg(ID_A, "after")))
        b.bus.send(ID_A, encode_frame(msg(ID_B, "after")))
        await until(lambda: b.payloads() == ["after"] and a.payloads(ID_B) == ["after"])

        a.bus.set_drop("*", True)  # A is partitioned away
        for n in (b, c):
            n.bus.send(ID_A, encode_frame(msg(n.id, "lost")))
        a.bus.send_many([ID_B, ID_C], encode_frame(msg(ID_A, "lost")))
        b.bus.send(ID_C, encode_frame(msg(ID_B, "b-c")))  # others still talk
        await until(lambda: a.bus.stats()["dropped_injected_in"] == 3)
        await until(lambda: c.payloads(ID_B) == ["b-c"])
        a.bus.set_drop("*", False)
        for n in (b, c):
            n.bus.send(ID_A, encode_frame(msg(n.id, "back")))
            a.bus.send(n.id, encode_frame(msg(ID_A, "back")))
        await until(
            lambda: a.payloads(ID_B) == ["after", "back"] and a.payloads(ID_C) == ["kept", "back"]
        )
        await until(
            lambda: b.payloads() == ["after", "back"] and c.payloads(ID_A) == ["kept", "back"]
        )
        st = a.bus.stats()
        assert st["dropped_injected_out"] == 3 and st["dropped_injected_in"] == 3

        # "*" off heals per-node drops too
        a.bus.set_drop(ID_B, True)
        a.bus.set_drop(ID_C, True)
        a.bus.set_drop("*", False)
        b.bus.send(ID_A, encode_frame(msg(ID_B, "healed")))
        a.bus.send(ID_C, encode_frame(msg(ID_A, "healed")))
        await until(lambda: a.payloads(ID_B)[-1] == "healed" and c.payloads(ID_A)[-1] == "healed")
        close_all(*nodes)

    run(main)


def test_garbage_closes_that_connection_only(run):
    async def main():
        a, c = await started(ID_A, ID_C)
        c.bus.sync_links({ID_A: a.addr})
        garbage = [
            b"\xff\xff\xff\xff" + b"x" * 100,  # length over the limit
            struct.pack(">I", 3) + b"\xc1\xc1\xc1",  # not msgpack
            encode_frame([1, 2]),  # not a bus message (too short)
            raw_frame(msgpack.packb({"a": 1})),  # not a list
            raw_frame(msgpack.packb(["1", ID_B, 1, 0])),  # type is not an int
            struct.pack(">I", 5) + msgpack.packb([1, [ID_B], 1, 0]),  # truncated
        ]
        for i, g in enumerate(garbage):
            reader, writer = await asyncio.open_connection(*a.addr)
            writer.write(g)
            c.bus.send(ID_A, encode_frame(msg(ID_C, i)))
            data = await asyncio.wait_for(reader.read(), TIMEOUT)  # EOF: closed by A
            assert data == b""
            writer.close()
        # a sender id that cannot be looked up in the drop set
        a.bus.set_drop(ID_B, True)
        reader, writer = await asyncio.open_connection(*a.addr)
        writer.write(encode_frame([1, [ID_B], 1, 0]))
        assert await asyncio.wait_for(reader.read(), TIMEOUT) == b""
        writer.close()
        a.bus.set_drop(ID_B, False)
        await until(lambda: len(a.frames) == len(garbage))
        c.bus.send(ID_A, encode_frame(msg(ID_C, "still")))
        await until(lambda: a.payloads()[-1:] == ["still"])
        st = a.bus.stats()
        assert st["protocol_errors"] == len(garbage) + 1  # the unhashable id too
        assert a.payloads() == [*range(len(garbage)), "still"]
        assert c.links == [(ID_A, True)]  # the good peer's link never dropped
        close_all(a, c)

    run(main)


def test_raising_on_frame_closes_connection_not_process(run):
    async def main():
        a, b = await started(ID_A, ID_B)
        bad = []

        def on_frame(m, ip):
            if m[4] == "boom":
                bad.append(m)
                raise ValueError("driver bug")
            a.frames.append(m)

        a.bus.on_frame = on_frame
        b.bus.sync_links({ID_A: a.addr})
        b.bus.send(ID_A, encode_frame(msg(ID_B, "boom")))
        await until(lambda: bad and b.links == [(ID_A, True), (ID_A, False)])
        b.bus.send(ID_A, encode_frame(msg(ID_B, "ok")))
        await until(lambda: a.payloads() == ["ok"])
        assert a.bus.stats()["protocol_errors"] == 1
        close_all(a, b)

    run(main)


def test_inbound_max_frame_limit(run):
    async def main():
        a = await Node(ID_A, max_frame=1024).listen()
        b = await Node(ID_B).listen()
        b.bus.sync_links({ID_A: a.addr})
        b.bus.send(ID_A, encode_frame(msg(ID_B, b"x" * 100)))
        b.bus.send(ID_A, encode_frame(msg(ID_B, b"x" * 2000)))  # over A's limit
        await until(lambda: a.bus.stats()["protocol_errors"] == 1)
        assert a.payloads() == [b"x" * 100]
        await until(lambda: (ID_A, False) in b.links)
        close_all(a, b)

    run(main)


def test_send_queue_bound_drops_oldest(run):
    async def main():
        reserved, other = reserve_port(), reserve_port()
        port = reserved.getsockname()[1]
        a = Node(ID_A, max_queue_frames=100)
        a.bus.sync_links({ID_B: (IP, port), ID_C: other.getsockname()})
        for i in range(250):
            a.bus.send(ID_B, encode_frame(msg(ID_A, i)))
        st = a.bus.stats()
        assert st["dropped_overflow"] == 150 and st["queued_frames"] == 100
        info = a.bus.link_info()[ID_B]
        assert info["dropped_overflow"] == 150 and info["state"] in ("connecting", "down")
        assert info["addr"] == (IP, port) and info["queued_frames"] == 100
        reserved.close()
        b = await Node(ID_B).listen(port)
        await until(lambda: len(b.frames) == 100)
        assert b.payloads() == list(range(150, 250))
        a.bus.close()
        other.close()

        # the byte bound: frames of ~1 KiB, 10 KiB allowed
        a2 = Node(ID_A, max_queue_bytes=10 * 1024)
        a2.bus.sync_links({ID_B: (IP, port)})
        frames = [encode_frame(msg(ID_A, i, b"y" * 1000)) for i in range(30)]
        for f in frames:
            a2.bus.send(ID_B, f)
        st = a2.bus.stats()
        assert st["queued_bytes"] <= 10 * 1024
        assert st["queued_frames"] + st["dropped_overflow"] == 30
        kept = st["queued_frames"]
        await until(lambda: len(b.frames) == 100 + kept)
        assert [m[4] for m in b.frames[100:]] == list(range(30 - kept, 30))
        # one frame larger than the whole bound is still sent (the newest is kept)
        a2.bus.send(ID_B, encode_frame(msg(ID_A, "big", b"z" * 20000)))
        await until(lambda: b.frames[-1][4] == "big")
        close_all(a2, b)

    run(main)


def test_large_frame_arrives_intact(run):
    async def main():
        a, b = await started(ID_A, ID_B)
        a.bus.sync_links({ID_B: b.addr})
        blob = bytes(range(256)) * (8 * 4096)  # 8 MiB
        a.bus.send(ID_B, encode_frame(msg(ID_A, "before")))
        a.bus.send(ID_B, encode_frame(msg(ID_A, blob)))
        a.bus.send(ID_B, encode_frame(msg(ID_A, "after")))
        await until(lambda: len(b.frames) == 3)
        assert b.payloads()[0] == "before" and b.payloads()[2] == "after"
        assert b.payloads()[1] == blob
        close_all(a, b)

    run(main)


def test_many_frames_in_order(run):
    async def main():
        a, b, c = await started(ID_A, ID_B, ID_C)
        a.bus.sync_links({ID_B: b.addr, ID_C: c.addr})
        await until(lambda: len(a.links) == 2)
        n = 10_000
        for i in range(n):
            a.bus.send_many((ID_B, ID_C), encode_frame(msg(ID_A, i)))
            if i % 1000 == 0:
                await asyncio.sleep(0)  # some batches while others are in flight
        await until(lambda: len(b.frames) == n and len(c.frames) == n)
        assert b.payloads() == list(range(n)) == c.payloads()
        assert b.bus.stats()["frames_received"] == n
        assert a.bus.stats()["frames_sent"] == 2 * n
        close_all(a, b, c)

    run(main)


def test_pause_writing_keeps_frames_queued(run):
    async def main():
        a, b = await started(ID_A, ID_B)
        a.bus.sync_links({ID_B: b.addr})
        await until(lambda: a.links == [(ID_B, True)])
        link = a.bus._links[ID_B]
        proto = link.transport.get_protocol()
        proto.pause_writing()
        for i in range(10):
            a.bus.send(ID_B, encode_frame(msg(ID_A, i)))
        await asyncio.sleep(0.05)
        assert b.frames == [] and a.bus.stats()["queued_frames"] == 10
        proto.resume_writing()
        await until(lambda: len(b.frames) == 10)
        assert b.payloads() == list(range(10))
        close_all(a, b)

    run(main)


def test_listen_failure_raises_oserror(run):
    async def main():
        a = await Node(ID_A).listen()
        b = Node(ID_B)
        with pytest.raises(OSError):
            await b.bus.listen([IP], a.addr[1])
        assert b.bus.addresses == []
        close_all(a, b)

    run(main)


def test_close_stops_everything(run):
    async def main():
        a, b = await started(ID_A, ID_B)
        mesh([a, b])
        await until(lambda: len(a.links) == 1 and len(b.links) == 1)
        addr = a.addr
        a.bus.close()
        await a.bus.wait_closed()
        await until(lambda: b.links == [(ID_A, True), (ID_A, False)])
        a.bus.send(ID_B, encode_frame(msg(ID_A, "x")))
        assert a.links == [(ID_B, True)]  # close fires no callbacks
        assert a.bus.stats()["links"] == 0
        assert a.bus.stats()["inbound_connections"] == 0
        with pytest.raises(OSError):
            await asyncio.open_connection(*addr)
        b.bus.close()

    run(main)


def test_peer_not_reading_pauses_and_bounds_memory(run):
    async def main():
        # a listener that never accepts: the kernel buffers fill, then the transport's
        srv = socket.socket()
        srv.bind((IP, 0))
        srv.listen(1)
        a = Node(ID_A, max_queue_bytes=1 << 20)
        a.bus.sync_links({ID_B: srv.getsockname()})
        await until(lambda: a.links == [(ID_B, True)])
        frame = encode_frame(msg(ID_A, b"x" * 65536))
        for _ in range(5000):
            for _ in range(8):
                a.bus.send(ID_B, frame)
            await asyncio.sleep(0)
            if a.bus.stats()["dropped_overflow"]:
                break
        link = a.bus._links[ID_B]
        st = a.bus.stats()
        assert st["dropped_overflow"] > 0 and link.paused
        assert st["queued_bytes"] <= 1 << 20
        assert link.transport.get_write_buffer_size() <= busmod.WRITE_HIGH_WATER + 9 * len(frame)
        a.bus.close()
        srv.close()

    run(main)


def test_bus_sockets_have_nodelay_and_keepalive(run):
    async def main():
        a, b = await started(ID_A, ID_B)
        a.bus.sync_links({ID_B: b.addr})
        await until(lambda: a.links == [(ID_B, True)] and b.bus._inbound)
        out_sock = a.bus._links[ID_B].transport.get_extra_info("socket")
        in_sock = next(iter(b.bus._inbound)).transport.get_extra_info("socket")
        for s in (out_sock, in_sock):
            assert s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            assert s.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
        close_all(a, b)

    run(main)


def test_backoff_doubles_with_jitter_up_to_the_cap(run):
    class HalfRng:
        def random(self):
            return 0.5  # jitter factor 1.0

    async def main():
        loop = asyncio.get_running_loop()
        a = Node(ID_A, rng=HalfRng())
        reserved = reserve_port()
        a.bus.sync_links({ID_B: reserved.getsockname()})
        link = a.bus._links[ID_B]
        delays = []
        for _ in range(8):
            if link.retry is not None:
                link.retry.cancel()
            t = loop.time()
            a.bus._schedule_retry(link)
            delays.append(link.retry.when() - t)
        assert delays == pytest.approx([0.02, 0.04, 0.08, 0.1, 0.1, 0.1, 0.1, 0.1], abs=0.005)
        assert busmod.BACKOFF_MIN == 0.02 and busmod.BACKOFF_MAX == 0.1
        a.bus.close()
        reserved.close()

    run(main)


def test_link_on_a_transport_closed_without_connection_lost_reconnects(run):
    """uvloop can close a fresh transport (its connect timed out as it completed)
    without ever calling connection_lost. The next flush must notice, reconnect and
    deliver what was queued, not raise on every flush (found by the fault suite)."""

    async def main():
        errors: list = []
        asyncio.get_running_loop().set_exception_handler(
            lambda loop, ctx: errors.append(ctx.get("message")))
        a, b = await started(ID_A, ID_B)
        a.bus.sync_links({ID_B: b.addr})
        await until(lambda: a.links == [(ID_B, True)])
        link = a.bus._links[ID_B]
        link.transport.get_protocol().gen = -1  # its connection_lost will be ignored
        link.transport.close()
        await asyncio.sleep(0.05)
        assert link.state == "up"  # what the bug left: up on a closed transport
        for i in range(3):
            a.bus.send(ID_B, encode_frame(msg(ID_A, i)))
        await until(lambda: len(b.frames) == 3)
        assert b.payloads() == [0, 1, 2]
        assert a.links == [(ID_B, True), (ID_B, False), (ID_B, True)]
        assert errors == []
        close_all(a, b)

    run(main)
