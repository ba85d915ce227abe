"""The node state machine, driven in-process with a virtual clock."""

from __future__ import annotations

import re

import pytest
from nodeharness import Error, Harness

ID_RE = re.compile(rb"^D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}$")


@pytest.fixture
def h():
    return Harness()


def add(h, queue="q", body="body", *opts):
    jid = h("ADDJOB", queue, body, 0, *opts)
    assert isinstance(jid, bytes) and ID_RE.match(jid), jid
    return jid


def show(h, jid):
    r = h("SHOW", jid)
    return None if r is None else dict(zip(r[::2], r[1::2], strict=True))


# ----------------------------------------------------------------------- ADDJOB
def test_addjob_replies_status_id_with_node_prefix_and_ttl(h):
    raw = h.raw("ADDJOB", "q", "b", 0)
    assert raw.startswith(b"+D-" + h.node.myid_b[:8] + b"-") and raw.endswith(b"-05a1\r\n")
    assert len(raw) == 1 + 40 + 2


@pytest.mark.parametrize("ttl,retry,field", [
    (86400, None, b"05a1"), (60, None, b"0001"), (59, None, b"0001"), (120, 1, b"0003"),
    (120, 0, b"0002"), (60, 0, b"0000"), (10 ** 7, 5, b"ffff"), (10 ** 7, 0, b"fffe"),
])
def test_id_ttl_field_parity(h, ttl, retry, field):
    opts = ["TTL", ttl] + (["RETRY", retry] if retry is not None else [])
    assert add(h, "q", "b", *opts)[-4:] == field


def test_addjob_defaults_in_show(h):
    jid = add(h)
    s = show(h, jid)
    assert list(s) == [b"id", b"queue", b"state", b"repl", b"ttl", b"ctime", b"delay", b"retry",
                       b"nacks", b"additional-deliveries", b"nodes-delivered",
                       b"nodes-confirmed", b"next-requeue-within", b"next-awake-within",
                       b"body"]
    assert s[b"state"] == b"queued" and s[b"repl"] == 1 and s[b"ttl"] == 86400
    assert s[b"retry"] == 300 and s[b"delay"] == 0 and s[b"body"] == b"body"
    assert s[b"nodes-delivered"] == [h.node.myid_b] and s[b"nodes-confirmed"] == []
    assert s[b"ctime"] == h.now * 1_000_000
    assert 299_750 <= s[b"next-requeue-within"] <= 300_250


@pytest.mark.parametrize("ttl,retry", [(100, 10), (5, 1), (3000, 300), (10000, 300), (9, 1)])
def test_default_retry_is_ttl_tenth_capped(h, ttl, retry):
    assert show(h, add(h, "q", "b", "TTL", ttl))[b"retry"] == retry


def test_ctime_unique_and_rising_within_a_millisecond(h):
    ids = [add(h) for _ in range(5)]
    ctimes = [show(h, j)[b"ctime"] for j in ids]
    assert ctimes == sorted(ctimes) and len(set(ctimes)) == 5


