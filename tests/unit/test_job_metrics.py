"""JOBMETRICS (disquepy): per-queue job counters and wait/processing histograms, counted
by the node that acted, for disque-web's /metrics."""

from __future__ import annotations

from clusterharness import Cluster
from nodeharness import Error, Harness

from disquepy.core.jobmetrics import BOUNDS_MS, MAX_REASONS


def metrics(r) -> dict:
    """{queue: (counters, dead, wait, processing)} of a JOBMETRICS reply."""
    assert r[0] == b"buckets-ms" and r[1] == list(BOUNDS_MS) and r[2] == b"queues"
    out = {}
    for name, counts, dead, wait, proc in r[3]:
        out[name.decode()] = (
            {k.decode(): v for k, v in zip(counts[::2], counts[1::2], strict=True)},
            {k.decode(): v for k, v in zip(dead[::2], dead[1::2], strict=True)},
            hist(wait), hist(proc))
    return out


def hist(h) -> dict:
    """{bucket upper bound (ms, None: above all): count} of the non-empty buckets, with
    'count' and 'sum'."""
    d = {"count": h[0], "sum": h[1]}
    for bound, n in zip([*BOUNDS_MS, None], h[2:], strict=True):
        if n:
            d[bound] = n
    return d


def test_counters_and_histograms_follow_a_jobs_life():
    h = Harness()
    jid = h("ADDJOB", "q", "a", 0, "RETRY", 5)
    h.advance(300)
    h("GETJOB", "FROM", "q")  # waited 300 ms
    h.advance(1200)
    assert h("ACKJOB", jid) == 1  # processed in 1.2 s
    counts, dead, wait, proc = metrics(h("JOBMETRICS"))["q"]
    assert counts == {"added": 1, "delivered": 1, "acked": 1, "nacked": 0, "retried": 0,
                      "requeued": 0, "expired": 0, "cancelled": 0}
    assert dead == {}
    assert wait == {"count": 1, "sum": 300, 500: 1}
    assert proc == {"count": 1, "sum": 1200, 2500: 1}


def test_nack_retry_requeue_cancel_expire_and_dead_letters_by_reason():
    h = Harness()
    a = h("ADDJOB", "q", "a", 0, "RETRY", 2)
    h("GETJOB", "FROM", "q")
    h.advance(100)
    assert h("NACK", a) == 1  # back at once: the next wait counts from here
    h.advance(40)
    h("GETJOB", "FROM", "q")
    assert h("NACK", a, "DELAY", 1) == 1  # a back-off retry
    h.advance(1000)  # queued again by the delay
    h.advance(20)
    h("GETJOB", "FROM", "q")
    h.advance(2500)  # no ack within the retry: queued again
    h("GETJOB", "FROM", "q")
    assert h("FAILJOB", a, "ERROR", "boom", "REASON", "attempts") == 1
    b = h("ADDJOB", "q", "b", 0)
    assert h("CANCEL", b) == b"OK"
    h("ADDJOB", "q", "c", 0, "TTL", 1)
    h.advance(1500)
    d = h("ADDJOB", "q", "d", 0)
    h("GETJOB", "FROM", "q")
    assert h("FAILJOB", d) == 1
    counts, dead, wait, proc = metrics(h("JOBMETRICS", "q", "nothing"))["q"]
    assert counts == {"added": 4, "delivered": 5, "acked": 0, "nacked": 1, "retried": 1,
                      "requeued": 1, "expired": 1, "cancelled": 1}
    assert dead == {"attempts": 1, "failed": 1}
    assert wait["count"] == 5 and wait[5] == 2 and wait[25] == 1 and wait[50] == 1
    assert proc == {"count": 0, "sum": 0}  # failed jobs have no processing time
    assert h("JOBMETRICS", "nothing") == [b"buckets-ms", list(BOUNDS_MS), b"queues", []]


def test_failjob_reason_is_checked_and_bounded():
    h = Harness()
    jid = h("ADDJOB", "q", "a", 0)
    for bad in (["REASON", "no spaces"], ["REASON", ""], ["REASON", "x" * 33]):
        assert h("FAILJOB", jid, *bad) == Error(
            "ERR REASON must be 1 to 32 letters, digits, '-' or '_'")
    assert h("FAILJOB", jid, "REASON", "a", "REASON", "b") == Error("ERR syntax error")
    assert h("FAILJOB", jid, "ERROR") == Error("ERR syntax error")
    for i in range(MAX_REASONS + 3):
        j = h("ADDJOB", "q", "x", 0)
        assert h("FAILJOB", j, "REASON", f"r{i}", "ERROR", "e") == 1
    _, dead, _, _ = metrics(h("JOBMETRICS"))["q"]
    assert len(dead) == MAX_REASONS + 1 and dead["other"] == 3


def test_each_event_is_counted_once_in_a_cluster():
    """Summed over the nodes, an ack or an expiry counts once: by the node that acted
    (acks) or the node that created the job (expiry), not by every copy."""
    c = Cluster(3)
    c.meet_all()
    jid = c.cmd(0, "ADDJOB", "q", "j", 0, "REPLICATE", 3, "ASYNC")
    c.cmd(0, "ADDJOB", "q", "short", 0, "REPLICATE", 3, "ASYNC", "TTL", 2)
    c.run(100)
    c.cmd(0, "GETJOB", "FROM", "q")
    assert c.cmd(0, "ACKJOB", jid) == 1
    c.run(4000)
    total: dict = {}
    for i in range(3):
        for k, v in metrics(c.cmd(i, "JOBMETRICS")).get("q", ({},))[0].items():
            total[k] = total.get(k, 0) + v
    assert total["added"] == 2 and total["acked"] == 1 and total["expired"] == 1
