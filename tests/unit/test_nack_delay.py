"""NACK ... DELAY seconds (disquepy): a delivered job goes back to its queue after the
delay, under the same ID, its nack count up by one; other copies do not re-queue it
meanwhile. And ACKJOB is never refused at the memory limit (acks free memory)."""

from __future__ import annotations

from clusterharness import Cluster
from nodeharness import Error, Harness


def fetch(h, queue="q"):
    r = h("GETJOB", "NOHANG", "WITHCOUNTERS", "FROM", queue)
    return r[0] if r else None


def test_nack_delay_requeues_the_same_job_after_the_delay():
    h = Harness()
    jid = h("ADDJOB", "q", "work", 0, "RETRY", 60)
    assert fetch(h)[1] == jid
    assert h("NACK", jid, "DELAY", 5) == 1
    assert h("QLEN", "q") == 0 and fetch(h) is None
    h.advance(4000)
    assert h("QLEN", "q") == 0
    h.advance(1500)
    job = fetch(h)
    assert job[1] == jid  # the same ID: one job through its retries
    counters = dict(zip(job[3::2], job[4::2], strict=True))
    assert counters == {b"nacks": 1, b"additional-deliveries": 0}


def test_nack_delay_arguments():
    h = Harness()
    jid = h("ADDJOB", "q", "work", 0)
    fetch(h)
    assert h("NACK", jid, "DELAY", -1) == Error("ERR Invalid DELAY: expected seconds >= 0")
    assert h("NACK", jid, "DELAY") == Error("ERR syntax error")
    assert h("NACK", "DELAY", 3, "nonsense") == Error("BADID Invalid Job ID format.")
    assert h("nack", jid, "delay", 0) == 1  # DELAY 0: queued at once, as a plain NACK
    assert h("QLEN", "q") == 1


def test_nack_delay_refuses_at_most_once_jobs_already_delivered():
    h = Harness()
    jid = h("ADDJOB", "q", "work", 0, "RETRY", 0)
    fetch(h)
    assert h("NACK", jid, "DELAY", 1) == 0
    h.advance(2000)
    assert h("QLEN", "q") == 0


def test_copies_wait_for_a_delayed_nack():
    """The job's other copies would re-queue it at their retry time (5 s); the node
    that holds the delayed NACK keeps them from doing so until its delay (20 s) ends."""
    c = Cluster(3)
    c.meet_all()
    jid = c.cmd(0, "ADDJOB", "q", "work", 0, "REPLICATE", 3, "RETRY", 5, "ASYNC")
    c.run(100)
    assert c.cmd(0, "GETJOB", "NOHANG", "FROM", "q")
    assert c.cmd(0, "NACK", jid, "DELAY", 20) == 1
    c.run(15_000)
    queued = [n.queues.by_name[b"q"].jobs.__len__() if b"q" in n.queues.by_name else 0 for n in c.nodes]
    assert sum(queued) == 0, queued
    c.run(6000)
    queued = [len(n.queues.by_name[b"q"].jobs) if b"q" in n.queues.by_name else 0 for n in c.nodes]
    assert sum(queued) == 1, queued
    counts = {j.nacks for j in c.jobs_everywhere(jid) if j is not None}
    assert counts == {1}, counts


def test_ackjob_is_never_refused_at_the_memory_limit():
    h = Harness(maxmemory=400_000)
    ids = []
    for _ in range(10_000):
        r = h("ADDJOB", "q", "x" * 200, 0)
        if isinstance(r, Error):  # a lone node past 75% holds no new job (as Disque)
            assert r.endswith("I'm out of memory")
            break
        ids.append(r)
    else:
        raise AssertionError("the memory limit was never reached")
    h("CONFIG", "SET", "maxmemory", str(h.node.mem.used - 1000))  # over the limit now
    assert h("ADDJOB", "q", "x", 0).startswith("OOM")
    assert h("ACKJOB", ids[0]) == 1
    assert h.node.jobs.get(ids[0]) is None