@pytest.mark.parametrize("args,err", [
    (["REPLICATE", 0], "ERR REPLICATE must be between 1 and 65535"),
    (["REPLICATE", 70000], "ERR REPLICATE must be between 1 and 65535"),
    (["REPLICATE", "x"], "ERR REPLICATE must be between 1 and 65535"),
    (["TTL", 0], "ERR TTL must be a number > 0"),
    (["RETRY", -1], "ERR RETRY time must be a non negative number"),
    (["DELAY", -1], "ERR DELAY time must be a non negative number"),
    (["MAXLEN", 0], "ERR MAXLEN must be a positive number"),
    (["BOGUS"], "ERR syntax error"),
    (["TTL"], "ERR syntax error"),
    (["RETRY", 0, "REPLICATE", 2],
     "ERR With RETRY set to 0 please explicitly set  REPLICATE to 1 (at-most-once delivery)"),
    (["DELAY", 10, "TTL", 10],
     "ERR The specified DELAY is greater than TTL. Job refused since would never be delivered"),
    (["REPLICATE", 2], "NOREPL Not enough reachable nodes for the requested replication level"),
    # past 32 bits C Disque wraps silently; the bus and the AOF could not carry it:
    # refused as too large (a DELAY past the TTL gets C's message first)
    (["TTL", 2**32], "ERR TTL is too large: it must be less than 4294967296 seconds"),
    (["TTL", 2**63 - 1], "ERR TTL is too large: it must be less than 4294967296 seconds"),
    (["TTL", 2**63], "ERR TTL must be a number > 0"),
    (["RETRY", 2**32], "ERR RETRY is too large: it must be less than 4294967296 seconds"),
    (["DELAY", 2**32, "TTL", 2**32 - 1],
     "ERR The specified DELAY is greater than TTL. Job refused since would never be delivered"),
    (["DELAY", 2**40],
     "ERR The specified DELAY is greater than TTL. Job refused since would never be delivered"),
    (["DELAY", 2**40, "TTL", 2**41],
     "ERR TTL is too large: it must be less than 4294967296 seconds"),
])
def test_addjob_validation_errors(h, args, err):
    assert h("ADDJOB", "q", "b", 0, *args) == err
    assert h("INFO", "jobs") == b"# Jobs\r\nregistered_jobs:0\r\n"


def test_addjob_largest_32_bit_values_are_kept(h):
    top = 2**32 - 1
    s = show(h, add(h, "q", "b", "TTL", top, "RETRY", top, "DELAY", top - 1))
    assert s[b"retry"] == top and s[b"delay"] == top - 1 and s[b"ttl"] == top
    assert h("NACK", add(h), "DELAY", 2**32) == (
        "ERR DELAY is too large: it must be less than 4294967296 seconds")


def test_addjob_option_errors_win_over_timeout_errors(h):
    assert h("ADDJOB", "q", "b", "x", "TTL", 0) == "ERR TTL must be a number > 0"
    assert h("ADDJOB", "q", "b", "x") == "ERR timeout is not an integer or out of range"
    assert h("ADDJOB", "q", "b", -5) == "ERR timeout is negative"


def test_addjob_maxlen_refuses_at_length(h):
    add(h, "q", "a", "MAXLEN", 2)
    add(h, "q", "b", "MAXLEN", 2)
    assert h("ADDJOB", "q", "c", 0, "MAXLEN", 2) == (
        "MAXLEN Queue is already longer than the specified MAXLEN count")
    assert h("QLEN", "q") == 2


def test_arity_and_unknown_commands(h):
    assert h("ADDJOB", "q", "b") == "ERR wrong number of arguments for 'addjob' command"
    assert h("SHOW") == "ERR wrong number of arguments for 'show' command"
    assert h("NOSUCH", "x") == "ERR unknown command 'NOSUCH'"
    assert h("PING", "a", "b") == "ERR wrong number of arguments for 'ping' command"
    assert h("ACKJOB") == 0  # arity -1 as in Disque


# ------------------------------------------------------------------------ GETJOB
def test_getjob_fifo_by_creation_time(h):
    ids = [add(h, "q", f"b{i}") for i in range(10)]
    got = [h("GETJOB", "FROM", "q")[0][1] for _ in range(10)]
    assert got == ids


def test_getjob_count_round_robin_over_queues(h):
    a = [add(h, "a", f"a{i}") for i in range(3)]
    b = [add(h, "b", f"b{i}") for i in range(1)]
    c = [add(h, "c", f"c{i}") for i in range(2)]
    got = h("GETJOB", "COUNT", 5, "FROM", "a", "b", "c")
    assert [j[1] for j in got] == [a[0], b[0], c[0], a[1], c[1]]


