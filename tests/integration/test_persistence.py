"""The AOF on real processes: crashes, torn files, controlled restarts, rewrites."""

from __future__ import annotations

import signal
import threading
import time

import pytest
import redis
from support import hello_ok, raw, wait_for

from disquepy.core.aofrecords import scan

AOF = ["--appendonly", "yes"]


def producer_load(port: int, seconds: float, conns: int = 8) -> tuple[list, list, list]:
    """Threads doing ADDJOB until the server dies or time is up. Returns the IDs whose
    reply arrived (the server promised to keep them) and how many were attempted."""
    acked: list = []
    attempts = [0]
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def run(k: int) -> None:
        c = redis.Redis(port=port, socket_timeout=5, retry=None, protocol=2)
        i = 0
        while time.monotonic() < stop:
            with lock:
                attempts[0] += 1
            try:
                jid = c.execute_command("ADDJOB", "load", f"{k}-{i}", 0)
            except (redis.ConnectionError, redis.TimeoutError):
                return
            with lock:
                acked.append(jid)
            i += 1

    threads = [threading.Thread(target=run, args=(k,)) for k in range(conns)]
    for t in threads:
        t.start()
    return acked, threads, attempts


def present(c, ids) -> int:
    pipe = c.pipeline(transaction=False)
    for jid in ids:
        pipe.execute_command("SHOW", jid)
    return sum(r is not None for r in pipe.execute())


def test_kill9_under_load_with_fsync_always_loses_nothing(server_factory):
    s = server_factory(*AOF, "--appendfsync", "always")
    acked, threads, attempts = producer_load(s.port, seconds=10)
    time.sleep(1.5)
    s.kill(signal.SIGKILL)
    for t in threads:
        t.join(10)
    assert len(acked) > 100
    s.start()
    c = s.client()
    assert present(c, acked) == len(acked)  # every ID that got a reply survived
    info = c.info("persistence")
    assert info["aof_enabled"] == 1


def test_everysec_loss_is_bounded_by_about_a_second(server_factory, record_property):
    s = server_factory(*AOF, "--appendfsync", "everysec")
    acked, threads, attempts = producer_load(s.port, seconds=10)
    time.sleep(2.5)
    n_before = len(acked)
    s.kill(signal.SIGKILL)
    for t in threads:
        t.join(10)
    s.start()
    kept = present(s.client(), acked)
    lost = len(acked) - kept
    rate = n_before / 2.5
    record_property("everysec_lost_jobs", lost)
    record_property("everysec_rate_per_s", round(rate))
    assert lost <= rate * 1.5 + 50, (lost, rate)


def test_reload_brings_jobs_back_active_and_requeues_them(server_factory):
    s = server_factory(*AOF, "--appendfsync", "always")
    c = s.client()
    keep = c.execute_command("ADDJOB", "q", "keep", 0, "RETRY", 1)
    once = c.execute_command("ADDJOB", "q", "once", 0, "RETRY", 0)
    gone = c.execute_command("ADDJOB", "q", "acked", 0)
    c.execute_command("ACKJOB", gone)
    s.kill(signal.SIGKILL)
    s.start()
    c = s.client()
    assert c.execute_command("SHOW", gone) is None  # acks are not resurrected
    assert c.execute_command("QLEN", "q") == 0  # back active, not queued
    st = dict(zip(*[iter(c.execute_command("SHOW", keep))] * 2, strict=True))
    assert st[b"state"] == b"active"
    wait_for(lambda: c.execute_command("QLEN", "q") == 1, timeout=5, what="retry re-queue")
    assert c.execute_command("GETJOB", "FROM", "q")[0][1] == keep
    assert c.execute_command("ACKJOB", keep) == 1
    time.sleep(1.5)
    assert c.execute_command("QLEN", "q") == 0  # the RETRY 0 job is never queued again
    st = dict(zip(*[iter(c.execute_command("SHOW", once))] * 2, strict=True))
    assert st[b"state"] == b"active" and st[b"next-requeue-within"] is None


