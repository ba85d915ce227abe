"""disquepy's server extensions on the pure core: ADDJOB IDEMPOTENT, GETJOB TOKEN and
the job-lifecycle events (the shell writes them; here we check what the core emits)."""

from __future__ import annotations

import pytest
from clusterharness import Cluster
from nodeharness import Error, Harness

from disquepy.core import aofrecords as aof
from disquepy.core.jobcodec import COUNTER_TOP


@pytest.fixture
def h():
    return Harness()


def qlen(h, q="q"):
    return h("QLEN", q)


# ------------------------------------------------------------------ IDEMPOTENT
def test_idempotent_key_returns_the_first_job(h):
    a = h("ADDJOB", "q", "x", 0, "IDEMPOTENT", "k1")
    b = h("ADDJOB", "q", "x", 0, "IDEMPOTENT", "k1")
    c = h("ADDJOB", "q", "x", 0, "IDEMPOTENT", "k2")
    assert a == b != c
    assert qlen(h) == 2
    assert h.node.stats.jobs_added == 2


def test_idempotent_key_outlives_ack_until_the_job_lifetime_ends(h):
    jid = h("ADDJOB", "q", "x", 0, "TTL", 60, "IDEMPOTENT", "k")
    got = h("GETJOB", "FROM", "q")
    assert got[0][1] == jid
    assert h("ACKJOB", jid) == 1
    assert h("SHOW", jid) is None  # the job is gone ...
    assert h("ADDJOB", "q", "x", 0, "IDEMPOTENT", "k") == jid  # ... its key is not
    assert qlen(h) == 0
    h.advance(61_000)  # the job's lifetime is over: the key is free again
    assert h.node.keys.idem == {} and h.node.keys.of == {}
    new = h("ADDJOB", "q", "x", 0, "IDEMPOTENT", "k")
    assert new != jid and qlen(h) == 1


def test_idempotent_key_bad_sizes_and_syntax(h):
    assert h("ADDJOB", "q", "x", 0, "IDEMPOTENT", "") == Error(
        "ERR IDEMPOTENT key must be 1 to 256 bytes")
    assert h("ADDJOB", "q", "x", 0, "IDEMPOTENT", "k" * 257).startswith("ERR IDEMPOTENT")
    assert h("ADDJOB", "q", "x", 0, "IDEMPOTENT") == Error("ERR syntax error")
    assert qlen(h) == 0


def test_idempotent_memory_is_accounted_and_released(h):
    h("QLEN", "q")
    h("GETJOB", "NOHANG", "FROM", "q")  # the queue exists: only jobs and keys move memory
    base = h.node.mem.used
    plain = h("ADDJOB", "q", "x", 0, "TTL", 10)
    job_cost = h.node.mem.used - base
    keyed = h("ADDJOB", "q", "x", 0, "TTL", 10, "IDEMPOTENT", "key")
    assert h.node.mem.used - base - job_cost > job_cost  # the key entry is counted
    h("DELJOB", plain, keyed)
    assert h.node.mem.used > base  # the key outlives its job ...
    h.advance(11_000)
    assert h.node.mem.used == base and h.node.keys.idem == {}  # ... until it expires


def test_idempotent_key_survives_aof_reload_including_deleted_jobs(h):
    h.node.aof.on = True
    live = h("ADDJOB", "q", "live", 0, "IDEMPOTENT", "k-live")
    gone = h("ADDJOB", "q", "gone", 0, "IDEMPOTENT", "k-gone")
    h("GETJOB", "COUNT", 2, "FROM", "q")
    h("ACKJOB", gone)
    records = aof.scan(b"".join(h.shell.records)).records
    fresh = Harness()
    fresh.now = h.now
    assert fresh.node.aof.load(records, fresh.now, enqueue=False) == 1
    assert fresh("ADDJOB", "q", "again", 0, "IDEMPOTENT", "k-live") == live
    assert fresh("ADDJOB", "q", "again", 0, "IDEMPOTENT", "k-gone") == gone
    assert fresh.node.jobs.count == 1


def test_rewrite_keeps_keys_of_deleted_jobs(h):
    gone = h("ADDJOB", "q", "gone", 0, "IDEMPOTENT", "k-gone")
    live = h("ADDJOB", "q", "live", 0, "IDEMPOTENT", "k-live")
    h("DELJOB", gone)
    snap = [h.node.aof.snapshot(j) for j in h.node.jobs.values()]
    snap += h.node.aof.retained_keys(h.now)
    res = aof.scan(b"".join(r for r in snap if r))
    assert res.status == "ok"
    fresh = Harness()
    fresh.node.aof.load(res.records, h.now, enqueue=True)
    assert fresh.node.jobs.count == 1 and fresh("QLEN", "q") == 1
    assert fresh("ADDJOB", "q", "x", 0, "IDEMPOTENT", "k-gone") == gone
    assert fresh("ADDJOB", "q", "x", 0, "IDEMPOTENT", "k-live") == live
    assert fresh("QLEN", "q") == 1


