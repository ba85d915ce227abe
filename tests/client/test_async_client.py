"""The asyncio client on real nodes: the same commands, pipelines, failover on kill -9 and
on -LEAVING."""

from __future__ import annotations

import asyncio
import signal

import pytest

from disquepy.client import AsyncDisque, Job, NoJobError, ResponseError


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_async_commands(server):
    async def main():
        async with AsyncDisque(f"127.0.0.1:{server.port}") as c:
            jid = await c.add_job("q", b"hello", retry=9)
            assert c.node == f"127.0.0.1:{server.port}"
            assert (await c.show(jid))["retry"] == 9
            assert await c.qlen("q") == 1
            assert [j.id for j in await c.qpeek("q", 5)] == [jid]
            assert (await c.qstat("q"))["len"] == 1
            assert [x async for x in c.jscan()] == [jid]
            assert [x async for x in c.qscan()] == ["q"]
            jobs = await c.get_jobs(["nothing", "q"], with_counters=True)
            assert jobs == [Job(jid, "q", b"hello", 0, 0)]
            assert await c.working(jid) == 9
            assert await c.nack(jid) == 1
            (again,) = await c.get_jobs("q", with_counters=True)
            assert again.nacks == 1
            assert await c.get_jobs("q", timeout_ms=50) == []
            assert await c.wait_for_ack(jid, 0.1) is False
            assert await c.ack(jid) == 1
            assert await c.wait_for_ack(jid, 5) is True
            with pytest.raises(NoJobError):
                await c.working("D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1")
            assert await c.ping() is True
            assert (await c.hello()).my_id == c.node_id
            assert (await c.info())["tcp_port"] == server.port
            assert await c.pause("q", "state") == "none"
            async with c.pipeline() as p:
                p.add_job("q", "a").add_job("q", "b", ttl=0).qlen("q")
                out = await p.execute()
            assert isinstance(out[0], str) and isinstance(out[1], ResponseError)
            assert out[2] == 1

    run(main())


@pytest.mark.timeout(90)
def test_async_failover_kill9_and_leaving(make_cluster):
    servers, raws = make_cluster(3)

    def srv(addr):
        return next(s for s in servers if f"127.0.0.1:{s.port}" == addr)

    async def main():
        c = AsyncDisque([f"127.0.0.1:{s.port}" for s in servers])
        await c.ping()
        first = c.node
        srv(first).kill(signal.SIGKILL)
        jid = await c.add_job("q", "x", replicate=2, timeout_ms=5000)
        assert c.node != first and c.moves == 1
        second = c.node
        # now make the current node leave: a GETJOB that would block gets -LEAVING and the
        # client goes to the remaining node
        raw2 = srv(second).client()
        assert raw2.execute_command("CLUSTER", "LEAVING", "yes") == b"OK"
        # take the job queued on the leaving node first, so the next GETJOB would block
        got = await c.get_jobs("q", timeout_ms=100)
        assert [j.id for j in got] == [jid]
        await c.ack(jid)
        third = next(s for s in servers if f"127.0.0.1:{s.port}" not in (first, second))
        j2 = third.client().execute_command("ADDJOB", "q", "y", 5000, "REPLICATE", 1).decode()
        got = await c.get_jobs("q", timeout_ms=10000)
        assert c.node == f"127.0.0.1:{third.port}"
        assert [j.id for j in got] == [j2]
        await c.close()

    run(main())


@pytest.mark.timeout(90)
def test_async_affinity_moves_to_the_producer(make_cluster):
    servers, raws = make_cluster(3)
    ids = {raws[2].execute_command("ADDJOB", "q", f"j{i}", 5000, "REPLICATE", 1).decode()
           for i in range(24)}

    async def main():
        c = AsyncDisque([f"127.0.0.1:{servers[0].port}"], shuffle=False, affinity=True,
                        affinity_window=8)
        got = []
        for _ in range(60):
            if len(got) >= 12:
                break
            jobs = await c.get_jobs("q", count=4, timeout_ms=2000)
            got += [j.id for j in jobs]
        await c.ping()  # the move happens before the next command
        assert set(got) <= ids and len(got) >= 12
        assert c.node == f"127.0.0.1:{servers[2].port}"
        await c.close()

    run(main())


def test_async_wait_tells_how_a_job_ended(server):
    async def main():
        async with AsyncDisque(f"127.0.0.1:{server.port}") as c:
            ok = await c.add_job("q", b"a")
            bad = await c.add_job("q", b"b")
            st = await c.wait(ok, 0.1)
            assert st.status == "queued" and not st.finished
            await c.get_jobs("q", count=2)
            await c.ack(ok, result=[1, 2])
            await c.fail(bad, "boom")
            st = await c.wait(ok, 5)
            assert (st.status, st.result) == ("completed", [1, 2])
            st = await c.wait(bad, 5)
            assert (st.status, st.error) == ("failed", "boom")
            assert await c.wait_for_ack(bad, 5) is False
            assert (await c.wait("D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1", 0.1)).status \
                == "unknown"

    run(main())


def test_async_status_and_cancel_match_the_blocking_client(server):
    """status() and cancel() of AsyncDisque run the same lookups as Disque's (one plan,
    two drivers): a live job's body, a failed job's dead letter, cancel's refusals."""
    from disquepy.client import Disque
    from disquepy.client.deadletter import dead_letter_body

    addr = f"127.0.0.1:{server.port}"

    async def main():
        async with AsyncDisque(addr) as c:
            queued = await c.add_job("mail", b'{"to": "ann"}')
            held = await c.add_job("mail", b"held")
            failed = await c.add_job("mail", b"doomed")
            st = await c.status(queued)
            assert (st.status, st.queue, st.body) == ("queued", "mail", b'{"to": "ann"}')
            await c.get_jobs("mail", count=3)  # all three delivered to "a worker"
            await c.fail(failed, "smtp down")
            dl = await c.add_job("mail:dead", dead_letter_body("mail", failed, b"doomed",
                                                               "smtp down", 0, 0))
            st = await c.status(failed)
            assert (st.status, st.error, st.dead_letter_id) == ("failed", "smtp down", dl)
            refused = await c.cancel(held)
            assert not refused.cancelled and refused.status == "in_progress"
            assert "cannot be cancelled" in refused.reason  # the node's own words
            await c.nack(queued)  # queued again: cancellable
            done = await c.cancel(queued)
            assert (done.cancelled, done.status, done.queue) == (True, "cancelled", "mail")
            assert (await c.cancel(queued)).reason == "already cancelled"
            assert (await c.status(queued)).status == "cancelled"
            unknown = await c.status("D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1")
            return [await c.status(j) for j in (queued, held, failed)], unknown

    mine, unknown = run(main())
    assert unknown.status == "unknown" and "no node knows it" in unknown.detail
    with Disque(addr) as c:  # the blocking client tells the same
        theirs = [c.status(j) for j in (mine[0].job_id, mine[1].job_id, mine[2].job_id)]
    assert [s.to_dict() for s in theirs] == [s.to_dict() for s in mine]
