"""Server bugs the fault runs found, kept as regression tests (both fixed; see
"Server bugs the fault suite found" in docs/RELIABILITY.md)."""

from __future__ import annotations

import asyncio

import pytest

from disquepy.chaos.cluster import Cluster
from disquepy.chaos.resp import Conn


@pytest.mark.timeout(90)
def test_retry0_job_moved_by_federation_stays_gone_after_a_restart(tmp_path):
    """A new job was queued (and a RETRY 0 job pushed away to a remembered federation
    asker, with its DELJOB record) before its LOADJOB was appended: the AOF said
    delete-then-create and a restart brought the delivered, acked job back."""
    def need(cond, what):  # set-up steps fail with another error than the checked one
        if not cond:
            raise RuntimeError(f"set-up failed: {what}")

    async def scenario():
        c = Cluster(tmp_path, 2)
        try:
            await c.start_all()
            a, b = c.ports
            need(await c.admin.call(a, "CLUSTER", "MEET", "127.0.0.1", b) == b"OK", "meet")
            need(await c.wait_converged(20), "cluster")
            consumer = Conn("127.0.0.1", b)  # blocked on B: B asks A for jobs of q
            get = asyncio.create_task(
                consumer.call("GETJOB", "TIMEOUT", 5000, "FROM", "q", timeout=10))
            await asyncio.sleep(0.5)
            jid = await c.admin.call(a, "ADDJOB", "q", "body", 0, "REPLICATE", 1, "RETRY", 0)
            need((await get)[0][1] == jid, "job pushed to B and delivered there")
            need(await consumer.call("ACKJOB", jid) == 1, "ack on B")
            consumer.close()
            need(await c.admin.call(a, "SHOW", jid) is None, "A kept no copy")
            c.kill(0)  # kill -9; appendfsync always
            await c.start(0)
            return await c.admin.call(a, "SHOW", jid)
        finally:
            c.stop_all()

    assert asyncio.run(scenario()) is None  # the job must not come back


@pytest.mark.timeout(120)
def test_bus_links_recover_from_connect_timeouts_racing_the_connection(monkeypatch):
    """Seen in a fault run (a restarted node whose loop stalled past the 3 s connect
    timeout: 556 tracebacks, the cluster never re-formed): under uvloop a connect that
    times out as it completes gets connection_made on a transport that is then closed
    without connection_lost. Made likely here with connect timeouts of a fraction of
    a millisecond; every link must then deliver a frame through the real send path
    once connecting is possible again, with no error from a flush."""
    import logging
    import random

    import uvloop

    from disquepy.codec.bus import FrameReader, encode_frame
    from disquepy.server import bus as busmod

    peer = "ab" * 20
    rng = random.Random(1)

    class Sink(asyncio.Protocol):
        got: list = []

        def __init__(self) -> None:
            self.reader = FrameReader()

        def data_received(self, data: bytes) -> None:
            self.reader.feed(data)
            while (m := self.reader.gets()) is not False:
                Sink.got.append(m[4])

    async def scenario() -> tuple[list, int]:
        loop = asyncio.get_running_loop()
        errors: list = []
        loop.set_exception_handler(
            lambda lp, ctx: errors.append(f"{ctx.get('message')}: {ctx.get('exception')!r}"))
        srv = await loop.create_server(Sink, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        try:
            for k in range(300):
                monkeypatch.setattr(busmod, "CONNECT_TIMEOUT", rng.uniform(0.00002, 0.0004))
                bus = busmod.Bus(lambda m, ip: None, lambda nid, up: None, loop,
                                 logging.getLogger("bus-test"))
                bus.sync_links({peer: ("127.0.0.1", port)})
                await asyncio.sleep(0.003)
                monkeypatch.setattr(busmod, "CONNECT_TIMEOUT", 3.0)
                bus.send(peer, encode_frame([1, peer, 1, 0, k]))
                for _ in range(400):  # bounded: 4 s
                    if k in Sink.got:
                        break
                    await asyncio.sleep(0.01)
                bus.close()
                assert k in Sink.got, f"frame {k} never delivered: link {bus._links}"
        finally:
            srv.close()
        return errors, len(Sink.got)

    errors, delivered = uvloop.run(scenario())
    assert errors == [] and delivered == 300
