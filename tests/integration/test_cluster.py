"""Real clusters: disque-server processes on 127.0.0.1 joined with CLUSTER MEET."""

from __future__ import annotations

import signal
import time

import pytest
import redis
from support import hello_ok, wait_for


def holders(clients, jid) -> list:
    out = []
    for c in clients:
        try:
            s = c.execute_command("SHOW", jid)
        except redis.ConnectionError:
            out.append("down")
            continue
        out.append(None if s is None else dict(zip(s[::2], s[1::2], strict=True))[b"state"])
    return out


def test_three_nodes_converge_and_identity_survives_kill9(make_cluster):
    servers, clients = make_cluster(3)
    ids = {c.execute_command("CLUSTER", "MYID") for c in clients}
    assert len(ids) == 3
    info = clients[1].execute_command("CLUSTER", "INFO").decode()
    assert "cluster_known_nodes:3" in info and "cluster_reachable_nodes:2" in info
    old = clients[2].execute_command("CLUSTER", "MYID")
    servers[2].kill(signal.SIGKILL)
    servers[2].start()
    clients[2] = servers[2].client()
    assert clients[2].execute_command("CLUSTER", "MYID") == old
    wait_for(lambda: hello_ok(clients[2], 3), what="restarted node to rejoin")
    wait_for(lambda: hello_ok(clients[0], 3), what="others to see it back")


def test_replication_count_and_norepl(make_cluster):
    servers, clients = make_cluster(3)
    jid = clients[0].execute_command("ADDJOB", "q", "body", 5000, "REPLICATE", 3)
    states = holders(clients, jid)
    assert sorted(s for s in states) == [b"active", b"active", b"queued"]
    with pytest.raises(redis.ResponseError, match="NOREPL Not enough reachable nodes"):
        clients[0].execute_command("ADDJOB", "q", "body", 5000, "REPLICATE", 4)


def test_replies_keep_their_order_behind_a_replicating_addjob(make_cluster):
    """A command sent while a synchronous ADDJOB waits for its copies is answered
    after it: a pipelining client matches replies by position."""
    import socket

    servers, _ = make_cluster(3)
    with socket.create_connection(("127.0.0.1", servers[0].port), timeout=10) as s:
        for _ in range(20):
            s.sendall(b"ADDJOB q body 5000 REPLICATE 3\r\n")
            time.sleep(0.0005)  # a second read for the server, while the ADDJOB waits
            s.sendall(b"PING\r\n")
            out = b""
            while out.count(b"\r\n") < 2:
                chunk = s.recv(4096)
                assert chunk, "connection closed"
                out += chunk
            first, second = out.split(b"\r\n")[:2]
            assert first.startswith(b"+D-") and second == b"+PONG", out


def test_sync_replication_timeout_is_norepl_and_cleans_up(make_cluster):
    servers, clients = make_cluster(3)
    for c in clients[1:]:  # the others stop hearing node 0 (still "reachable" for a while)
        c.execute_command("DEBUG", "BUS-DROP", clients[0].execute_command(
            "CLUSTER", "MYID").decode(), "on")
    t = time.monotonic()
    with pytest.raises(redis.ResponseError, match="NOREPL Timeout reached before replicating"):
        clients[0].execute_command("ADDJOB", "q", "b", 400, "REPLICATE", 3)
    assert 0.3 < time.monotonic() - t < 3
    assert clients[0].info("jobs")["registered_jobs"] == 0
    for c in clients[1:]:
        c.execute_command("DEBUG", "BUS-DROP", "*", "off")
    wait_for(lambda: all(c.info("jobs")["registered_jobs"] == 0 for c in clients),
             what="best-effort deletion of the partial copies")


def test_failure_detection_and_kill9_of_replica_keeps_job(make_cluster):
    servers, clients = make_cluster(3)
    jid = clients[0].execute_command("ADDJOB", "q", "survivor", 5000, "REPLICATE", 3,
                                     "RETRY", 1)
    assert clients[0].execute_command("GETJOB", "FROM", "q")[0][1] == jid  # taken, not acked
    servers[0].kill(signal.SIGKILL)  # the node that delivered it dies
    # a surviving copy re-queues after the retry time and is delivered again
    got = wait_for(lambda: clients[1].execute_command("GETJOB", "NOHANG", "FROM", "q")
                   or clients[2].execute_command("GETJOB", "NOHANG", "FROM", "q"),
                   timeout=10, what="the job to come back")
    assert got[0][1] == jid and got[0][2] == b"survivor"
    nodes = wait_for(lambda: "fail" in clients[1].execute_command(
        "CLUSTER", "NODES").decode().split(), timeout=15, what="FAIL flag")
    assert nodes