def test_controlled_restart_restores_queues_exactly(server_factory):
    s = server_factory(conf="port 7711\n")  # AOF off: the procedure works anyway
    c = s.client()
    ids = [c.execute_command("ADDJOB", "ctl", f"j{i}", 0, "RETRY", 0 if i % 3 == 0 else 60)
           for i in range(50)]
    taken = c.execute_command("GETJOB", "COUNT", 5, "FROM", "ctl")
    assert c.execute_command("CONFIG", "SET", "aof-enqueue-jobs-once", "yes") == b"OK"
    assert c.execute_command("CONFIG", "REWRITE") == b"OK"
    with pytest.raises(redis.ConnectionError):
        redis.Redis(port=s.port, retry=None).execute_command("SHUTDOWN", "REWRITE-AOF")
    assert s.proc.wait(10) == 0
    s.start()
    c = s.client()
    peek = c.execute_command("QPEEK", "ctl", 100)
    assert [j[1] for j in peek] == ids[5:]  # exactly what was queued, in order
    assert [j[1] for j in taken] == ids[:5]
    assert all(c.execute_command("SHOW", j) is not None for j in ids[:5])
    assert "aof-enqueue-jobs-once no" in s.conf_path.read_text()  # turned itself off
    assert c.execute_command("CONFIG", "GET", "aof-enqueue-jobs-once")[1] == b"no"


def test_controlled_restart_of_a_whole_cluster(server_factory):
    servers = [server_factory("--cluster-node-timeout", "1500", conf="port 7711\n")
               for _ in range(3)]
    clients = [s.client() for s in servers]
    for s in servers[1:]:
        clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", s.port)
    for c in clients:
        wait_for(lambda c=c: hello_ok(c, 3), what="cluster")
    queued = {}
    for i, c in enumerate(clients):
        for k in range(10):
            c.execute_command("ADDJOB", f"cq{i}", f"n{i}-{k}", 5000, "REPLICATE", 2)
        queued[i] = [j[1] for j in c.execute_command("QPEEK", f"cq{i}", 100)]
        assert len(queued[i]) == 10
    for c in clients:
        c.execute_command("CONFIG", "SET", "aof-enqueue-jobs-once", "yes")
        c.execute_command("CONFIG", "REWRITE")
    for s in servers:
        with pytest.raises(redis.ConnectionError):
            redis.Redis(port=s.port, retry=None).execute_command("SHUTDOWN", "REWRITE-AOF")
        assert s.proc.wait(10) == 0
    for s in servers:
        s.start()
    clients = [s.client() for s in servers]
    for c in clients:
        wait_for(lambda c=c: hello_ok(c, 3), what="cluster back")
    for i, c in enumerate(clients):
        assert [j[1] for j in c.execute_command("QPEEK", f"cq{i}", 100)] == queued[i]


def _valid_aof(server_factory) -> tuple:
    s = server_factory(*AOF, "--appendfsync", "always")
    c = s.client()
    ids = [c.execute_command("ADDJOB", "t", f"b{i}", 0) for i in range(20)]
    s.kill(signal.SIGTERM)
    return s, ids


def test_torn_tail_is_truncated_with_a_log_line(server_factory):
    s, ids = _valid_aof(server_factory)
    aof = s.workdir / "disque.aof"
    whole = aof.read_bytes()
    aof.write_bytes(whole + whole[:37])  # a crash in the middle of the next record
    s.start()
    assert present(s.client(), ids) == 20
    assert "incomplete" in s.log() and "Truncating" in s.log()
    assert aof.stat().st_size == len(whole)


def test_torn_tail_refused_when_asked(server_factory):
    s, ids = _valid_aof(server_factory)
    aof = s.workdir / "disque.aof"
    aof.write_bytes(aof.read_bytes() + b"*3\r\n$7\r\nLOADJOB\r\n$90")
    s.args += ["--aof-load-truncated", "no"]
    with pytest.raises(RuntimeError, match="server exited"):
        s.start()
    assert "incomplete record at offset" in s.log()


def test_corruption_in_the_middle_stops_the_node_naming_the_offset(server_factory):
    s, ids = _valid_aof(server_factory)
    aof = s.workdir / "disque.aof"
    data = bytearray(aof.read_bytes())
    mid = data.index(b"b10")  # inside the body of a record in the middle
    data[mid] ^= 0xFF
    aof.write_bytes(bytes(data))
    with pytest.raises(RuntimeError, match="server exited"):
        s.start()
    assert "at offset" in s.log()


