"""The client on a real 3-node cluster: failover on kill -9 and on -LEAVING, node choice by
HELLO priority, consumer affinity, wait_for_ack across nodes."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from support import wait_for

from disquepy.client import Disque


def by_addr(servers, addr: str):
    return next(s for s in servers if f"127.0.0.1:{s.port}" == addr)


def seeds(servers) -> list[str]:
    return [f"127.0.0.1:{s.port}" for s in servers]


@pytest.mark.timeout(90)
def test_failover_when_the_node_dies_kill9(make_cluster):
    servers, raws = make_cluster(3)
    c = Disque(seeds(servers))
    first = c.node
    c.add_job("q", "before", replicate=3)
    victim = by_addr(servers, first)
    victim.kill(signal.SIGKILL)
    # the next command finds the connection dead and moves to a live node
    jid = c.add_job("q", "after", replicate=2, timeout_ms=5000)
    assert c.node != first and c.moves == 1
    assert c.show(jid)["body"] == b"after"
    c.close()


@pytest.mark.timeout(90)
def test_blocked_getjob_fails_over_and_gets_the_job(make_cluster):
    servers, raws = make_cluster(3)
    c = Disque(seeds(servers))
    first = c.node
    got: list = []
    t = threading.Thread(target=lambda: got.append(c.get_jobs("q", timeout_ms=20000)))
    t.start()
    probe = by_addr(servers, first).client()
    wait_for(lambda: probe.info("clients")["blocked_clients"] == 1, what="consumer to block")
    by_addr(servers, first).kill(signal.SIGKILL)
    # the client fails over and blocks again on a live node
    wait_for(lambda: c.node != first, what="client to fail over")
    now = by_addr(servers, c.node).client()
    wait_for(lambda: now.info("clients")["blocked_clients"] == 1, what="consumer to re-block")
    # (added where it blocks: federation may push a job to the dead node, see the report)
    jid = now.execute_command("ADDJOB", "q", "payload", 5000, "REPLICATE", 2).decode()
    t.join(30)
    assert not t.is_alive()
    assert [j.id for j in got[0]] == [jid]
    c.close()


@pytest.mark.timeout(90)
def test_leaving_node_sends_the_client_elsewhere(make_cluster):
    servers, raws = make_cluster(3)
    leaving = servers[0]
    c = Disque([f"127.0.0.1:{leaving.port}"], shuffle=False)
    assert c.node == f"127.0.0.1:{leaving.port}"
    assert raws[0].execute_command("CLUSTER", "LEAVING", "yes") == b"OK"
    jid = raws[1].execute_command("ADDJOB", "q", "x", 5000, "REPLICATE", 1).decode()
    # GETJOB on a leaving node with nothing local answers -LEAVING: the client moves on
    jobs = c.get_jobs("q", timeout_ms=10000)
    assert c.node != f"127.0.0.1:{leaving.port}"
    assert [j.id for j in jobs] == [jid]
    c.close()


@pytest.mark.timeout(90)
def test_connect_prefers_better_priority_than_the_seed(make_cluster):
    servers, raws = make_cluster(3)
    raws[0].execute_command("CLUSTER", "LEAVING", "yes")
    # seeded with the leaving node only: its HELLO shows it with a bad priority
    c = Disque([f"127.0.0.1:{servers[0].port}"], shuffle=False)
    assert c.node in seeds(servers[1:])
    c.close()


@pytest.mark.timeout(90)
def test_affinity_moves_the_consumer_to_the_producing_node(make_cluster):
    servers, raws = make_cluster(3)
    producer_node = f"127.0.0.1:{servers[1].port}"
    ids = [raws[1].execute_command("ADDJOB", "q", f"j{i}", 5000, "REPLICATE", 1).decode()
           for i in range(40)]
    consumer = Disque([f"127.0.0.1:{servers[0].port}"], shuffle=False, affinity=True,
                      affinity_window=8)
    plain = Disque([f"127.0.0.1:{servers[2].port}"], shuffle=False)
    got = []
    for _ in range(100):
        if len(got) >= 16:
            break
        for j in consumer.get_jobs("q", count=4, timeout_ms=2000):
            got.append(j.id)
            consumer.ack(j.id)
    assert len(got) >= 16 and set(got) <= set(ids)
    assert consumer.node == producer_node
    # without affinity the client stays where it was put, fed through federation
    plain_got = []
    for _ in range(50):
        if len(plain_got) >= 12:
            break
        plain_got += plain.get_jobs("q", count=4, timeout_ms=2000)
    assert len(plain_got) >= 12
    assert plain.node == f"127.0.0.1:{servers[2].port}"
    consumer.close()
    plain.close()


@pytest.mark.timeout(60)
def test_wait_for_ack(make_cluster):
    servers, raws = make_cluster(3)
    producer = Disque([f"127.0.0.1:{servers[0].port}"], shuffle=False)
    worker = Disque([f"127.0.0.1:{servers[2].port}"], shuffle=False)
    jid = producer.add_job("q", "x", replicate=3)
    assert producer.wait_for_ack(jid, timeout=0.3) is False  # nobody acked it
    timer = threading.Timer(0.3, lambda: worker.ack(jid))
    timer.start()
    # the ack on node 3 reaches node 1 (the creator), which the producer polls
    assert producer.wait_for_ack(jid, timeout=20) is True
    timer.join()
    s = raws[0].execute_command("SHOW", jid)
    assert s is None or b"acked" in s
    producer.close()
    worker.close()


def test_wait_for_ack_single_node(dq):
    jid = dq.add_job("q", "x")
    assert dq.wait_for_ack(jid, 0.2) is False
    (job,) = dq.get_jobs("q")
    assert dq.wait_for_ack(jid, 0.1) is False  # delivered is not acknowledged
    dq.ack(job.id)
    assert dq.wait_for_ack(jid, 5) is True


def test_wait_tells_how_a_job_ended(dq):
    jid = dq.add_job("q", "x")
    t0 = time.monotonic()
    st = dq.wait(jid, 0.2)  # nobody took it: its status at the timeout
    assert st.status == "queued" and not st.finished and time.monotonic() - t0 >= 0.2
    assert dq.cancel(jid).cancelled
    assert dq.wait(jid, 5).status == "cancelled" and dq.wait_for_ack(jid, 5) is False
    jid = dq.add_job("q", "y")
    dq.get_jobs("q")
    dq.ack(jid, result={"rows": 3})
    st = dq.wait(jid, 5)
    assert (st.status, st.result, st.ok) == ("completed", {"rows": 3}, True)
    jid = dq.add_job("q", "z")
    dq.get_jobs("q")
    dq.fail(jid, "KeyError: 'x'")
    st = dq.wait(jid, 5)
    assert (st.status, st.error, st.ok) == ("failed", "KeyError: 'x'", False)
    jid = dq.add_job("q", "short", ttl=1)
    st = dq.wait(jid, 10)
    assert st.status == "expired"
    unknown = "D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1"
    assert dq.wait(unknown, 0.1).status == "unknown"


@pytest.mark.timeout(60)
def test_wait_after_the_creating_node_died(make_cluster):
    servers, raws = make_cluster(3)
    producer = Disque([f"127.0.0.1:{servers[0].port}", f"127.0.0.1:{servers[1].port}"],
                      shuffle=False)
    jid = producer.add_job("q", "x", replicate=3)
    worker = Disque([f"127.0.0.1:{servers[2].port}"], shuffle=False)
    (job,) = worker.get_jobs("q", timeout_ms=5000)
    worker.ack(job.id, result="done")
    wait_for(lambda: raws[1].execute_command("JOBSTATUS", jid)[3] == b"completed")
    servers[0].kill()
    st = producer.wait(jid, 10)  # the copies answer for the creating node
    assert (st.status, st.result) == ("completed", "done")
    producer.close()
    worker.close()