def test_kill9_right_after_addjob_returned_job_still_delivered(make_cluster):
    servers, clients = make_cluster(3)
    jid = clients[0].execute_command("ADDJOB", "q", "precious", 5000, "REPLICATE", 3,
                                     "RETRY", 1)
    servers[0].kill(signal.SIGKILL)  # the node holding the queued copy dies at once
    got = wait_for(lambda: clients[1].execute_command("GETJOB", "NOHANG", "FROM", "q")
                   or clients[2].execute_command("GETJOB", "NOHANG", "FROM", "q"),
                   timeout=15, what="a surviving copy to be queued and delivered")
    assert got[0][1:] == [jid, b"precious"]


def test_ack_frees_job_on_every_node(make_cluster):
    servers, clients = make_cluster(3)
    jid = clients[0].execute_command("ADDJOB", "q", "b", 5000, "REPLICATE", 3)
    got = clients[1].execute_command("GETJOB", "TIMEOUT", 5000, "FROM", "q")
    assert got[0][1] == jid
    assert clients[1].execute_command("ACKJOB", jid) == 1
    wait_for(lambda: holders(clients, jid) == [None, None, None], what="GC on all nodes")
    for c in clients:
        assert c.info("jobs")["registered_jobs"] == 0


def test_federation_serves_consumer_blocked_on_another_node(make_cluster):
    servers, clients = make_cluster(3)
    consumer = servers[2].client(socket_timeout=10)
    import threading

    result = {}
    t = threading.Thread(target=lambda: result.setdefault(
        "got", consumer.execute_command("GETJOB", "TIMEOUT", 8000, "FROM", "fed")))
    t.start()
    time.sleep(0.3)
    start = time.monotonic()
    jid = clients[0].execute_command("ADDJOB", "fed", "hello", 5000, "REPLICATE", 1)
    t.join(10)
    elapsed = time.monotonic() - start
    assert result["got"] == [[b"fed", jid, b"hello"]]
    assert elapsed < 1.0  # pushed to the node that asked, not polled
    assert servers[2].client().execute_command("ACKJOB", jid) == 1
    wait_for(lambda: holders(clients, jid) == [None, None, None], what="GC")


def test_leaving_node_drains_to_zero(make_cluster):
    servers, clients = make_cluster(3)
    for i in range(20):
        clients[2].execute_command("ADDJOB", "drain", f"j{i}", 5000, "REPLICATE", 2)
    assert clients[2].execute_command("CLUSTER", "LEAVING", "yes") == b"OK"
    wait_for(lambda: any(e[3] == b"100" for e in clients[0].execute_command("HELLO")[2:]),
             what="leaving flag to spread")
    with pytest.raises(redis.ResponseError, match="LEAVING"):
        clients[2].execute_command("GETJOB", "FROM", "nothing-here")
    got = 0
    deadline = time.monotonic() + 20
    while got < 20 and time.monotonic() < deadline:
        for c in clients[:2]:
            r = c.execute_command("GETJOB", "NOHANG", "COUNT", 10, "FROM", "drain")
            for job in r or []:
                c.execute_command("ACKJOB", job[1])
                got += 1
        r = clients[2].execute_command("GETJOB", "NOHANG", "COUNT", 10, "FROM", "drain")
        for job in r or []:
            clients[2].execute_command("ACKJOB", job[1])
            got += 1
        time.sleep(0.05)
    assert got == 20
    wait_for(lambda: clients[2].info("jobs")["registered_jobs"] == 0, what="leaving node empty")
    jid = clients[2].execute_command("ADDJOB", "new", "x", 5000, "REPLICATE", 2)
    assert holders(clients, jid).count(None) == 1 and holders(clients, jid)[2] is None