def test_getjob_withcounters_shape(h):
    jid = add(h)
    got = h("GETJOB", "WITHCOUNTERS", "FROM", "q")
    assert got == [[b"q", jid, b"body", b"nacks", 0, b"additional-deliveries", 0]]


def test_getjob_nohang_empty_is_null_array_and_creates_queue(h):
    assert h.raw("GETJOB", "NOHANG", "FROM", "nothere") == b"*-1\r\n"
    assert h("QSTAT", "nothere")[0:2] == [b"name", b"nothere"]


@pytest.mark.parametrize("args,err", [
    (["COUNT", 0, "FROM", "q"], "ERR COUNT must be a number greater than zero"),
    (["COUNT", "x", "FROM", "q"], "ERR COUNT must be a number greater than zero"),
    (["TIMEOUT", "x", "FROM", "q"], "ERR timeout is not an integer or out of range"),
    (["TIMEOUT", -1, "FROM", "q"], "ERR timeout is negative"),
    (["NOHANG", "q"], "ERR syntax error"),
    (["NOHANG", "FROM"], "ERR syntax error"),
    (["BOGUS", "FROM", "q"], "ERR syntax error"),
])
def test_getjob_errors(h, args, err):
    assert h("GETJOB", *args) == err


def test_blocked_getjob_served_by_addjob_with_one_job(h):
    consumer = h.new_client()
    assert h("GETJOB", "COUNT", 10, "FROM", "q", client=consumer) == "BLOCKED"
    jid = add(h, "q", "x")
    out = h.drain()
    assert out == [(consumer, [[b"q", jid, b"x"]])]
    assert h("QLEN", "q") == 0
    assert consumer.blocked is None


def test_blocked_consumers_served_fifo(h):
    c1, c2 = h.new_client(), h.new_client()
    h("GETJOB", "FROM", "q", client=c1)
    h("GETJOB", "FROM", "q", client=c2)
    j1 = add(h, "q", "1")
    j2 = add(h, "q", "2")
    out = h.drain()
    assert out == [(c1, [[b"q", j1, b"1"]]), (c2, [[b"q", j2, b"2"]])]


def test_blocked_getjob_timeout_replies_null(h):
    c = h.new_client()
    h("GETJOB", "TIMEOUT", 300, "FROM", "q", client=c)
    assert h.advance(200) == []
    assert h.advance(200) == [(c, None)]
    assert c.blocked is None and h("QSTAT", "q")[9] == 0


def test_blocked_client_disconnect_leaves_no_waiter(h):
    c = h.new_client()
    h("GETJOB", "FROM", "q", client=c)
    h.node.client_closed(c)
    add(h, "q")
    assert h.drain() == [] and h("QLEN", "q") == 1


def test_blocked_on_several_queues(h):
    c = h.new_client()
    h("GETJOB", "FROM", "a", "b", client=c)
    jid = add(h, "b", "x")
    assert h.drain() == [(c, [[b"b", jid, b"x"]])]
    add(h, "a", "y")
    assert h.drain() == [] and h("QLEN", "a") == 1


# ------------------------------------------------------------------ timers
def test_delayed_job_is_queued_after_delay(h):
    jid = add(h, "q", "b", "DELAY", 2)
    assert show(h, jid)[b"state"] == b"active" and h("QLEN", "q") == 0
    h.advance(1900)
    assert h("QLEN", "q") == 0
    h.advance(200)
    assert h("QLEN", "q") == 1 and show(h, jid)[b"state"] == b"queued"
    assert show(h, jid)[b"additional-deliveries"] == 0


def test_unacked_job_requeued_after_retry_counting_additional_delivery(h):
    jid = add(h, "q", "b", "RETRY", 2)
    assert h("GETJOB", "FROM", "q")[0][1] == jid
    assert show(h, jid)[b"state"] == b"active"
    h.advance(1700)
    assert h("QLEN", "q") == 0
    h.advance(600)
    assert h("QLEN", "q") == 1
    s = show(h, jid)
    assert s[b"state"] == b"queued" and s[b"additional-deliveries"] == 1 and s[b"nacks"] == 0


