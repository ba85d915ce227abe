"""Federation requests end with their last waiter, and the import rate reads as
Disque's does (a burst reads high at once and fades to 0 over ~5 s)."""

from __future__ import annotations

from clusterharness import Cluster


def queued_on(c, jid):
    return [i for i, n in enumerate(c.nodes) if (j := n.jobs.get(jid)) is not None
            and j.state_name == b"queued"]


def test_a_job_stays_where_nobody_waits_elsewhere():
    """A consumer's GETJOB on node 1 times out; a job added on node 0 right after stays
    on node 0 (real Disque: 20 of 20 trials). Node 1 withdrew its request the moment its
    last waiter left, not at its next cron (up to 100 ms later)."""
    for trial in range(20):
        c = Cluster(2, seed=trial + 1)
        c.meet_all()
        consumer = c.new_client(1)
        timeout = 300 + 7 * trial  # time-outs at every phase of the 100 ms cron
        assert c.cmd(1, "GETJOB", "TIMEOUT", timeout, "FROM", "q", client=consumer) \
            == "BLOCKED"
        c.run(60, step=1)  # NEEDJOBS reached node 0: it remembers node 1 asked
        assert c.nodes[0].fed.askers.get(b"q")
        c.run(timeout - 60, step=1)  # the GETJOB times out
        assert c.outbox(1) == [(consumer, None)]
        c.run(3, step=1)  # the withdrawal reaches node 0
        jid = c.cmd(0, "ADDJOB", "q", "x", 0, "REPLICATE", 1)
        c.run(200)
        assert queued_on(c, jid) == [0], trial


def test_waiters_still_there_keep_the_push():
    c = Cluster(2)
    c.meet_all()
    consumer = c.new_client(1)
    c.cmd(1, "GETJOB", "TIMEOUT", 5000, "FROM", "q", client=consumer)
    c.run(60)
    jid = c.cmd(0, "ADDJOB", "q", "x", 0, "REPLICATE", 1)
    c.run(20)
    [(client, reply)] = c.outbox(1)
    assert client is consumer and reply[0][1] == jid


def test_import_rate_reads_a_burst_at_once_and_fades():
    c = Cluster(2)
    c.meet_all()
    ids = [c.cmd(0, "ADDJOB", "imp", "x", 0, "REPLICATE", 1) for _ in range(4)]
    assert len(ids) == 4
    consumer = c.new_client(1)
    c.cmd(1, "GETJOB", "NOHANG", "COUNT", 4, "FROM", "imp", client=consumer)
    c.run(20)  # NEEDJOBS asks for one job per waiter (1 for a NOHANG probe) ...
    c.cmd(1, "GETJOB", "TIMEOUT", 10, "COUNT", 4, "FROM", "imp", client=consumer)
    c.run(15)

    def rate():
        st = c.cmd(1, "QSTAT", "imp")
        return dict(zip(st[::2], st[1::2], strict=True))[b"import-rate"]

    imported = c.nodes[1].queues.by_name[b"imp"].import_count
    assert imported >= 1
    first = rate()
    assert first == imported * 1000 // 50 or first >= 20, first  # high at once
    assert c.cmd(1, "QSCAN", "BUSYLOOP", "IMPORTRATE", 1)[1] == [b"imp"]
    c.run(2000)
    assert 0 < rate() < first
    c.run(3200)
    assert rate() == 0
    assert c.cmd(1, "QSCAN", "BUSYLOOP", "IMPORTRATE", 1)[1] == []


def test_short_getjobs_do_not_rebroadcast_within_the_back_off():
    """Issue #29 item 1, as C Disque: the broadcast back-off is the queue's and outlives
    its waiters. A second short GETJOB on node 1, right after a job is added with
    REPLICATE 1 on node 0, does not pull it there (C: 0 of 10 tries); a consumer still
    waiting gets it once the back-off allows the next broadcast (4 s after the first)."""
    for trial in range(10):
        c = Cluster(2, seed=trial + 1)
        c.meet_all()
        consumer = c.new_client(1)
        assert c.cmd(1, "GETJOB", "TIMEOUT", 100, "FROM", "q", client=consumer) == "BLOCKED"
        c.run(150, step=1)  # broadcast, then timed out
        assert c.outbox(1) == [(consumer, None)]
        jid = c.cmd(0, "ADDJOB", "q", "x", 0, "REPLICATE", 1)
        assert c.cmd(1, "GETJOB", "TIMEOUT", 1, "FROM", "q", client=consumer) == "BLOCKED"
        c.run(200, step=1)
        assert c.outbox(1) == [(consumer, None)]
        assert queued_on(c, jid) == [0], trial
    c.cmd(1, "GETJOB", "TIMEOUT", 10_000, "FROM", "q", client=consumer)
    c.run(3000)  # 3.35 s after the first broadcast: still within the back-off
    assert queued_on(c, jid) == [0] and c.outbox(1) == []
    c.run(1000)  # past 4 s: the next broadcast finds the job
    [(client, reply)] = c.outbox(1)
    assert client is consumer and reply[0][1] == jid


def test_jobs_from_a_new_source_reset_the_back_off():
    c = Cluster(3)
    c.meet_all()
    consumer = c.new_client(1)
    for _ in range(3):  # three broadcasts: the back-off grows to 16 s
        c.cmd(1, "GETJOB", "TIMEOUT", 100, "FROM", "q", client=consumer)
        c.run(20_000)
    assert c.outbox(1) == [(consumer, None)] * 3
    q = c.nodes[1].queues.get(b"q")
    assert q.needjobs_bcast_attempt == 3
    jid = c.cmd(0, "ADDJOB", "q", "x", 0, "REPLICATE", 1)
    c.cmd(1, "GETJOB", "TIMEOUT", 30_000, "FROM", "q", client=consumer)
    c.run(17_000)  # the next broadcast finds node 0's job: a new source
    [(client, reply)] = c.outbox(1)
    assert reply[0][1] == jid and q.needjobs_bcast_attempt == 0