def test_partition_heals_with_acks_propagated_and_no_lost_job(make_cluster):
    servers, clients = make_cluster(5)
    ids = [clients[0].execute_command("ADDJOB", "pq", f"j{i}", 5000, "REPLICATE", 3,
                                      "RETRY", 2) for i in range(30)]
    ids_by_body = {f"j{i}".encode(): jid for i, jid in enumerate(ids)}
    # isolate node 4 from everybody (both directions)
    assert clients[4].execute_command("DEBUG", "BUS-DROP", "*", "on") == b"OK"
    for c in clients[:4]:
        c.execute_command("DEBUG", "BUS-DROP",
                          clients[4].execute_command("CLUSTER", "MYID").decode(), "on")
    delivered = set()
    deadline = time.monotonic() + 20
    while len(delivered) < 30 and time.monotonic() < deadline:
        for c in clients[:4]:
            for job in c.execute_command("GETJOB", "NOHANG", "COUNT", 10, "FROM", "pq") or []:
                c.execute_command("ACKJOB", job[1])
                delivered.add(job[1])
        time.sleep(0.05)
    assert delivered == set(ids)  # nothing lost on the majority side
    for c in clients:
        c.execute_command("DEBUG", "BUS-DROP", "*", "off")
    # after the heal the acks reach node 4's copies: no job stays anywhere
    wait_for(lambda: all(c.info("jobs")["registered_jobs"] == 0 for c in clients),
             timeout=30, what="every copy collected after the heal")
    assert ids_by_body


def test_a_restarted_peer_is_linked_again_at_once(make_cluster):
    """Disque's nodes reconnect to a restarted node within ~0.1 s (its cron retries
    broken links every 100 ms). With a reconnect back-off grown to 2 s, ours took up
    to 2 s, and the node could be flagged fail? although it was back. Right after the
    restart, ADDJOB REPLICATE 3 with a timeout waits for the node and succeeds."""
    servers, clients = make_cluster(3)
    servers[2].kill(signal.SIGKILL)
    servers[2].start()  # returns once the node accepts clients (down < node timeout)
    t0 = time.monotonic()
    jid = clients[0].execute_command("ADDJOB", "q", "x", 30000, "REPLICATE", 3)
    clients[2] = servers[2].client()
    assert sorted(holders(clients, jid)) == [b"active", b"active", b"queued"]

    def linked() -> bool:
        lines = clients[0].execute_command("CLUSTER", "NODES").decode().splitlines()
        mine = [ln for ln in lines if f":{servers[2].port} " in ln]
        return bool(mine) and mine[0].endswith(" connected") and "fail" not in mine[0]

    wait_for(linked, timeout=5.0, step=0.01, what="the link to the restarted node")
    # generous for a loaded CI machine; the old back-off could take up to 2 s more
    assert time.monotonic() - t0 < 1.0


@pytest.mark.timeout(120)
def test_a_peer_down_for_seconds_is_linked_within_moments_of_its_restart(make_cluster):
    """Issue #17, measured against Disque on 7 nodes: Disque's nodes reconnect to a
    restarted node within 0.04-0.08 s; ours took 0.4-1.7 s (reconnects backed off up to
    2 s while it was down), so right after the restart REPLICATE 7 failed with NOREPL and
    REPLICATE 5 put copies on all 7 nodes where Disque puts 5 or 6. (A restart right
    after the kill, as in the test above, came before the back-off had grown.)"""
    servers, clients = make_cluster(7, "--cluster-node-timeout", "6000")

    def linked(victim: int) -> bool:
        lines = clients[0].execute_command("CLUSTER", "NODES").decode().splitlines()
        mine = [ln for ln in lines if f":{servers[victim].port} " in ln]
        return bool(mine) and mine[0].endswith(" connected") and "fail" not in mine[0]

    for trial in range(4):
        victim = 1 + trial
        servers[victim].kill(signal.SIGKILL)
        time.sleep(2.5)  # down a while (within the node timeout): reconnects back off
        servers[victim].start()  # returns once the node answers clients
        t0 = time.monotonic()
        clients[victim] = servers[victim].client()
        wait_for(lambda v=victim: linked(v), timeout=5.0, step=0.01, what="the link")
        # Disque: under 0.1 s; the old back-off: up to 2 s (loose for a loaded machine)
        assert time.monotonic() - t0 < 0.4, trial  # fixed: 0.002-0.08 s; old: 0.7-1.2 s
        n = 7 if trial % 2 == 0 else 5
        jid = clients[0].execute_command("ADDJOB", "q", f"t{trial}", 30000, "REPLICATE", n)
        copies = [h for h in holders(clients, jid) if h is not None]
        assert len(copies) == 7 if n == 7 else 5 <= len(copies) <= 6, (trial, copies)
