"""The sync client against a real single node: every command, replies typed, errors mapped."""

from __future__ import annotations

import json

import pytest
import redis
from support import free_port

from disquepy.client import (
    Disque,
    DisqueError,
    Hello,
    Job,
    NoJobError,
    NoNodesError,
    PausedError,
    ResponseError,
)


def test_add_get_ack_roundtrip(dq, r):
    jid = dq.add_job("q", b"hello", retry=7, ttl=600)
    assert isinstance(jid, str) and jid.startswith("D-")
    # the raw server agrees on what was added
    shown = r.execute_command("SHOW", jid)
    d = dict(zip(shown[::2], shown[1::2], strict=True))
    assert d[b"retry"] == 7 and d[b"body"] == b"hello" and d[b"queue"] == b"q"
    jobs = dq.get_jobs("q", with_counters=True)
    assert jobs == [Job(jid, "q", b"hello", 0, 0)]
    assert dq.ack(jid) == 1
    assert r.execute_command("SHOW", jid) is None


def test_add_job_options_reach_the_server(dq):
    jid = dq.add_job("q", "x", 0, replicate=1, delay=100, retry=3, ttl=500, maxlen=10,
                     async_=True)
    s = dq.show(jid)
    assert (s["delay"], s["retry"], s["ttl"] <= 500, s["state"]) == (100, 3, True, "active")
    assert dq.qlen("q") == 0  # delayed, not queued
    dq.add_job("q2", "a", maxlen=1)
    with pytest.raises(ResponseError, match="MAXLEN") as ei:
        dq.add_job("q2", "b", maxlen=1)
    assert ei.value.code == "MAXLEN"


def test_show_qstat_qpeek_types(dq):
    a = dq.add_job("q", b"a")
    b = dq.add_job("q", b"b")
    s = dq.show(a)
    assert s["id"] == a and s["queue"] == "q" and s["state"] == "queued"
    assert s["body"] == b"a" and isinstance(s["nacks"], int)
    assert isinstance(s["nodes-delivered"], list)
    assert dq.show("D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1") is None
    st = dq.qstat("q")
    assert st["name"] == "q" and st["len"] == 2 and st["pause"] == "none"
    assert dq.qstat("nosuchqueue") is None
    assert [j.id for j in dq.qpeek("q", 10)] == [a, b]
    assert [j.id for j in dq.qpeek("q", -1)] == [b]
    assert dq.qlen("q") == 2  # peek does not consume


def test_get_jobs_queue_order_count_and_empty(dq):
    dq.add_job("low", "l1")
    h = dq.add_job("high", "h1")
    # GETJOB serves queues left to right
    assert [j.id for j in dq.get_jobs(["high", "low"])] == [h]
    more = dq.get_jobs(["high", "low"], count=5)
    assert [j.body for j in more] == [b"l1"]
    assert dq.get_jobs("low", nohang=True) == []
    assert dq.get_jobs("low", timeout_ms=50) == []


def test_nack_working_enqueue_dequeue_del_fastack(dq):
    jid = dq.add_job("q", "x", retry=30)
    (job,) = dq.get_jobs("q")
    assert dq.working(jid) == 30
    assert dq.nack(jid) == 1
    (again,) = dq.get_jobs("q", with_counters=True)
    assert again.id == jid and again.nacks == 1
    assert dq.enqueue(jid) == 1 and dq.qlen("q") == 1
    assert dq.dequeue(jid) == 1 and dq.qlen("q") == 0
    assert dq.del_job(jid) == 1 and dq.show(jid) is None
    j2 = dq.add_job("q", "y")
    assert dq.fast_ack(j2) == 1 and dq.show(j2) is None


def test_errors_are_typed(dq):
    with pytest.raises(NoJobError) as ei:
        dq.working("D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1")
    assert ei.value.code == "NOJOB"
    assert isinstance(ei.value, redis.ResponseError) and isinstance(ei.value, DisqueError)
    with pytest.raises(ResponseError) as ei:
        dq.add_job("q", "x", ttl=0)
    assert ei.value.code == "ERR"
    assert dq.pause("pq", "in") == "in"
    with pytest.raises(PausedError):
        dq.add_job("pq", "x")
    assert dq.pause("pq", "none") == "none"
    assert dq.pause("pq", "state") == "none"


def test_scans_hide_the_cursor(dq):
    ids = {dq.add_job(f"q{i % 7}", "x") for i in range(120)}
    assert set(dq.jscan(count=5)) == ids
    assert set(dq.jscan(queue="q3")) == {i for i in ids if dq.show(i)["queue"] == "q3"}
    assert set(dq.qscan(count=2)) == {f"q{i}" for i in range(7)}
    assert set(dq.qscan(minlen=100)) == set()
    full = list(dq.jscan(queue="q1", reply="all"))
    assert full and all(d["queue"] == "q1" and d["body"] == b"x" for d in full)