def test_retry_counts_from_queue_time_not_delivery(h):
    jid = add(h, "q", "b", "RETRY", 2)
    h.advance(1500)
    h("GETJOB", "FROM", "q")
    h.advance(800)  # 2.3 s after queueing, 0.8 s after delivery
    assert show(h, jid)[b"state"] == b"queued"


def test_queued_job_not_consumed_is_not_requeued_twice(h):
    jid = add(h, "q", "b", "RETRY", 1)
    h.advance(5000)
    assert h("QLEN", "q") == 1 and show(h, jid)[b"additional-deliveries"] == 0


def test_at_most_once_job_never_requeued(h):
    jid = add(h, "q", "b", "RETRY", 0)
    assert jid[-4:] == b"05a0"
    h("GETJOB", "FROM", "q")
    h.advance(10_000)
    assert h("QLEN", "q") == 0 and show(h, jid)[b"state"] == b"active"
    assert show(h, jid)[b"next-requeue-within"] is None
    assert h("ENQUEUE", jid) == 0 and h("NACK", jid) == 0


def test_at_most_once_job_with_delay_is_queued_once(h):
    jid = add(h, "q", "b", "RETRY", 0, "DELAY", 1)
    h.advance(1100)
    assert h("GETJOB", "NOHANG", "FROM", "q")[0][1] == jid
    h.advance(5000)
    assert h("QLEN", "q") == 0


def test_ttl_expiry_removes_job_in_any_state(h):
    queued = add(h, "q", "a", "TTL", 3)
    active = add(h, "q", "b", "TTL", 3)
    h("DEQUEUE", active)
    h.advance(2900)
    assert show(h, queued) is not None
    h.advance(200)
    assert show(h, queued) is None and show(h, active) is None
    assert h("QLEN", "q") == 0 and len(h.node.jobs) == 0
    assert len(h.node.awake) == 0


def test_paused_in_postpones_requeue(h):
    jid = add(h, "q", "b", "RETRY", 1)
    h("GETJOB", "FROM", "q")
    h("PAUSE", "q", "in")
    h.advance(3000)
    assert show(h, jid)[b"state"] == b"active"
    h("PAUSE", "q", "none")
    h.advance(1300)
    assert show(h, jid)[b"state"] == b"queued"


# --------------------------------------------------------------- ack family
def test_ackjob_frees_job_single_node(h):
    jid = add(h)
    h("GETJOB", "FROM", "q")
    assert h("ACKJOB", jid) == 1
    assert h("SHOW", jid) is None and len(h.node.jobs) == 0
    assert h("ACKJOB", jid) == 0


def test_ackjob_of_queued_job_dequeues_it(h):
    jid = add(h)
    assert h("ACKJOB", jid) == 1 and h("QLEN", "q") == 0


def test_ackjob_unknown_single_node_makes_no_dummy(h):
    fake = b"D-12345678-" + b"A" * 24 + b"-05a1"
    assert h("ACKJOB", fake) == 0 and len(h.node.jobs) == 0


def test_bad_id_fails_whole_command_first(h):
    jid = add(h)
    assert h("ACKJOB", jid, "D-bad") == "BADID Invalid Job ID format."
    assert h("QLEN", "q") == 1
    for cmd in ("FASTACK", "DELJOB", "ENQUEUE", "DEQUEUE", "NACK", "WORKING", "SHOW"):
        assert h(cmd, "nope") == "BADID Invalid Job ID format.", cmd


def test_fastack_and_deljob(h):
    a, b = add(h), add(h)
    fake = b"D-12345678-" + b"A" * 24 + b"-05a1"
    assert h("FASTACK", a, fake) == 1
    assert h("DELJOB", b, fake) == 1
    assert len(h.node.jobs) == 0 and h("QLEN", "q") == 0


