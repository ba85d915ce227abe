"""Consumer groups (bananaq's QADD/QGET/QACK/QNOTIFY/QFLUSH/QSTATUS/QINFO) on real
server processes: one node, and clusters joined with CLUSTER MEET (docs/GROUPS.md)."""

from __future__ import annotations

import re
import signal
import socket
import threading
import time

import pytest
import redis
from support import hello_ok, wait_for

EVENT_ID = re.compile(rb"^[0-9a-f]{16}-[0-9a-f]{8}$")
FIELDS = [b"total", b"inprogress", b"redo", b"done", b"available", b"consumers"]
OURS = [b"dead", b"lag", b"pending", b"oldest-pending-ms"]  # appended after bananaq's


def status(c, *args) -> dict:
    """QSTATUS as {queue: {group: {field: value}}}, checking the reply's shape."""
    out = {}
    for entry in c.execute_command("QSTATUS", *args):
        assert len(entry) == 2
        name, per = entry
        assert len(per) % 2 == 0
        groups = {}
        for g, stats in zip(per[::2], per[1::2], strict=True):
            assert stats[::2] == FIELDS + OURS
            assert all(isinstance(v, int) for v in stats[1::2])
            groups[g] = dict(zip(stats[::2], stats[1::2], strict=True))
        out[name] = groups
    return out


def test_qadd_qget_qack_reply_shapes(r):
    eid = r.execute_command("QADD", "foo", 60, "first")
    assert EVENT_ID.match(eid)
    assert r.execute_command("QADD", "foo", 60, "second", "NOBLOCK") == b"OK"
    got = r.execute_command("QGET", "foo", "g1")
    assert got == [eid, b"first"]
    second = r.execute_command("QGET", "foo", "g1")
    assert second[1] == b"second" and second[0] > eid  # IDs ordered by time
    assert r.execute_command("QGET", "foo", "g1") is None
    assert r.execute_command("QACK", "foo", "g1", eid) == 1
    assert r.execute_command("QACK", "foo", "g1", eid) == 0  # acked already
    # another group gets every event, from the oldest
    assert r.execute_command("QGET", "foo", "g2", "EX", 0) == [eid, b"first"]
    assert r.execute_command("QACK", "foo", "g2", eid) == 0  # EX 0 acked it
    st = status(r, "foo")
    assert list(st) == [b"foo"] and list(st[b"foo"]) == [b"g1", b"g2"]
    assert [st[b"foo"][b"g1"][k] for k in FIELDS] == [2, 1, 0, 1, 0, 0]
    assert [st[b"foo"][b"g2"][k] for k in FIELDS] == [2, 0, 0, 1, 1, 0]
    info = r.execute_command("QINFO", "foo", "GROUPS", "g2")
    assert len(info) == 1 and info[0].startswith(
        b"foo g2 total:2 inprogress:0 redo:0 done:1 available:1 consumers:0 dead:0 lag:1 "
        b"pending:0 oldest-pending-ms:")
    # binary-safe contents, delivery counts
    r.execute_command("QADD", "bin", 60, b"\x00\r\n\xff")
    got = r.execute_command("QGET", "bin", "g", "EX", "0.1", "WITHCOUNTERS")
    assert got[1:] == [b"\x00\r\n\xff", 1]
    time.sleep(0.25)
    assert r.execute_command("QGET", "bin", "g", "WITHCOUNTERS")[2] == 2


def test_errors_in_our_usual_form(r):
    cases = [
        (("QADD", "q", 10), "wrong number of arguments for 'qadd'"),
        (("QADD", "q", "abc", "x"), "expireSeconds must be"),
        (("QADD", "q", 0, "x"), "expireSeconds must be"),
        (("QADD", "q", -1, "x"), "expireSeconds must be"),
        (("QADD", "q", 10, "x", "BLOCK"), "syntax error"),
        (("QGET", "q"), "wrong number of arguments for 'qget'"),
        (("QGET", "q", "g", "EX"), "syntax error"),
        (("QGET", "q", "g", "EX", "-1"), "EX must be"),
        (("QGET", "q", "g", "EX", "1e3"), "EX must be"),
        (("QACK", "q", "g", "nope"), "BADID Invalid event ID format"),
        (("QNOTIFY", "g", "x", "q"), "timeout must be"),
        (("QNOTIFY", "g", 1), "wrong number of arguments"),
        (("QSTATUS", "q", "GROUPS"), "syntax error"),
        (("QFLUSH",), "wrong number of arguments"),
    ]
    for args, msg in cases:
        with pytest.raises(redis.ResponseError, match=msg):
            r.execute_command(*args)
    assert r.execute_command("PING") is True  # nothing broke


