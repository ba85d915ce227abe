"""AsyncDisque.add_job_pipelined and the pipe under it (client/addpipe.py): replies
matched to their requests, one error per job, a held-up connection getting company,
failures handed back; on a real node and on a small RESP server that answers when told."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aredis
import redis.exceptions as rexc

from disquepy.client import AsyncDisque, PausedError
from disquepy.client.addpipe import AddPipe


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_concurrent_adds_each_get_their_own_job(server, dq):
    async def main():
        async with AsyncDisque(f"127.0.0.1:{server.port}", socket_timeout=10) as c:
            ids = await asyncio.gather(*[c.add_job_pipelined("pp", f"job {i}", 5000,
                                                             idempotent=f"k{i}")
                                         for i in range(300)])
            again = await c.add_job_pipelined("pp", "job 7", 5000, idempotent="k7")
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
                c.add_job_pipelined("open", "a"), c.add_job_pipelined("stopped", "b"),
                c.add_job_pipelined("open", "c"), return_exceptions=True)

    a, b, c = run(main())
    assert isinstance(b, PausedError)
    assert dq.show(a)["body"] == b"a" and dq.show(c)["body"] == b"c"


def test_the_node_going_away_and_coming_back(server_factory):
    s = server_factory()

    async def main():
        async with AsyncDisque(f"127.0.0.1:{s.port}", socket_timeout=5) as c:
            first = await c.add_job_pipelined("rs", "1", idempotent="one")
            s.kill()
            with pytest.raises(rexc.ConnectionError):
                await c.add_job_pipelined("rs", "2")
            s.start()
            return first, await c.add_job_pipelined("rs", "3")

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


def pipe_to(port: int, timeout: float) -> AddPipe:
    return AddPipe(aredis.ConnectionPool(host="127.0.0.1", port=port, protocol=2,
                                         max_connections=AddPipe.MAX_CONNS), timeout)


def test_replies_in_order_on_one_connection_for_a_fast_node():
    async def main():
        node = SlowNode()
        pipe = pipe_to(await node.start(), 5)
        replies = await asyncio.gather(*[pipe.call(["fast", i]) for i in range(50)])
        assert replies == [str(n).encode() for n in range(1, 51)]
        assert node.connections == 1
        await pipe.close()

    run(main())


def test_a_held_up_connection_gets_company():
    async def main():
        node = SlowNode(delay=2.0)
        pipe = pipe_to(await node.start(), 5)
        slow = asyncio.ensure_future(pipe.call(["slow"]))
        await asyncio.sleep(0.05)  # the slow one is on the wire
        assert await pipe.call(["fast"]) == b"1"  # on a second connection
        assert not slow.done()  # answered before the one held up
        assert await slow == b"1" and node.connections == 2
        await pipe.close()

    run(main())


def test_failures_are_handed_back():
    async def main():
        node = SlowNode(delay=2)
        port = await node.start()
        pipe = pipe_to(port, 0.5)
        with pytest.raises(rexc.TimeoutError, match="no reply within"):
            await pipe.call(["slow"])
        with pytest.raises(rexc.ConnectionError):
            await pipe.call(["die"])
        assert await pipe.call(["fast"]) == b"1"  # a new connection
        await pipe.close()
        node.server.close()
        await node.server.wait_closed()
        with pytest.raises(rexc.ConnectionError):
            await pipe_to(port, 1).call(["fast"])  # nothing listens there

    run(main())