def test_nack_counts_and_requeues_at_original_position(h):
    first = add(h, "q", "1")
    second = add(h, "q", "2")
    assert h("GETJOB", "FROM", "q")[0][1] == first
    assert h("NACK", first) == 1
    assert h("NACK", first) == 0  # already queued
    got = h("GETJOB", "WITHCOUNTERS", "FROM", "q")[0]
    assert got[1] == first and got[4] == 1 and got[6] == 0
    assert h("GETJOB", "FROM", "q")[0][1] == second


def test_enqueue_dequeue_counts(h):
    jid = add(h)
    assert h("ENQUEUE", jid) == 0
    assert h("DEQUEUE", jid) == 1 and h("DEQUEUE", jid) == 0
    assert h("ENQUEUE", jid) == 1
    s = show(h, jid)
    assert s[b"state"] == b"queued" and s[b"additional-deliveries"] == 1


def test_working_postpones_and_returns_retry(h):
    jid = add(h, "q", "b", "RETRY", 3, "TTL", 100)
    h("GETJOB", "FROM", "q")
    for _ in range(10):
        h.advance(1000)
        assert h("WORKING", jid) == 3
    assert show(h, jid)[b"state"] == b"active"
    h.advance(3400)
    assert show(h, jid)[b"state"] == b"queued"


def test_working_dequeues_a_queued_job(h):
    jid = add(h, "q", "b", "RETRY", 5)
    assert h("WORKING", jid) == 5
    assert h("QLEN", "q") == 0 and show(h, jid)[b"state"] == b"active"


def test_working_errors(h):
    fake = b"D-12345678-" + b"A" * 24 + b"-05a1"
    assert h("WORKING", fake) == "NOJOB Job not known in the context of this node."
    jid = add(h, "q", "b", "TTL", 10, "RETRY", 1)
    h.advance(5100)
    assert h("WORKING", jid) == ("TOOLATE Half of job TTL already elapsed, you are no longer "
                                 "allowed to postpone the next delivery.")


# ------------------------------------------------------------------- queues
def test_qpeek_positive_and_negative(h):
    ids = [add(h, "q", f"b{i}") for i in range(5)]
    assert [j[1] for j in h("QPEEK", "q", 2)] == ids[:2]
    assert [j[1] for j in h("QPEEK", "q", -2)] == [ids[4], ids[3]]
    assert h("QPEEK", "q", 2)[0] == [b"q", ids[0], b"b0"]
    assert h("QPEEK", "q", 0) == [] and h("QPEEK", "none", 3) == []
    assert h("QPEEK", "q", "x") == "ERR value is not an integer or out of range"
    assert h("QLEN", "q") == 5


def test_qstat_fields_and_counters(h):
    assert h.raw("QSTAT", "q") == b"*-1\r\n"
    jid = add(h)
    add(h)
    h("GETJOB", "FROM", "q")
    h("DEQUEUE", h("QPEEK", "q", 1)[0][1])
    h.advance(3000)
    st = h("QSTAT", "q")
    d = dict(zip(st[::2], st[1::2], strict=True))
    assert list(d) == [b"name", b"len", b"age", b"idle", b"blocked", b"import-from",
                       b"import-rate", b"jobs-in", b"jobs-out", b"pause"]
    assert d[b"len"] == 0 and d[b"jobs-in"] == 2 and d[b"jobs-out"] == 1
    assert d[b"age"] == 3 and d[b"idle"] == 3 and d[b"pause"] == b"none"
    assert jid


def test_pause_semantics(h):
    assert h("PAUSE", "q", "state") == b"none" and h("QSTAT", "q") is None
    assert h("PAUSE", "q", "none") == b"none" and h("QSTAT", "q") is None
    assert h("PAUSE", "q", "in", "out") == b"all"
    assert h("PAUSE", "q", "in", "none") == b"none"
    assert h("PAUSE", "q", "none", "in") == b"in"
    assert h("PAUSE", "q", "out") == b"out"  # replaces, not ORs
    assert h("PAUSE", "q", "bogus") == "ERR syntax error"
    assert h("PAUSE", "q", "bcast", "state") == b"out"
    assert h.raw("PAUSE", "q", "state") == b"+out\r\n"