def test_lease_expiry_redo_and_late_ack(r):
    eid = r.execute_command("QADD", "q", 60, "x")
    assert r.execute_command("QGET", "q", "g", "EX", "0.2")[0] == eid
    assert r.execute_command("QGET", "q", "g") is None  # leased: nobody else gets it
    assert status(r, "q")[b"q"][b"g"][b"inprogress"] == 1
    time.sleep(0.35)
    st = status(r, "q")[b"q"][b"g"]
    assert (st[b"inprogress"], st[b"redo"]) == (0, 1)
    assert r.execute_command("QACK", "q", "g", eid) == 0  # the lease ran out
    assert r.execute_command("QGET", "q", "g", "WITHCOUNTERS") == [eid, b"x", 2]
    assert r.execute_command("QACK", "q", "g", eid) == 1
    assert status(r, "q")[b"q"][b"g"][b"done"] == 1


def test_qack_of_several_ids_counts_each_live_lease_once(r):
    """QACK queue group id [id ...] (XACK's shape): how many live leases it ended; an
    ID twice counts once, a lease that ran out, an event never leased or unknown 0."""
    ids = [r.execute_command("QADD", "q", 60, f"e{i}") for i in range(6)]
    got = r.execute_command("QGET", "q", "g", "EX", 60, "COUNT", 3)
    assert [e[0] for e in got] == ids[:3]
    short = r.execute_command("QGET", "q", "g", "EX", "0.1")[0]
    assert short == ids[3]
    # bad input acks nothing: the same errors as the one-ID form
    with pytest.raises(redis.ResponseError, match="BADID Invalid event ID format"):
        r.execute_command("QACK", "q", "g", ids[0], "nope")
    with pytest.raises(redis.ResponseError, match="wrong number of arguments for 'qack'"):
        r.execute_command("QACK", "q", "g")
    assert status(r, "q")[b"q"][b"g"][b"inprogress"] == 4
    time.sleep(0.2)  # the short lease ran out
    unknown = b"0000000000000001-00000000"
    assert r.execute_command("QACK", "q", "g", ids[0], ids[1], ids[0], short, ids[4],
                             unknown, ids[2]) == 3
    assert r.execute_command("QACK", "q", "g", *ids) == 0  # nothing live any more
    st = status(r, "q")[b"q"][b"g"]
    assert (st[b"done"], st[b"redo"], st[b"available"], st[b"inprogress"]) == (3, 1, 2, 0)
    # QWORKING takes several IDs too, EX last
    two = [e[0] for e in r.execute_command("QGET", "q", "g", "EX", 60, "COUNT", 2)]
    assert r.execute_command("QWORKING", "q", "g", *two, ids[0], "EX", 120) == 2
    with pytest.raises(redis.ResponseError, match="syntax error"):
        r.execute_command("QWORKING", "q", "g", two[0], "EX", 5, two[1])
    assert r.execute_command("QACK", "q", "g", *two) == 2


def test_events_expire_for_every_group(r):
    r.execute_command("QADD", "q", "0.3", "short")
    keep = r.execute_command("QADD", "q", 60, "long")
    assert status(r, "q", "GROUPS", "g")[b"q"][b"g"][b"total"] == 2
    time.sleep(0.45)
    assert status(r, "q", "GROUPS", "g")[b"q"][b"g"][b"total"] == 1
    assert r.execute_command("QGET", "q", "g") == [keep, b"long"]