def test_idempotent_key_travels_to_replicas_and_norepl_forgets_it():
    c = Cluster(3)
    c.meet_all()
    assert c.cmd(0, "ADDJOB", "q", "b", 5000, "REPLICATE", 3, "IDEMPOTENT", "k") == "BLOCKED"
    # while the copies are pending, the same key cannot be answered yet
    other = c.new_client(0)
    assert c.cmd(0, "ADDJOB", "q", "b", 5000, "IDEMPOTENT", "k", client=other).startswith(
        "TRYAGAIN")
    c.run(50)
    jid = c.outbox(0)[0][1]
    # a retry sent to a replica is answered with the same job
    assert c.cmd(1, "ADDJOB", "q", "b", 0, "REPLICATE", 3, "IDEMPOTENT", "k") == jid
    assert c.cmd(2, "ADDJOB", "q", "b", 0, "REPLICATE", 3, "IDEMPOTENT", "k") == jid
    # a job that fails to replicate never existed for its producer: its key is forgotten
    c.partition({0}, {1, 2})
    assert c.cmd(0, "ADDJOB", "q", "b", 200, "REPLICATE", 3, "IDEMPOTENT", "k2") == "BLOCKED"
    c.run(400)
    assert c.outbox(0)[0][1].startswith("NOREPL")
    assert b"k2" not in c.nodes[0].keys.idem


# ----------------------------------------------------------------------- TOKEN
def test_token_replays_the_same_jobs(h):
    ids = [h("ADDJOB", "q", f"b{i}", 0) for i in range(5)]
    first = h("GETJOB", "COUNT", 3, "TOKEN", "batch-1", "FROM", "q")
    assert [j[1] for j in first] == ids[:3]
    again = h("GETJOB", "COUNT", 3, "TOKEN", "batch-1", "FROM", "q")
    assert again == first and qlen(h) == 2  # nothing new was taken
    h("ACKJOB", ids[0])
    assert [j[1] for j in h("GETJOB", "TOKEN", "batch-1", "FROM", "q")] == ids[1:3]
    nxt = h("GETJOB", "COUNT", 3, "TOKEN", "batch-2", "FROM", "q")
    assert [j[1] for j in nxt] == ids[3:]


def test_token_with_counters_and_empty_first_read(h):
    assert h("GETJOB", "NOHANG", "TOKEN", "t", "FROM", "q") is None
    h("ADDJOB", "q", "x", 0)
    assert h("GETJOB", "NOHANG", "TOKEN", "t", "FROM", "q") is None  # same (empty) answer
    got = h("GETJOB", "WITHCOUNTERS", "TOKEN", "t2", "FROM", "q")
    assert got[0][3:] == [b"nacks", 0, b"additional-deliveries", 0]
    h("NACK", got[0][1])
    assert h("GETJOB", "WITHCOUNTERS", "TOKEN", "t2", "FROM", "q")[0][4] == 1


def test_token_of_a_blocked_getjob_remembers_the_job_it_got(h):
    consumer = h.new_client()
    assert h("GETJOB", "TOKEN", "tb", "FROM", "q", client=consumer) == "BLOCKED"
    jid = h("ADDJOB", "q", "x", 0)
    out = h.drain()
    assert out[0][1][0][1] == jid
    assert h("GETJOB", "TOKEN", "tb", "FROM", "q")[0][1] == jid


def test_token_expires(h):
    h.node.config.delivery_token_ttl = 5
    h("ADDJOB", "q", "a", 0)
    h("ADDJOB", "q", "b", 0)
    first = h("GETJOB", "TOKEN", "t", "FROM", "q")
    h.advance(6_000)
    assert h.node.keys.tokens == {}
    assert h("GETJOB", "TOKEN", "t", "FROM", "q")[0][1] != first[0][1]


def test_token_bad_size(h):
    assert h("GETJOB", "TOKEN", "", "FROM", "q") == Error("ERR TOKEN must be 1 to 256 bytes")