def test_paused_out_blocks_getjob_until_cleared(h):
    jid = add(h)
    h("PAUSE", "q", "out")
    assert h("GETJOB", "NOHANG", "FROM", "q") is None
    c = h.new_client()
    assert h("GETJOB", "FROM", "q", client=c) == "BLOCKED"
    h("PAUSE", "q", "none")
    assert h.drain() == [(c, [[b"q", jid, b"body"]])]


def test_paused_queue_is_never_evicted_but_idle_empty_ones_are(h):
    h("PAUSE", "p", "in")
    h("GETJOB", "NOHANG", "FROM", "e")
    add(h, "full")
    h.advance(299_000)
    assert h("QSTAT", "e") is not None
    h.advance(2_000)
    assert h("QSTAT", "e") is None
    assert h("QSTAT", "p") is not None and h("QSTAT", "full") is not None


def test_qscan_finds_every_queue_with_cursor(h):
    for i in range(512):
        add(h, f"queue:{i}", "x")
    seen, cursor, calls = [], b"0", 0
    while True:
        cursor, names = h("QSCAN", cursor, "COUNT", 10)
        seen += names
        calls += 1
        if cursor == b"0":
            break
        assert calls < 1000
    assert len(set(seen)) == 512 and calls > 1
    assert len(h("QSCAN", "BUSYLOOP")[1]) == 512


def test_qscan_filters_and_errors(h):
    for i in range(4):
        for _ in range(i + 1):
            add(h, f"q{i}", "x")
    assert sorted(h("QSCAN", "BUSYLOOP", "MINLEN", 2)[1]) == [b"q1", b"q2", b"q3"]
    assert sorted(h("QSCAN", "BUSYLOOP", "MINLEN", 2, "MAXLEN", 3)[1]) == [b"q1", b"q2"]
    assert h("QSCAN", "bogus") == "ERR invalid cursor or option name"
    assert h("QSCAN", "0", "0") == "ERR syntax error"


def test_jscan_cursor_filters_and_reply_types(h):
    ids = {add(h, f"q{i % 4}", f"b{i}") for i in range(512)}
    seen, cursor = set(), b"0"
    for _ in range(10_000):
        cursor, items = h("JSCAN", cursor, "COUNT", 20)
        seen |= set(items)
        if cursor == b"0":
            break
    assert seen == ids
    assert len(h("JSCAN", "BUSYLOOP")[1]) == 512
    assert len(h("JSCAN", "BUSYLOOP", "QUEUE", "q1")[1]) == 128
    got = h("GETJOB", "FROM", "q0")[0][1]
    assert h("JSCAN", "BUSYLOOP", "STATE", "active")[1] == [got]
    assert len(h("JSCAN", "BUSYLOOP", "STATE", "active", "STATE", "queued")[1]) == 512
    assert h.raw("JSCAN", "BUSYLOOP", "STATE", "active").endswith(b"*1\r\n+" + got + b"\r\n")
    full = h("JSCAN", "BUSYLOOP", "STATE", "active", "REPLY", "all")[1][0]
    assert full[0:2] == [b"id", got] and full[-2] == b"body"
    assert h("JSCAN", "STATE", "bogus") == "ERR Invalid job state name"
    assert h("JSCAN", "REPLY", "bogus") == "ERR Invalid REPLY type, try ID or ALL"