def test_qnotify_blocks_wakes_and_times_out(server, r):
    r.execute_command("QADD", "ready", 60, "x")
    assert r.execute_command("QNOTIFY", "g", 1, "empty", "ready") == b"ready"
    t = time.monotonic()
    assert r.execute_command("QNOTIFY", "g", "0.3", "empty") is None
    assert 0.25 < time.monotonic() - t < 2
    # a waiting consumer counts in QSTATUS, and a QADD wakes it
    box = {}
    other = server.client()
    th = threading.Thread(target=lambda: box.setdefault(
        "r", other.execute_command("QNOTIFY", "g", 5, "a", "b")))
    th.start()
    wait_for(lambda: status(r, "b").get(b"b", {}).get(b"g", {}).get(b"consumers") == 1,
             what="the consumer to block")
    r.execute_command("QADD", "b", 60, "y")
    th.join(5)
    assert box["r"] == b"b"
    # an event done for g does not wake g; one redone does
    r.execute_command("QGET", "b", "g", "EX", 0)
    assert r.execute_command("QNOTIFY", "g", "0.2", "b") is None
    assert r.execute_command("QNOTIFY", "h", "0.2", "b") == b"b"  # other groups: available


def test_qflush_during_leases(r):
    eid = r.execute_command("QADD", "q", 60, "x")
    r.execute_command("QADD", "q", 60, "y")
    assert r.execute_command("QGET", "q", "g", "EX", 5)[0] == eid
    short = r.execute_command("QGET", "q", "h", "EX", "0.2")[0]
    assert r.execute_command("QFLUSH", "q") == b"OK"
    assert r.execute_command("QGET", "q", "g") is None
    assert status(r, "q")[b"q"] == {}  # no events, no consumers: nothing to show
    assert r.execute_command("QACK", "q", "g", eid) == 1  # the lease still completes
    time.sleep(0.3)
    assert r.execute_command("QACK", "q", "h", short) == 0  # ran out: never given back
    assert r.execute_command("QGET", "q", "h") is None
    r.execute_command("QADD", "q", 60, "z")
    assert r.execute_command("QGET", "q", "g")[1] == b"z"