# ---------------------------------------------------------------------- events
def test_lifecycle_events(h):
    h.node.events_on = True
    a = h("ADDJOB", "q", "body", 0, "RETRY", 10)
    h("GETJOB", "FROM", "q")
    h("NACK", a)
    h("GETJOB", "FROM", "q")
    h("ACKJOB", a)
    b = h("ADDJOB", "q", "x", 0, "TTL", 5, "DELAY", 1)
    h.advance(1_500)
    h.advance(5_000)
    c = h("ADDJOB", "q", "x", 0)
    h("DELJOB", c)
    ev = [(e[1], e[2]) for e in h.shell.events]
    assert ev == [("added", a), ("queued", a), ("delivered", a), ("nacked", a), ("queued", a),
                  ("delivered", a), ("acked", a), ("added", b), ("queued", b), ("expired", b),
                  ("added", c), ("queued", c), ("deleted", c)]
    added = h.shell.events[0]
    assert added[3] == b"q" and added[4] == (86400, 10, 0, 1, 4)
    assert h.shell.events[5][4] == (1, 0)  # second delivery: after one NACK


def test_no_events_when_off(h):
    h("ADDJOB", "q", "x", 0)
    h("GETJOB", "FROM", "q")
    assert h.shell.events == []


# ------------------------------------------------------------- AOF counters
def test_counters_survive_an_aof_reload(h):
    """NACKs and re-deliveries are logged, so a reloaded copy keeps its counters
    (counters never go back, as the simulator's checker demands)."""
    h.node.aof.on = True
    jid = h("ADDJOB", "q", "x", 0, "RETRY", 1)
    h("GETJOB", "FROM", "q")
    h("NACK", jid)
    h("GETJOB", "FROM", "q")
    h.advance(1_500)  # not acked within its retry: re-queued, one more delivery
    show = h("SHOW", jid)
    assert show[show.index(b"nacks") + 1] == 1
    assert show[show.index(b"additional-deliveries") + 1] == 1
    fresh = Harness()
    fresh.now = h.now
    fresh.node.aof.load(aof.scan(b"".join(h.shell.records)).records, h.now, enqueue=False)
    again = fresh("SHOW", jid)
    assert again[again.index(b"nacks") + 1] == 1
    assert again[again.index(b"additional-deliveries") + 1] == 1


def test_counters_saturate_so_the_job_stays_loadable(h):
    """A counter at the top of the codec's range (a peer may send one) stops there: one
    more NACK or re-delivery must not write an AOF record the reload then refuses."""
    h.node.aof.on = True
    jid = h("ADDJOB", "q", "x", 0, "RETRY", 1)
    job = h.node.jobs.get(jid)
    job.nacks = job.adeliv = COUNTER_TOP
    h("GETJOB", "FROM", "q")
    h("NACK", jid)
    h("GETJOB", "FROM", "q")
    h.advance(1_500)  # re-queued by its retry: one more delivery
    h("GETJOB", "FROM", "q")
    h("NACK", jid, "DELAY", 1)
    assert (job.nacks, job.adeliv) == (COUNTER_TOP, COUNTER_TOP)
    fresh = Harness()
    fresh.now = h.now
    fresh.node.aof.load(aof.scan(b"".join(h.shell.records)).records, h.now, enqueue=False)
    again = fresh("SHOW", jid)
    assert again[again.index(b"nacks") + 1] == COUNTER_TOP
    assert again[again.index(b"additional-deliveries") + 1] == COUNTER_TOP


def test_a_delayed_job_reloaded_from_the_aof_keeps_its_delay(h):
    """The LOADJOB record carries the queue time of the delay (a record written
    before it was set brought the job back at its retry instead)."""
    h.node.aof.on = True
    h("QLEN", "q")
    jid = h("ADDJOB", "q", "x", 0, "DELAY", 30, "RETRY", 1)
    fresh = Harness()
    fresh.now = h.now
    fresh.node.aof.load(aof.scan(b"".join(h.shell.records)).records, h.now, enqueue=False)
    fresh.advance(29_000)
    assert fresh("QLEN", "q") == 0
    fresh.advance(2_000)
    assert fresh("QPEEK", "q", 1)[0][1] == jid


def test_acktoken_acks_what_the_tokens_delivered(h):
    ids = [h("ADDJOB", "q", f"b{i}", 0) for i in range(6)]
    h("GETJOB", "COUNT", 2, "TOKEN", "t1", "FROM", "q")
    h("GETJOB", "COUNT", 2, "TOKEN", "t2", "FROM", "q")
    h("ACKJOB", ids[0])
    assert h("ACKTOKEN", "t1", "t2", "unknown") == 3  # ids[1..3]; ids[0] acked before
    assert all(h("SHOW", j) is None for j in ids[:4])
    assert h("QLEN", "q") == 2
    assert h("ACKTOKEN", "t1") == 0
    assert h("GETJOB", "TOKEN", "t2", "FROM", "q") is None  # nothing left to replay
    assert h("ACKTOKEN") == Error("ERR wrong number of arguments for 'acktoken' command")