# ---------------------------------------------------------------- memory
def test_oom_refuses_growth_commands_at_the_limit(h):
    assert h("CONFIG", "SET", "maxmemory", "200000") == b"OK"
    added = 0
    for _ in range(10_000):
        r = h("ADDJOB", "q", "x" * 100, 0)
        if isinstance(r, Error):  # past 75% a lone node holds no new job (as Disque)
            assert r == ("NOREPL Not enough reachable nodes for the requested replication "
                         "level, since I'm unable to hold a copy of the message for the "
                         "following reason: I'm out of memory")
            break
        added += 1
    assert 100 < added < 10_000
    assert h.node.mem.used * 100 > 200000 * 75 >= (h.node.mem.used - 500) * 100
    h("CONFIG", "SET", "maxmemory", str(h.node.mem.used - 1000))  # at the limit
    assert h("ADDJOB", "q", "x", 0) == "OOM command not allowed when used memory > 'maxmemory'."
    assert h("QLEN", "q") == added  # nothing lost
    assert h("GETJOB", "FROM", "q")  # reads still work


def test_eviction_frees_delivered_at_most_once_jobs_not_queued_ones(h):
    assert h("CONFIG", "SET", "maxmemory", "400000") == b"OK"
    for _ in range(300):
        add(h, "amo", "x" * 100, "RETRY", 0)
    delivered = h("GETJOB", "COUNT", 300, "FROM", "amo")
    assert len(delivered) == 300
    n = 0
    while not isinstance(h("ADDJOB", "keep", "y" * 100, 0), Error):  # NOREPL at 75%
        n += 1
        assert n < 10_000
    # more than the queued jobs fit: the limit under what is held (a lower maxmemory)
    h("CONFIG", "SET", "maxmemory", str(h.node.mem.used - 1000))
    h.advance(200)
    keep_before = h("QLEN", "keep")
    assert keep_before == n  # every accepted job still queued
    evicted = h.node.stats.jobs_evicted
    assert 0 < evicted <= 300  # delivered RETRY 0 jobs, nothing else
    assert len(h.node.jobs) == n + 300 - evicted
    assert h.node.mem.used <= h.node.config.maxmemory * 95 // 100  # back under 95%


# ------------------------------------------------------------------ misc
def test_auth_required_when_password_set():
    h = Harness(requirepass="sekret")
    c = h.new_client()
    assert h("ADDJOB", "q", "b", 0, client=c) == "NOAUTH Authentication required."
    assert h("AUTH", "wrong", client=c) == "ERR invalid password"
    assert h("AUTH", "sekret", client=c) == b"OK"
    assert ID_RE.match(h("ADDJOB", "q", "b", 0, client=c))


def test_auth_without_password_set(h):
    assert h("AUTH", "x") == "ERR Client sent AUTH, but no password is set"


def test_hello_shapes(h):
    r = h("HELLO")
    assert r == [1, h.node.myid_b, [h.node.myid_b, b"", b"7711", b"1"]]
    m = h("HELLO", 3)
    d = dict(zip(m[::2], m[1::2], strict=True))
    assert d[b"proto"] == 3 and d[b"server"] == b"disque"
    assert h.raw("GETJOB", "NOHANG", "FROM", "q") == b"_\r\n"  # RESP3 null now
    assert h("HELLO", 4) == "NOPROTO unsupported protocol version"


def test_used_memory_counts_jobs_queues_and_client_buffers(h):
    base = h.node.mem.used
    assert base > 0  # the harness's client
    c = h.new_client()
    h.node.set_client_buffer(c, 5000)
    assert h.node.mem.used - base > 5000
    add(h, "q", "x" * 10_000)
    with_job = h.node.mem.used
    h.node.client_closed(c)
    assert with_job - h.node.mem.used > 5000
    h("DEBUG", "FLUSHALL")
    assert h.node.mem.used == base


def test_debug_flushall_unblocks_consumers(h):
    add(h)
    c = h.new_client()
    h("GETJOB", "FROM", "other", client=c)
    assert h("DEBUG", "FLUSHALL") == b"OK"
    assert h.drain() == [(c, None)]
    assert len(h.node.jobs) == 0 and h("QLEN", "q") == 0