def test_bgrewriteaof_compacts_while_serving(server_factory):
    s = server_factory(*AOF, "--appendfsync", "no", "--auto-aof-rewrite-percentage", "0")
    c = s.client()
    pipe = c.pipeline(transaction=False)
    for i in range(3000):
        pipe.execute_command("ADDJOB", "rw", f"body-{i}", 0)
    ids = pipe.execute()
    pipe = c.pipeline(transaction=False)
    for jid in ids[:2500]:
        pipe.execute_command("ACKJOB", jid)
    pipe.execute()
    aof = s.workdir / "disque.aof"
    before = aof.stat().st_size
    log = scan(aof.read_bytes())  # the running log: a pipeline's jobs share records
    assert log.status == "ok" and "LOADJOBS" in {k for _, k, _ in log.records}
    assert sum(len(p) if k == "LOADJOBS" else 1
               for _, k, p in log.records if k.startswith("LOADJOB")) == 3000
    assert raw(s.port, b"BGREWRITEAOF\r\n", until=b"\r\n") == (
        b"+Background append only file rewriting started\r\n")
    wait_for(lambda: c.info("persistence")["aof_rewrite_in_progress"] == 0, what="rewrite")
    # the live jobs and the outcomes of the acked ones (JOBSTATUS after a restart), no
    # record of a job that is gone
    res = scan(aof.read_bytes())
    assert (res.status, res.loadjobs, res.outcomes, res.deljobs) == ("ok", 500, 2500, 0)
    # one LOADJOB a job, no LOADJOBS: a build from before that record reads this file
    assert {k for _, k, _ in res.records} == {"LOADJOB", "OUTCOME"}
    assert aof.stat().st_size < before / 2
    assert c.info("persistence")["aof_last_bgrewrite_status"] == "ok"
    s.kill(signal.SIGKILL)
    s.start()
    assert present(s.client(), ids[2500:]) == 500
    assert present(s.client(), ids[:2500]) == 0


def test_config_set_appendonly_yes_at_runtime(server_factory):
    s = server_factory()
    c = s.client()
    ids = [c.execute_command("ADDJOB", "rt", f"b{i}", 0) for i in range(100)]
    assert c.execute_command("CONFIG", "SET", "appendonly", "yes") == b"OK"
    wait_for(lambda: c.info("persistence")["aof_rewrite_in_progress"] == 0, what="rewrite")
    later = c.execute_command("ADDJOB", "rt", "after", 0)
    assert c.info("persistence")["aof_state"] == "on"
    s.kill(signal.SIGKILL)
    s.args += AOF
    s.start()
    assert present(s.client(), [*ids, later]) == 101


def test_automatic_rewrite_on_growth(server_factory):
    # outcomes off: each acked job would leave a ~100-byte OUTCOME record the rewrite
    # keeps (their compaction is test_bgrewriteaof_compacts_while_serving's)
    s = server_factory(*AOF, "--appendfsync", "no", "--auto-aof-rewrite-min-size", "1mb",
                       "--auto-aof-rewrite-percentage", "100", "--job-outcome-retention", "0")
    c = s.client()
    keep = c.execute_command("ADDJOB", "ar", "keep", 0)
    body = "x" * 200
    for _ in range(10):
        pipe = c.pipeline(transaction=False)
        for _ in range(500):
            pipe.execute_command("ADDJOB", "ar", body, 0)
        ids = pipe.execute()
        pipe = c.pipeline(transaction=False)
        for jid in ids:
            pipe.execute_command("ACKJOB", jid)
        pipe.execute()
    wait_for(lambda: "Starting automatic rewriting of AOF" in s.log(), what="auto rewrite")
    wait_for(lambda: c.info("persistence")["aof_rewrite_in_progress"] == 0, what="rewrite end")
    info = c.info("persistence")
    assert info["aof_last_bgrewrite_status"] == "ok"
    assert info["aof_current_size"] < 1024 * 1024  # compacted: acked jobs are gone
    s.kill(signal.SIGKILL)
    s.start()
    c = s.client()
    assert c.execute_command("SHOW", keep) is not None
    assert c.info("jobs")["registered_jobs"] == 1

