"""disquepy's server extensions on real processes: ADDJOB IDEMPOTENT (across crashes,
rewrites and replicas), GETJOB TOKEN, and the job-lifecycle event log."""

from __future__ import annotations

import json
import signal

import redis
from support import CLUSTER_TIMEOUT_MS as TIMEOUT_MS
from support import hello_ok, raw, wait_for

AOF = ["--appendonly", "yes", "--appendfsync", "always"]


def test_idempotent_key_survives_kill9_and_rewrite(server_factory):
    s = server_factory(*AOF, "--auto-aof-rewrite-percentage", "0")
    c = s.client()
    live = c.execute_command("ADDJOB", "q", "live", 0, "IDEMPOTENT", "w1/p0/r0")
    acked = c.execute_command("ADDJOB", "q", "acked", 0, "IDEMPOTENT", "w1/p0/r1")
    c.execute_command("GETJOB", "COUNT", 2, "FROM", "q")
    assert c.execute_command("ACKJOB", acked) == 1
    s.kill(signal.SIGKILL)
    s.start()
    c = s.client()
    assert c.execute_command("ADDJOB", "q", "x", 0, "IDEMPOTENT", "w1/p0/r0") == live
    assert c.execute_command("ADDJOB", "q", "x", 0, "IDEMPOTENT", "w1/p0/r1") == acked
    assert c.execute_command("SHOW", acked) is None
    # a rewrite drops the acked job's records but keeps its key
    assert raw(s.port, b"BGREWRITEAOF\r\n", until=b"\r\n").startswith(b"+Background")
    wait_for(lambda: c.info("persistence")["aof_rewrite_in_progress"] == 0, what="rewrite")
    s.kill(signal.SIGKILL)
    s.start()
    c = s.client()
    assert c.execute_command("ADDJOB", "q", "x", 0, "IDEMPOTENT", "w1/p0/r1") == acked
    assert c.execute_command("ADDJOB", "q", "x", 0, "IDEMPOTENT", "w1/p0/r0") == live
    assert c.execute_command("QLEN", "q") == 0  # both delivered before: active, not queued
    assert c.execute_command("JSCAN", 0, "COUNT", 100)[1] == [live]


def test_pipelined_retry_of_a_batch_enqueues_once(server_factory):
    s = server_factory()
    c = s.client()
    for _attempt in range(3):  # a "task" writing the same rows three times
        p = c.pipeline(transaction=False)
        for i in range(500):
            p.execute_command("ADDJOB", "batch", f"row-{i}", 0, "IDEMPOTENT", f"w9/p3/r{i}")
        ids = p.execute()
    assert len(set(ids)) == 500
    assert c.execute_command("QLEN", "batch") == 500


def test_token_replays_a_read(server_factory):
    s = server_factory()
    c = s.client()
    ids = [c.execute_command("ADDJOB", "t", f"b{i}", 0) for i in range(10)]
    first = c.execute_command("GETJOB", "NOHANG", "COUNT", 4, "TOKEN", "q1/b7/n0", "FROM", "t")
    assert [j[1] for j in first] == ids[:4]
    c2 = s.client()  # another connection, as a retried Spark task would use
    again = c2.execute_command("GETJOB", "NOHANG", "COUNT", 4, "TOKEN", "q1/b7/n0", "FROM", "t")
    assert again == first
    assert c.execute_command("QLEN", "t") == 6


def test_idempotent_retry_on_a_replica_after_the_origin_dies(server_factory):
    servers = [server_factory("--cluster-node-timeout", str(TIMEOUT_MS)) for _ in range(3)]
    clients = [s.client() for s in servers]
    for s in servers[1:]:
        clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", s.port)
    for c in clients:
        wait_for(lambda c=c: hello_ok(c, 3), what="cluster")
    jid = clients[0].execute_command("ADDJOB", "q", "b", 5000, "REPLICATE", 3,
                                     "IDEMPOTENT", "part-1/row-1")
    servers[0].kill(signal.SIGKILL)
    assert clients[1].execute_command("ADDJOB", "q", "b", 5000, "REPLICATE", 2,
                                      "IDEMPOTENT", "part-1/row-1") == jid
    assert clients[2].execute_command("ADDJOB", "q", "b", 5000, "REPLICATE", 2,
                                      "IDEMPOTENT", "part-1/row-1") == jid


def read_events(directory) -> list:
    out = []
    for f in sorted(directory.glob("events-*.jsonl")):
        out += [json.loads(line) for line in f.read_text().splitlines()]
    return out


def test_event_log_records_the_lifecycle(server_factory):
    s = server_factory("--event-log", "yes")
    c = s.client()
    node = c.execute_command("CLUSTER", "MYID").decode()
    a = c.execute_command("ADDJOB", "q ü", "body", 0, "RETRY", 10)
    c.execute_command("GETJOB", "FROM", "q ü")
    c.execute_command("NACK", a)
    c.execute_command("GETJOB", "FROM", "q ü")
    c.execute_command("ACKJOB", a)
    evdir = s.workdir / "events"
    want = ["added", "queued", "delivered", "nacked", "queued", "delivered", "acked"]
    wait_for(lambda: [e["event"] for e in read_events(evdir)] == want, what="events")
    ev = read_events(evdir)
    assert {e["job"] for e in ev} == {a.decode()} and {e["node"] for e in ev} == {node}
    assert {e["queue"] for e in ev} == {"q ü"}
    assert ev[0]["ttl"] == 86400 and ev[0]["retry"] == 10 and ev[0]["size"] == 4
    assert ev[5]["nacks"] == 1 and ev[5]["additional_deliveries"] == 0
    assert all(ev[i]["ts"] <= ev[i + 1]["ts"] for i in range(len(ev) - 1))
    name = next(evdir.glob("events-*.jsonl")).name
    assert name.startswith(f"events-{node[:8]}-")
    # turned off at runtime: nothing more is written
    assert c.config_set("event-log", "no")
    c.execute_command("ADDJOB", "q", "x", 0)
    c.ping()
    assert len(read_events(evdir)) == len(want)


def test_event_log_rotates_by_size(server_factory):
    s = server_factory("--event-log", "yes", "--event-log-max-size", "4096",
                       "--event-log-dir", "ev")
    c = s.client()
    p = c.pipeline(transaction=False)
    for i in range(300):
        p.execute_command("ADDJOB", "rot", f"j{i}", 0)
        if i % 20 == 0:
            p.execute()
    p.execute()
    c.ping()
    files = sorted((s.workdir / "ev").glob("events-*.jsonl"))
    assert len(files) >= 5
    assert sum(1 for e in read_events(s.workdir / "ev") if e["event"] == "added") == 300


def test_event_log_unwritable_dir_keeps_serving(server_factory, tmp_path):
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    s = server_factory("--event-log", "yes", "--event-log-dir", str(blocker / "sub"))
    c = s.client()
    jid = c.execute_command("ADDJOB", "q", "x", 0)
    assert c.execute_command("GETJOB", "FROM", "q")[0][1] == jid
    wait_for(lambda: "Event log write failed" in s.log(), what="the write error logged")
    try:
        c.execute_command("ADDJOB", "q", "x", 0, "IDEMPOTENT", "")
    except redis.ResponseError as e:
        assert str(e) == "IDEMPOTENT key must be 1 to 256 bytes"
    else:
        raise AssertionError("empty key accepted")
