"""Job outcomes on real processes: kept in the AOF across restarts and rewrites, and
known on every node that held a copy (so the status outlives the creating node)."""

from __future__ import annotations

import signal
import time

import pytest
import redis
from support import join_cluster, raw, wait_for

AOF = ["--appendonly", "yes", "--appendfsync", "always"]


def status(c, jid):
    r = c.execute_command("JOBSTATUS", jid)
    return {k.decode(): v for k, v in zip(r[::2], r[1::2], strict=True)}


def finish_three(c):
    """A completed job with a result, a failed one with its error, a cancelled one."""
    done = c.execute_command("ADDJOB", "q", "a", 0)
    failed = c.execute_command("ADDJOB", "q", "b", 0)
    c.execute_command("GETJOB", "COUNT", 2, "FROM", "q")
    cancelled = c.execute_command("ADDJOB", "q", "c", 0)
    assert c.execute_command("ACKJOB", done, "RESULT", '{"ok": 1}') == 1
    assert c.execute_command("FAILJOB", failed, "ERROR", "ValueError: bad") == 1
    assert c.execute_command("CANCEL", cancelled) == b"OK"
    return {done.decode(): (b"completed", b'{"ok": 1}'),
            failed.decode(): (b"failed", b"ValueError: bad"),
            cancelled.decode(): (b"cancelled", None)}


def seen(c, want):
    return {jid: (status(c, jid)["state"], status(c, jid)["detail"]) for jid in want}


def test_outcomes_survive_a_crash_and_a_rewrite(server_factory):
    s = server_factory(*AOF, "--auto-aof-rewrite-percentage", "0")
    c = s.client()
    want = finish_three(c)
    assert seen(c, want) == want
    s.kill(signal.SIGKILL)  # no shutdown: what the AOF holds is all there is
    s.start()
    c = s.client()
    assert seen(c, want) == want
    # a rewrite keeps them (and the jobs, all gone, are not in it)
    assert raw(s.port, b"BGREWRITEAOF\r\n", until=b"\r\n").startswith(b"+")
    wait_for(lambda: c.info("persistence")["aof_rewrite_in_progress"] == 0, what="rewrite")
    assert c.info("persistence")["aof_last_bgrewrite_status"] == "ok"
    s.kill(signal.SIGKILL)
    s.start()
    c = s.client()
    assert seen(c, want) == want
    assert c.info("jobs")["registered_jobs"] == 0


def test_outcomes_expire_across_a_restart(server_factory):
    s = server_factory(*AOF, "--job-outcome-retention", "2")
    c = s.client()
    want = finish_three(c)
    s.stop()
    wait_for(lambda: not s.alive(), what="the server to stop")
    time.sleep(2.2)  # past the retention: a reload keeps none of them
    s.start()
    c = s.client()
    for jid in want:
        with pytest.raises(redis.ResponseError, match="not known"):
            c.execute_command("JOBSTATUS", jid)


def test_outcomes_outlive_the_creating_node(server_factory):
    servers = [server_factory("--cluster-node-timeout", "1500") for _ in range(3)]
    clients = join_cluster(servers)
    c = clients[0]
    jids = [c.execute_command("ADDJOB", "q", f"j{i}", 5000, "REPLICATE", 3) for i in range(3)]
    c.execute_command("GETJOB", "COUNT", 2, "FROM", "q")
    assert c.execute_command("ACKJOB", jids[0], "RESULT", "42") == 1
    assert c.execute_command("FAILJOB", jids[1], "ERROR", "boom") == 1
    assert c.execute_command("CANCEL", jids[2]) == b"OK"
    want = {jids[0].decode(): (b"completed", b"42"), jids[1].decode(): (b"failed", b"boom"),
            jids[2].decode(): (b"cancelled", None)}
    for other in clients[1:]:  # the ack, the failure and the cancel reach every copy
        wait_for(lambda o=other: seen(o, want) == want, what="the outcomes on every copy")
    servers[0].kill(signal.SIGKILL)  # the node that created them is gone: they answer
    for other in clients[1:]:
        assert seen(other, want) == want


def test_a_job_whose_ttl_ended_while_the_node_was_down_is_expired(server_factory):
    s = server_factory(*AOF)
    c = s.client()
    jid = c.execute_command("ADDJOB", "q", "short", 0, "TTL", 1).decode()
    s.kill(signal.SIGKILL)
    time.sleep(1.5)
    s.start()
    st = status(s.client(), jid)
    assert st["state"] == b"expired" and st["attempts"] == 0
    assert st["finished"] - st["created"] == 1000
