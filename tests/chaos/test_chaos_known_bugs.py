"""Open server bugs the fault runs found, each reproduced deterministically on real
processes. Strict xfail: once the bug is fixed the test passes, pytest reports the
XPASS as a failure, and the marker (and its note in docs/RELIABILITY.md) must go."""

from __future__ import annotations

import asyncio

import pytest

from disquepy.chaos.cluster import Cluster
from disquepy.chaos.resp import Conn


@pytest.mark.timeout(90)
@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    "server bug: ClusterMixin._job_replicated enqueues a new job (which may push it at "
    "once to a remembered federation asker; a RETRY 0 job then leaves with a DELJOB "
    "record) before aof_created appends its LOADJOB: the AOF says delete-then-create, "
    "so a restart brings the moved job back"))
def test_retry0_job_moved_by_federation_stays_gone_after_a_restart(tmp_path):
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