def test_pipelined_replies_keep_their_order(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        s.sendall(b"QADD q 10 a\r\nQGET q g\r\nQNOTIFY g 0.1 none\r\nPING\r\n")
        out = b""
        deadline = time.monotonic() + 5
        while not out.endswith(b"+PONG\r\n") and time.monotonic() < deadline:
            out += s.recv(4096)
        parts = out.split(b"\r\n")
        assert parts[0].startswith(b"$25") and parts[2] == b"*2"
        assert b"$-1" in out and out.endswith(b"+PONG\r\n")


# ------------------------------------------------------------------- clusters
def test_cluster_events_replicated_and_consumed_from_any_node(make_cluster):
    servers, clients = make_cluster(3)
    a, b, c = clients
    ids = [a.execute_command("QADD", "q", 60, f"e{i}") for i in range(5)]
    # every node holds a copy (R = 3): QSTATUS agrees everywhere
    for x in clients:
        assert status(x, "q", "GROUPS", "g")[b"q"][b"g"][b"total"] == 5
    got = []
    for x in (b, c, b, c, b):  # consumers on the nodes that did not create them
        e = x.execute_command("QGET", "q", "g")
        got.append(e[0])
        assert x.execute_command("QACK", "q", "g", e[0]) == 1
    assert got == ids  # each once, oldest first
    assert b.execute_command("QGET", "q", "g") is None
    for x in clients:
        wait_for(lambda x=x: status(x, "q", "GROUPS", "g")[b"q"][b"g"][b"done"] == 5,
                 what="acks replicated")
    # another group, consuming everywhere at once, gets each event once
    seen = []
    for x in clients * 3:
        e = x.execute_command("QGET", "q", "other", "EX", 0)
        if e is not None:
            seen.append(e[0])
    assert sorted(seen) == sorted(ids)


def test_qack_of_several_ids_decided_by_several_nodes(make_cluster):
    """One QACK on node A of events each node decides (its own), one given twice, one
    lease run out, an ID nobody knows: each decided by its authority, A's peers asked
    once each; every holder sees them done."""
    servers, clients = make_cluster(3)
    a, b, c = clients
    made = [[x.execute_command("QADD", "q", 60, f"e{i}.{k}") for k in range(3)]
            for i, x in enumerate(clients)]
    for x, ids in zip((a, b), made, strict=False):
        assert [e[0] for e in x.execute_command("QGET", "q", "g", "EX", 60, "COUNT", 3)] == ids
    assert [e[0] for e in c.execute_command("QGET", "q", "g", "EX", 60, "COUNT", 2)] \
        == made[2][:2]
    assert c.execute_command("QGET", "q", "g", "EX", "0.1")[0] == made[2][2]
    time.sleep(0.2)
    unknown = b"0000000000000001-00000000"
    flat = [i for ids in made for i in ids]
    assert a.execute_command("QACK", "q", "g", made[1][0], *flat, unknown, made[2][1]) == 8
    for x in clients:
        wait_for(lambda x=x: status(x, "q", "GROUPS", "g")[b"q"][b"g"][b"done"] == 8,
                 what="the acks on every holder")
    assert b.execute_command("QACK", "q", "g", *flat) == 0
    assert c.execute_command("QGET", "q", "g", "WITHCOUNTERS") == [made[2][2], b"e2.2", 2]


def test_qack_on_another_node_and_flush_everywhere(make_cluster):
    servers, clients = make_cluster(3)
    a, b, c = clients
    eid = a.execute_command("QADD", "q", 60, "x")
    assert b.execute_command("QGET", "q", "g")[0] == eid
    assert c.execute_command("QGET", "q", "g") is None  # leased cluster-wide
    assert c.execute_command("QACK", "q", "g", eid) == 1  # acked on a third node
    assert a.execute_command("QACK", "q", "g", eid) == 0
    a.execute_command("QADD", "q", 60, "y")
    assert b.execute_command("QFLUSH", "q") == b"OK"
    for x in clients:
        wait_for(lambda x=x: status(x, "q", "GROUPS", "g")[b"q"][b"g"][b"total"] == 0,
                 what="the flush everywhere")


def test_qnotify_woken_by_qadd_on_another_node(make_cluster):
    servers, clients = make_cluster(3)
    a, b = clients[0], clients[1]
    waits = []
    for _ in range(5):
        box = {}
        th = threading.Thread(target=lambda box=box: box.setdefault(
            "r", b.execute_command("QNOTIFY", "g", 5, "nq")))
        th.start()
        wait_for(lambda: status(b, "nq", "GROUPS", "g")[b"nq"][b"g"][b"consumers"] == 1,
                 what="the consumer to block")
        t = time.monotonic()
        a.execute_command("QADD", "nq", 60, "x")
        th.join(5)
        waits.append(time.monotonic() - t)
        assert box["r"] == b"nq"
        e = b.execute_command("QGET", "nq", "g", "EX", 0)
        assert e is not None
    assert sorted(waits)[2] < 0.5


def test_qnotify_woken_through_a_watch_when_no_copy_is_held(make_cluster):
    """In a 4-node cluster R is 3: a node that holds no copy of the new event learns
    from its watch (EVWATCH/EVAVAIL) and leases it from the creator."""
    servers, clients = make_cluster(4)
    for _ in range(4):
        for i, x in enumerate(clients):
            box = {}
            th = threading.Thread(target=lambda x=x, box=box: box.setdefault(
                "r", x.execute_command("QNOTIFY", "g", 5, "w")))
            th.start()
            wait_for(lambda x=x: status(x, "w", "GROUPS", "g")[b"w"][b"g"][b"consumers"] == 1,
                     what="the consumer to block")
            src = clients[(i + 1) % 4]
            eid = src.execute_command("QADD", "w", 60, "x")
            th.join(5)
            assert box["r"] == b"w"
            assert x.execute_command("QGET", "w", "g")[0] == eid
            assert x.execute_command("QACK", "w", "g", eid) == 1


def test_node_killed_with_events_in_flight(make_cluster):
    """Events added on a node survive its kill -9 (R = 3): the others take over
    leasing once they agree it failed; a lease it granted before dying is respected
    until it runs out, then the event is redone; nothing is lost."""
    servers, clients = make_cluster(3)
    a, b, c = clients
    ids = [a.execute_command("QADD", "q", 120, f"e{i}") for i in range(6)]
    leased = b.execute_command("QGET", "q", "g", "EX", 3)[0]
    assert leased == ids[0]
    done = b.execute_command("QGET", "q", "g")[0]
    assert b.execute_command("QACK", "q", "g", done) == 1
    servers[0].kill(signal.SIGKILL)
    got = {}

    def drain():
        for x in (b, c):
            e = x.execute_command("QGET", "q", "g", "EX", 30)
            if e is not None:
                got[e[0]] = e[1]
        return set(ids) - {done} <= set(got)

    wait_for(drain, timeout=20, step=0.2, what="every event to be delivered after the kill")
    assert done not in got
    assert status(b, "q", "GROUPS", "g")[b"q"][b"g"][b"total"] == 6
    # and another group still gets all six
    seen = {b.execute_command("QGET", "q", "late", "EX", 0)[0] for _ in range(6)}
    assert seen == set(ids)


def test_qadd_norepl_when_copies_cannot_be_made(make_cluster):
    servers, clients = make_cluster(3)
    servers[1].kill(signal.SIGKILL)
    servers[2].kill(signal.SIGKILL)
    a = clients[0]

    def refused():
        try:
            a.execute_command("QADD", "q", 60, "x")
        except redis.ResponseError as e:
            return "NOREPL" in str(e)
        return False

    wait_for(refused, timeout=20, step=0.3, what="QADD to refuse without copies")
    assert a.execute_command("QADD", "q", 60, "x", "NOBLOCK") == b"OK"
    assert a.execute_command("QGET", "q", "g")[1] == b"x"


def test_info_groups_section(r):
    keys = ("events_added", "events_delivered", "events_acked")
    before = r.info("groups")
    r.execute_command("QADD", "q", 60, "x")
    eid = r.execute_command("QGET", "q", "g")[0]
    r.execute_command("QGET", "q", "h")
    r.execute_command("QACK", "q", "g", eid)
    info = r.info("groups")
    assert [info[k] - before[k] for k in keys] == [1, 2, 1]
    assert (info["events"], info["event_leases"], info["qnotify_clients"]) == (1, 1, 0)


def test_lag_pending_and_oldest_pending_age(r):
    first = r.execute_command("QADD", "q", 60, "a")
    time.sleep(0.2)
    r.execute_command("QADD", "q", 60, "b")
    r.execute_command("QADD", "q", 60, "c")
    assert r.execute_command("QGET", "q", "g")[0] == first
    st = status(r, "q")[b"q"][b"g"]
    assert (st[b"lag"], st[b"pending"]) == (2, 1)
    assert 150 <= st[b"oldest-pending-ms"] < 5000
    r.execute_command("QACK", "q", "g", first)
    assert status(r, "q")[b"q"][b"g"][b"oldest-pending-ms"] < 150


def test_maxdeliveries_dead_letters_and_requeue(r):
    eid = r.execute_command("QADD", "q", 60, "poison")
    ok = r.execute_command("QADD", "q", 60, "fine")
    for n in (1, 2):
        got = r.execute_command("QGET", "q", "g", "EX", "0.1", "MAXDELIVERIES", 2,
                                "WITHCOUNTERS")
        assert got == [eid, b"poison", n]
        time.sleep(0.15)
    # delivered twice without an ack: the third QGET dead-letters it and moves on
    assert r.execute_command("QGET", "q", "g", "MAXDELIVERIES", 2)[0] == ok
    assert r.execute_command("QGET", "q", "g", "MAXDELIVERIES", 2) is None
    assert r.execute_command("QDEAD", "q", "g") == [[eid, b"poison", 2]]
    assert r.execute_command("QDEAD", "q", "other") == []  # groups never affect each other
    assert r.execute_command("QGET", "q", "other")[0] == eid
    st = status(r, "q", "GROUPS", "g")[b"q"][b"g"]
    assert (st[b"total"], st[b"dead"], st[b"inprogress"]) == (2, 1, 1)
    assert r.execute_command("QDEAD", "q", "g", "REQUEUE", eid, ok) == 1
    assert r.execute_command("QDEAD", "q", "g") == []
    assert r.execute_command("QGET", "q", "g", "WITHCOUNTERS") == [eid, b"poison", 1]
    for args, msg in ((("QGET", "q", "g", "MAXDELIVERIES", 0), "MAXDELIVERIES must be"),
                      (("QDEAD", "q", "g", "REQUEUE"), "syntax error"),
                      (("QDEAD", "q", "g", "REQUEUE", "bad"), "BADID")):
        with pytest.raises(redis.ResponseError, match=msg):
            r.execute_command(*args)


def test_qworking_extends_a_lease(r):
    eid = r.execute_command("QADD", "q", 60, "slow")
    assert r.execute_command("QGET", "q", "g", "EX", "0.3")[0] == eid
    time.sleep(0.15)
    assert r.execute_command("QWORKING", "q", "g", eid, "EX", 1) == 1
    time.sleep(0.3)  # past the first lease: still ours
    assert r.execute_command("QGET", "q", "g") is None
    assert status(r, "q")[b"q"][b"g"][b"inprogress"] == 1
    assert r.execute_command("QACK", "q", "g", eid) == 1
    assert r.execute_command("QWORKING", "q", "g", eid) == 0  # acked: nothing to extend
    with pytest.raises(redis.ResponseError, match="syntax error"):
        r.execute_command("QWORKING", "q", "g", eid, "EX")


def test_qworking_and_dead_letters_across_nodes(make_cluster):
    servers, clients = make_cluster(3)
    a, b, c = clients
    eid = a.execute_command("QADD", "q", 60, "x")
    assert b.execute_command("QGET", "q", "g", "EX", "0.4", "MAXDELIVERIES", 1)[0] == eid
    assert c.execute_command("QWORKING", "q", "g", eid, "EX", 2) == 1  # decided by a
    time.sleep(0.5)
    assert c.execute_command("QGET", "q", "g", "MAXDELIVERIES", 1) is None  # still leased
    assert b.execute_command("QACK", "q", "g", eid) == 1
    # a poison event dead-lettered by its authority shows on every holder
    bad = a.execute_command("QADD", "q", 60, "bad")
    assert c.execute_command("QGET", "q", "g", "EX", "0.1", "MAXDELIVERIES", 1)[0] == bad
    time.sleep(0.2)
    assert c.execute_command("QGET", "q", "g", "MAXDELIVERIES", 1) is None
    for x in clients:
        wait_for(lambda x=x: x.execute_command("QDEAD", "q", "g") == [[bad, b"bad", 1]],
                 what="the dead letter replicated")
    assert b.execute_command("QDEAD", "q", "g", "REQUEUE", bad) == 1  # on a replica
    # the requeue reaches the other holders over the bus (EVSTATE): c gets it soon
    got = wait_for(lambda: c.execute_command("QGET", "q", "g", "EX", 0),
                   what="the requeued event")
    assert got[0] == bad


def test_creator_restarted_without_its_events_gets_them_back(make_cluster):
    """Without AOF events live in memory: a creator killed and restarted at once (same
    node ID, never marked FAIL) is still their authority but has lost them. Its peers
    give them back when their links come up (EVSYNC/EVNEED, a read repair)."""

    servers, clients = make_cluster(3)
    a, b, c = clients
    ids = [a.execute_command("QADD", "q", 120, f"e{i}") for i in range(4)]
    servers[0].kill(signal.SIGKILL)
    servers[0].start()
    clients[0] = a = servers[0].client()
    wait_for(lambda: hello_ok(a, 3) and hello_ok(b, 3), what="the node to rejoin")
    wait_for(lambda: a.info("groups")["events"] == 4, what="the copies back")
    got = []

    def drain():
        e = b.execute_command("QGET", "q", "g", "EX", 0)
        if e is not None:
            got.append(e[0])
        return sorted(got) == sorted(ids)

    wait_for(drain, timeout=20, step=0.05, what="every event delivered")
    assert len(got) == 4
    assert b.info("groups")["events_repaired"] + c.info("groups")["events_repaired"] >= 4


def test_event_ids_rise_across_nodes(make_cluster):
    """Sequential QADDs (each sent after the previous reply) round-robin over three
    nodes of one machine: every ID is above the previous one (the node's ID clock is
    raised by the events it holds copies of: a hybrid logical clock), though the
    nodes' millisecond clocks tie and node IDs would sort the ties either way."""
    servers, clients = make_cluster(3)
    prev = b""
    for i in range(300):
        eid = clients[i % 3].execute_command("QADD", "q", 60, f"e{i}")
        assert eid > prev, (i, prev, eid)
        prev = eid


def test_qadd_idempotent_retries_never_duplicate(make_cluster):
    """QADD ... IDEMPOTENT key: the same key returns the first event's ID, on the node
    that added it and on a node holding a copy; a retry after -NOREPL (a node stopped:
    the copies could not all be made) gets the same event once its copies are made,
    and the group gets it once."""
    servers, clients = make_cluster(3)
    a, b, c = clients
    eid = a.execute_command("QADD", "q", 60, "one", "IDEMPOTENT", "k1")
    assert a.execute_command("QADD", "q", 60, "other", "IDEMPOTENT", "k1") == eid
    assert b.execute_command("QADD", "q", 60, "one", "IDEMPOTENT", "k1") == eid
    assert a.execute_command("QADD", "q", 60, "x", "NOBLOCK", "IDEMPOTENT", "k1") == b"OK"
    with pytest.raises(redis.ResponseError, match="IDEMPOTENT key must be 1 to 256 bytes"):
        a.execute_command("QADD", "q", 60, "x", "IDEMPOTENT", "k" * 257)
    with pytest.raises(redis.ResponseError, match="syntax error"):
        a.execute_command("QADD", "q", 60, "x", "IDEMPOTENT")
    servers[2].proc.send_signal(signal.SIGSTOP)  # reachable until flagged, never answers
    try:
        with pytest.raises(redis.ResponseError, match="NOREPL"):
            a.execute_command("QADD", "q", 60, "two", "IDEMPOTENT", "k2")
    finally:
        servers[2].proc.send_signal(signal.SIGCONT)
    wait_for(lambda: hello_ok(a, 3) and hello_ok(c, 3), timeout=20, what="the node back")

    def retry_once():
        try:
            return a.execute_command("QADD", "q", 60, "two", "IDEMPOTENT", "k2")
        except redis.exceptions.TryAgainError:  # its copies are being made
            return None
        except redis.ResponseError as e:  # the node still thinks copies cannot be made
            assert str(e).startswith("NOREPL"), e
            return None

    retry = wait_for(retry_once, what="the retry to succeed")
    assert c.execute_command("QADD", "q", 60, "two", "IDEMPOTENT", "k2") == retry
    got = []
    while (e := b.execute_command("QGET", "q", "g", "EX", 0)) is not None:
        got.append(e[1])
    assert got == [b"one", b"two"]


def test_the_next_holder_takes_over_as_soon_as_it_flags_the_creator(server_factory):
    """kill -9 of the node that decides for a queue's events: another holder serves
    them once its link to the creator stayed down for 1 s (half the node timeout at
    most), before any node flags it failing (one node timeout), let alone the
    majority's FAIL."""
    from support import join_cluster

    timeout_ms = 2000
    servers = [server_factory("--cluster-node-timeout", str(timeout_ms)) for _ in range(3)]
    a, b, c = join_cluster(servers)
    ids = [a.execute_command("QADD", "q", 120, f"e{i}") for i in range(3)]
    servers[0].kill(signal.SIGKILL)
    t0 = time.monotonic()
    first = wait_for(lambda: b.execute_command("QGET", "q", "g", "EX", 0), timeout=20,
                     step=0.02, what="an event served after the kill")
    took = time.monotonic() - t0
    assert first[0] == ids[0]
    assert took < timeout_ms / 1000, f"served {took:.2f} s after the kill"


def test_qget_count_leases_a_batch(make_cluster):
    """QGET ... COUNT n: up to n events in one reply, as an array of entries (WITHCOUNTERS
    too), [] once none is left; each is leased (QACK 1) and not delivered again."""
    servers, clients = make_cluster(2)
    a, b = clients
    ids = [a.execute_command("QADD", "q", 60, f"e{i}") for i in range(5)]
    first = a.execute_command("QGET", "q", "g", "COUNT", 3)
    assert first == [[ids[0], b"e0"], [ids[1], b"e1"], [ids[2], b"e2"]]
    assert all(a.execute_command("QACK", "q", "g", e[0]) == 1 for e in first)
    rest = a.execute_command("QGET", "q", "g", "COUNT", 10, "WITHCOUNTERS")
    assert rest == [[ids[3], b"e3", 1], [ids[4], b"e4", 1]]
    assert a.execute_command("QGET", "q", "g", "COUNT", 2) == []
    assert a.execute_command("QGET", "q", "g") is None
    # a node that decides for none of them asks a peer: one event, in a one-entry array
    assert b.execute_command("QGET", "q", "other", "COUNT", 5, "EX", 0) == [[ids[0], b"e0"]]
    for bad in ("0", "10001", "x"):
        with pytest.raises(redis.ResponseError, match="COUNT must be 1 to 10000"):
            a.execute_command("QGET", "q", "g", "COUNT", bad)
