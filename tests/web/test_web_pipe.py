"""disque-web's pipelined connections to a node (web/fastpath.py NodePipe), against a
small RESP server on loopback that answers when told: the order of replies, a second
connection when the first is held up, failures handed back for the client to retry."""

from __future__ import annotations

import asyncio

import pytest

from disquepy.web.fastpath import NodePipe, PipeError


class SlowNode:
    """Answers ``+<n>`` to the n-th command of each connection; a command whose first
    argument is ``slow`` is answered after ``delay`` seconds (and holds up the ones
    behind it, as a node answers a connection's commands in order)."""

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

    async def start(self) -> tuple[str, int]:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[:2]


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_replies_match_their_requests_and_one_connection_serves_a_fast_node():
    async def main():
        node = SlowNode()
        addr = await node.start()
        pipe = NodePipe(timeout=5)
        replies = await asyncio.gather(*[pipe.call(addr, ["fast", i]) for i in range(50)])
        assert replies == [str(n).encode() for n in range(1, 51)]
        assert node.connections == 1
        pipe.close()

    run(main())


def test_a_held_up_connection_gets_company():
    async def main():
        node = SlowNode(delay=2.0)
        addr = await node.start()
        pipe = NodePipe(timeout=5)
        slow = asyncio.ensure_future(pipe.call(addr, ["slow"]))
        await asyncio.sleep(0.05)  # the slow one is on the wire
        assert await pipe.call(addr, ["fast"]) == b"1"  # on a second connection
        assert not slow.done()  # answered before the one held up
        assert await slow == b"1" and node.connections == 2
        pipe.close()

    run(main())


def test_failures_are_handed_back():
    async def main():
        node = SlowNode(delay=2)
        addr = await node.start()
        pipe = NodePipe(timeout=0.5)
        with pytest.raises(PipeError, match="timeout"):
            await pipe.call(addr, ["slow"])
        with pytest.raises(PipeError, match="connection lost"):
            await pipe.call(addr, ["die"])
        assert await pipe.call(addr, ["fast"]) == b"1"  # a new connection
        node.server.close()
        await node.server.wait_closed()
        with pytest.raises(PipeError):
            await pipe.call(("127.0.0.1", 1), ["fast"])  # nothing listens there
        pipe.close()

    run(main())
