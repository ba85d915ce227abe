"""JOBSTATUS, CANCEL and FAILJOB (disquepy): a job's status from submission to outcome,
kept after the job is gone on every node that held a copy."""

from __future__ import annotations

from clusterharness import Cluster
from nodeharness import Error, Harness


def status(h, jid, *, node=None):
    r = h("JOBSTATUS", jid) if node is None else h.cmd(node, "JOBSTATUS", jid)
    if isinstance(r, Error):
        return r
    return {k.decode(): v for k, v in zip(r[::2], r[1::2], strict=True)}


def test_a_job_from_queued_to_completed_under_one_id():
    h = Harness()
    jid = h("ADDJOB", "q", "work", 0, "RETRY", 60)
    assert status(h, jid)["state"] == b"queued"
    h("GETJOB", "FROM", "q")
    st = status(h, jid)
    assert st["state"] == b"in_progress" and st["attempts"] == 1
    assert h("NACK", jid, "DELAY", 5) == 1
    assert status(h, jid)["state"] == b"retrying"
    h.advance(6000)
    assert status(h, jid)["state"] == b"queued"
    h("GETJOB", "FROM", "q")
    assert h("ACKJOB", jid) == 1
    st = status(h, jid)
    assert st["state"] == b"completed" and st["attempts"] == 2 and st["queue"] == b"q"
    assert st["finished"] >= st["created"] and st["detail"] is None


def test_failjob_keeps_the_error_and_the_job_is_gone():
    h = Harness()
    jid = h("ADDJOB", "q", "work", 0)
    h("GETJOB", "FROM", "q")
    assert h("FAILJOB", jid, "ERROR", "ValueError: bad input") == 1
    assert h("SHOW", jid) is None
    st = status(h, jid)
    assert st["state"] == b"failed" and st["detail"] == b"ValueError: bad input"
    assert h("FAILJOB", jid) == Error("NOJOB Job not known in the context of this node.")
    assert h("FAILJOB", jid, "BECAUSE", "x") == Error("ERR syntax error")


def test_cancel_queued_and_refusals_that_say_why():
    h = Harness()
    queued = h("ADDJOB", "q", "a", 0)
    assert h("CANCEL", queued) == b"OK"
    assert status(h, queued)["state"] == b"cancelled"
    assert h("QLEN", "q") == 0
    assert h("CANCEL", queued) == Error("ERR job already cancelled: nothing to cancel")
    taken = h("ADDJOB", "q", "b", 0)
    h("GETJOB", "FROM", "q")
    assert h("CANCEL", taken).startswith("BUSY job in progress")
    assert h("ACKJOB", taken) == 1
    assert h("CANCEL", taken) == Error("ERR job already completed: nothing to cancel")
    delayed = h("ADDJOB", "q", "c", 0, "DELAY", 60)
    assert status(h, delayed)["state"] == b"scheduled"
    assert h("CANCEL", delayed) == b"OK"
    h.advance(61_000)
    assert h("QLEN", "q") == 0


def test_expired_and_unknown():
    h = Harness()
    jid = h("ADDJOB", "q", "a", 0, "TTL", 2, "RETRY", 1)
    h.advance(3000)
    assert status(h, jid)["state"] == b"expired"
    other = b"D-12345678-" + b"Q" * 24 + b"-05a1"
    assert h("JOBSTATUS", other) == Error("NOJOB Job not known in the context of this node.")
    assert h("JOBSTATUS", "nonsense") == Error("BADID Invalid Job ID format.")


def test_retention_zero_keeps_nothing_and_outcomes_expire():
    h = Harness(job_outcome_retention=0)
    jid = h("ADDJOB", "q", "a", 0)
    h("GETJOB", "FROM", "q")
    h("ACKJOB", jid)
    assert isinstance(status(h, jid), Error)
    h = Harness(job_outcome_retention=10)
    jid = h("ADDJOB", "q", "a", 0)
    h("GETJOB", "FROM", "q")
    h("ACKJOB", jid)
    assert status(h, jid)["state"] == b"completed"
    h.advance(11_000)
    assert isinstance(status(h, jid), Error)


def test_outcomes_reach_every_copy():
    """Completed (through the ack's GC), failed and cancelled outcomes are known on
    every node that held a copy, so the status survives the node that created it."""
    c = Cluster(3)
    c.meet_all()
    ids = [c.cmd(0, "ADDJOB", "q", f"j{i}", 0, "REPLICATE", 3, "ASYNC") for i in range(3)]
    c.run(100)
    c.cmd(0, "GETJOB", "COUNT", 2, "FROM", "q")
    assert c.cmd(0, "ACKJOB", ids[0]) == 1
    assert c.cmd(0, "FAILJOB", ids[1], "ERROR", "boom") == 1
    assert c.cmd(0, "CANCEL", ids[2]) == b"OK"
    c.run(3000)
    for i in range(3):
        got = [status_of(c, i, jid) for jid in ids]
        assert got == [(b"completed", None), (b"failed", b"boom"), (b"cancelled", None)], i
        assert all(n.jobs.get(jid) is None for n in c.nodes for jid in ids)


def status_of(c, i, jid):
    r = c.cmd(i, "JOBSTATUS", jid)
    d = dict(zip(r[::2], r[1::2], strict=True))
    return d[b"state"], d[b"detail"]


def test_ackjob_result_is_kept_in_the_outcome():
    h = Harness()
    jid = h("ADDJOB", "q", "work", 0)
    h("GETJOB", "FROM", "q")
    assert h("ACKJOB", jid, "result", '{"rows": 3}') == 1
    st = status(h, jid)
    assert st["state"] == b"completed" and st["detail"] == b'{"rows": 3}'
    # a second ack with another result changes nothing: the first outcome stands
    assert h("ACKJOB", jid, "RESULT", "other") == 0
    assert status(h, jid)["detail"] == b'{"rows": 3}'
    # FASTACK takes one too; a long one is truncated to the outcome detail limit
    other = h("ADDJOB", "q", "work", 0)
    assert h("FASTACK", other, "RESULT", "x" * 5000) == 1
    assert status(h, other)["detail"] == b"x" * 1024
    # RESULT is never taken for a job ID, and a bad ID still fails the whole command
    assert h("ACKJOB", "RESULT", "x") == 0
    assert h("ACKJOB", jid, "RESULT") == Error("BADID Invalid Job ID format.")


def test_ackjob_result_reaches_every_copy():
    c = Cluster(3)
    c.meet_all()
    jid = c.cmd(0, "ADDJOB", "q", "j", 0, "REPLICATE", 3, "ASYNC")
    c.run(100)
    c.cmd(0, "GETJOB", "FROM", "q")
    assert c.cmd(0, "ACKJOB", jid, "RESULT", "done: 42") == 1
    c.run(3000)
    for i in range(3):
        assert status_of(c, i, jid) == (b"completed", b"done: 42"), i
        assert c.nodes[i].jobs.get(jid) is None
