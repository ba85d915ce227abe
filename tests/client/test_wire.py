"""The asyncio client's batches on the wire (client/batch.py's Wire): concurrent add_job
calls sharing writes, replies matched to their callers, one error per job, a held-up
connection getting company, failures handed back; on a real node and on a small RESP
server that answers when told."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aredis
import redis.exceptions as rexc

from disquepy.client import AsyncDisque, PausedError
from disquepy.client.batch import Wire, encode


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_concurrent_adds_each_get_their_own_job(server, dq):
    async def main():
        async with AsyncDisque(f"127.0.0.1:{server.port}", socket_timeout=10) as c:
            ids = await asyncio.gather(*[c.add_job("pp", f"job {i}", 5000,
                                                   idempotent=f"k{i}")
                                         for i in range(300)])
            again = await c.add_job("pp", "job 7", 5000, idempotent="k7")
            return ids, again

    ids, again = run(main())
    assert len(set(ids)) == 300 and again == ids[7]
    for i, jid in enumerate(ids):
        assert dq.show(jid)["body"] == f"job {i}".encode()
    assert dq.qlen("pp") == 300


def test_an_error_reply_is_that_jobs_alone(server, dq):
    dq.add_job("stopped", "x")
    dq.pause("stopped", "in")

    async def main():
        async with AsyncDisque(f"127.0.0.1:{server.port}", socket_timeout=10) as c:
            return await asyncio.gather(
                c.add_job("open", "a"), c.add_job("stopped", "b"),
                c.add_job("open", "c"), return_exceptions=True)

    a, b, c = run(main())
    assert isinstance(b, PausedError)
    assert dq.show(a)["body"] == b"a" and dq.show(c)["body"] == b"c"


def test_the_node_going_away_and_coming_back(server_factory):
    s = server_factory()

    async def main():
        async with AsyncDisque(f"127.0.0.1:{s.port}", socket_timeout=5) as c:
            first = await c.add_job("rs", "1", idempotent="one")
            s.kill()
            with pytest.raises(rexc.ConnectionError):
                await c.add_job("rs", "2")
            s.start()
            return first, await c.add_job("rs", "3")

    first, second = run(main())
    assert first != second


class SlowNode:
    """Answers ``+<n>`` to the n-th command of each connection; a command whose first
    argument is ``slow`` is answered after ``delay`` seconds (holding up the ones behind
    it, as a node answers a connection's commands in order); ``die`` closes."""

    def __init__(self, delay: float = 0.3) -> None:
        self.delay = delay
        self.connections = 0
        self.server: asyncio.base_events.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        n = 0
        try:
            while True:
                head = await reader.readline()
                if not head:
                    return
                args = []
                for _ in range(int(head[1:])):
                    size = int((await reader.readline())[1:])
                    args.append((await reader.readexactly(size + 2))[:-2])
                if args[0].upper() == b"CLIENT":  # redis-py's SETINFO on connecting
                    writer.write(b"+OK\r\n")
                    continue
                n += 1
                if args[0] == b"slow":
                    await asyncio.sleep(self.delay)
                if args[0] == b"die":
                    writer.close()
                    return
                writer.write(b"+%d\r\n" % n)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return

    async def start(self) -> int:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]


def wire_to(port: int, timeout: float) -> Wire:
    return Wire(aredis.ConnectionPool(host="127.0.0.1", port=port, protocol=2,
                                      max_connections=Wire.MAX_LANES), timeout)


async def call(wire: Wire, *args: object) -> object:
    """One command through the wire: its reply (an error reply as an instance)."""
    (reply,) = await wire.call(encode(args), 1)
    return reply


def test_replies_in_order_on_one_connection_for_a_fast_node():
    async def main():
        node = SlowNode()
        wire = wire_to(await node.start(), 5)
        replies = await asyncio.gather(*[call(wire, "fast", i) for i in range(50)])
        assert replies == [str(n).encode() for n in range(1, 51)]
        assert node.connections == 1
        # batches of several commands get their own replies, in order
        two, three = await asyncio.gather(
            wire.call(encode(["fast"]) * 2, 2), wire.call(encode(["fast"]) * 3, 3))
        assert two == [b"51", b"52"] and three == [b"53", b"54", b"55"]
        await wire.close()

    run(main())


def test_calls_of_one_loop_iteration_share_one_write(server, monkeypatch):
    """Concurrent add_job calls go out together: one write for 100 jobs of one
    iteration; while its replies are awaited, what comes meanwhile waits for them and
    goes out in one write after."""
    writes = []

    async def main():
        async with AsyncDisque(f"127.0.0.1:{server.port}") as c:
            await c.add_job("w", "first")  # connected: HELLO, a lane
            (lane,) = c._wires[c.address].lanes
            real = lane.transport.write
            monkeypatch.setattr(lane.transport, "write",
                                lambda data: (writes.append(data.count(b"ADDJOB")),
                                              real(data))[1], raising=False)
            ids = await asyncio.gather(*[c.add_job("w", f"{i}") for i in range(100)])
            assert writes == [100]
            first = asyncio.gather(*[c.add_job("w", f"a{i}") for i in range(10)])
            await asyncio.sleep(0)  # the first ten written, their replies not read yet
            second = asyncio.gather(*[c.add_job("w", f"b{i}") for i in range(10)])
            await first
            await second
            assert writes == [100, 10, 10]
            return ids

    ids = run(main())
    assert len(set(ids)) == 100


def test_a_cancelled_caller_leaves_the_others_their_replies():
    async def main():
        node = SlowNode(delay=0.3)
        wire = wire_to(await node.start(), 5)
        slow = asyncio.ensure_future(call(wire, "slow"))
        behind = asyncio.ensure_future(wire.call(encode(["x"]) * 2, 2))
        await asyncio.sleep(0.05)
        slow.cancel()  # its reply still comes, and is dropped
        assert await behind == [b"2", b"3"]
        assert await call(wire, "fast") == b"4" and node.connections == 1
        await wire.close()

    run(main())


def test_a_held_up_connection_gets_company():
    async def main():
        node = SlowNode(delay=2.0)
        wire = wire_to(await node.start(), 5)
        slow = asyncio.ensure_future(call(wire, "slow"))
        await asyncio.sleep(0.05)  # the slow one is on the wire
        assert await call(wire, "fast") == b"1"  # on a second connection
        assert not slow.done()  # answered before the one held up
        assert await slow == b"1" and node.connections == 2
        await wire.close()

    run(main())


def test_failures_are_handed_back():
    async def main():
        node = SlowNode(delay=2)
        port = await node.start()
        wire = wire_to(port, 0.5)
        with pytest.raises(rexc.TimeoutError, match="no reply within"):
            await call(wire, "slow")
        with pytest.raises(rexc.ConnectionError):
            await call(wire, "die")
        assert await call(wire, "fast") == b"1"  # a new connection
        assert len(wire.lanes) == 1
        await wire.close()
        node.server.close()
        await node.server.wait_closed()
        with pytest.raises(rexc.ConnectionError):
            await call(wire_to(port, 1), "fast")  # nothing listens there

    run(main())