def test_hello_info_ping_raw(dq, server):
    h = dq.hello()
    assert isinstance(h, Hello) and h.version == 1 and len(h.my_id) == 40
    assert [(n.host, n.port, n.priority) for n in h.nodes] == [("127.0.0.1", server.port, 1)]
    assert dq.node == f"127.0.0.1:{server.port}" and dq.node_id == h.my_id
    info = dq.info()
    assert info["tcp_port"] == server.port and info["disque_git_sha1"] == "00000000"
    assert "registered_jobs" in dq.info("jobs")
    assert dq.ping() is True
    assert dq.execute_command("QLEN", "nothing") == 0


def test_decode_bodies_and_json(server):
    with Disque(f"127.0.0.1:{server.port}", decode_bodies=True) as c:
        c.add_job("q", json.dumps({"a": 1}))
        (job,) = c.get_jobs("q")
        assert job.body == '{"a": 1}' and job.json() == {"a": 1}


def test_pipeline_replies_in_order_errors_as_instances(dq):
    with dq.pipeline() as p:
        p.add_job("q", "a").add_job("q", "b", ttl=0)
        p.qlen("q")
        p.working("D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1")
        assert len(p) == 4
        out = p.execute()
    assert isinstance(out[0], str) and out[0].startswith("D-")
    assert isinstance(out[1], ResponseError) and out[1].code == "ERR"
    assert out[2] == 1
    assert isinstance(out[3], NoJobError)
    assert dq.show(out[0])["body"] == b"a"


def test_no_node_reachable():
    c = Disque([f"127.0.0.1:{free_port()}", ("127.0.0.1", free_port())],
               socket_connect_timeout=0.5)
    with pytest.raises(NoNodesError):
        c.ping()
    assert isinstance(NoNodesError("x"), redis.ConnectionError)


def test_seed_order_skips_dead_seeds(server):
    dead = free_port()
    c = Disque([f"127.0.0.1:{dead}", f"127.0.0.1:{server.port}"], shuffle=False)
    assert c.ping() and c.node == f"127.0.0.1:{server.port}"
    c.close()


def test_password(server_factory):
    s = server_factory("--requirepass", "sekrit")
    with pytest.raises(redis.AuthenticationError):
        Disque(f"127.0.0.1:{s.port}").ping()
    with Disque(f"127.0.0.1:{s.port}", password="sekrit") as c:
        assert c.ping()


def test_consumer_groups(dq):
    from disquepy.client import Event

    eid = dq.qadd("events", b'{"n": 1}', 60)
    assert dq.qadd("events", "two", 60, noblock=True) is None
    e = dq.qget("events", "billing", lease=5, with_counters=True)
    assert e == Event(eid, "events", b'{"n": 1}', 1) and e.json() == {"n": 1}
    assert dq.qworking("events", "billing", eid, lease=10) is True
    assert dq.qack("events", "billing", eid) is True  # one ID: a bool, as it always was
    assert dq.qack("events", "billing", eid) is False
    more = [dq.qadd("batch", f"m{i}", 60) for i in range(3)]
    assert [e.id for e in dq.qget_many("batch", "g", 10, lease=30)] == more
    assert dq.qworking("batch", "g", more[0], more[1], lease=60) == 2
    # several IDs: how many leases were live (an ID twice counts once), as XACK
    assert dq.qack("batch", "g", more[0], more[0], more[2], more[1]) == 3
    assert dq.qack("batch", "g", *more) == 0
    assert dq.qflush("batch") is True
    assert dq.qnotify("billing", 0.5, "events") == "events"  # "two" is still available
    assert dq.qget("events", "billing", lease=0).body == b"two"
    assert dq.qnotify("billing", 0.2, "events") is None
    st = dq.qstatus("events", groups=["billing", "audit"])
    assert st["events"]["billing"]["done"] == 2 and st["events"]["audit"]["available"] == 2
    assert st["events"]["audit"]["lag"] == 2
    assert dq.qinfo("events", groups=["audit"])[0].startswith("events audit total:2 ")
    # dead letters
    bad = dq.qadd("poison", "x", 60)
    assert dq.qget("poison", "g", lease=0.05, max_deliveries=1).id == bad
    import time

    time.sleep(0.1)
    assert dq.qget("poison", "g", max_deliveries=1) is None
    assert dq.qdead("poison", "g") == [Event(bad, "poison", b"x", 1)]
    assert dq.qrequeue("poison", "g", bad) == 1
    assert dq.qget("poison", "g", lease=0).id == bad
    assert dq.qflush("events") is True
    assert dq.qstatus() == {"poison": {"g": dq.qstatus("poison")["poison"]["g"]}}