def test_info_sections(h):
    add(h)
    text = h("INFO").decode()
    for section in ("# Server", "# Clients", "# Memory", "# Jobs", "# Queues",
                    "# Persistence", "# Stats", "# CPU"):
        assert section in text
    assert "registered_jobs:1" in text and "registered_queues:1" in text
    assert h("INFO", "nosuchsection") == b""
    assert h("INFO", "JOBS") == b"# Jobs\r\nregistered_jobs:1\r\n"


def test_info_instantaneous_ops_per_sec(h):
    def ops():
        info = h("INFO", "stats").decode()
        return int(info.split("instantaneous_ops_per_sec:")[1].split("\r\n")[0])

    assert ops() == 0
    for _ in range(20):  # 100 commands every 100 ms: about 1000/s
        for _ in range(100):
            h("PING")
        h.advance(100)
    assert 900 <= ops() <= 1100
    h.advance(3000)  # idle: the window empties
    assert ops() <= 10


def test_command_docs_from_the_table():
    """COMMAND DOCS answers Redis 7's form from the command table's summaries (redis-cli
    7 and redis-py read it); unknown names are left out."""
    from nodeharness import Harness

    h = Harness()
    docs = h("COMMAND", "DOCS", "addjob", "nosuch")
    assert docs[0] == b"addjob" and len(docs) == 2
    fields = dict(zip(docs[1][::2], docs[1][1::2], strict=True))
    assert fields[b"summary"].startswith(b"Add a job to a queue")
    assert fields[b"group"] == b"jobs"
    everything = h("COMMAND", "DOCS")
    assert len(everything) // 2 == h("COMMAND", "COUNT") - 2  # POST and Host: are not


def test_commandstats_count_each_command_through_the_last_name_cache(h):
    """_execute keeps the last command looked up (and its counters) for a run of the
    same name: the counts stay exact across case changes, errors, unknown names and
    CONFIG RESETSTAT."""
    def calls() -> dict:
        text = h("INFO", "commandstats").decode()
        return {line.split(":")[0].removeprefix("cmdstat_"):
                int(line.split("calls=")[1].split(",")[0])
                for line in text.splitlines() if line.startswith("cmdstat_")}

    for _ in range(3):
        assert h("PING") == b"PONG"
    assert h("ping") == b"PONG"  # another name object, another case: the same command
    assert h("PING", "a", "b") == "ERR wrong number of arguments for 'ping' command"
    assert h("NOSUCH") == "ERR unknown command 'NOSUCH'"
    assert h("PING") == b"PONG"
    assert h("SHOW") == "ERR wrong number of arguments for 'show' command"
    assert h("SHOW", "D-00000000-000000000000000000000000-0000") is None
    # PING a b ran and answered its error (a call, as Redis's failed calls); SHOW's
    # arity error stopped before the command ran (no call, as Redis)
    assert calls() == {"ping": 6, "show": 1, "info": 1}
    assert h("CONFIG", "RESETSTAT") == b"OK"
    assert h("CONFIG", "RESETSTAT") == b"OK"  # (each is counted, then clears the counts)
    assert h("CONFIG", "GET", "maxmemory")[0] == b"maxmemory"  # counted anew
    assert h("PING") == b"PONG"
    assert calls() == {"config": 1, "ping": 1, "info": 1}
    assert h("QLEN", "q") == 0
    assert h("QLEN", "q") == 0
    assert calls() == {"config": 1, "ping": 1, "info": 2, "qlen": 2}


def test_a_renamed_command_is_not_found_by_its_old_name_after_the_new_one():
    h = Harness(rename_command=[("QLEN", "QLEN2")])
    assert h("QLEN2", "q") == 0
    assert h("QLEN", "q") == "ERR unknown command 'QLEN'"
    assert h("QLEN2", "q") == 0
