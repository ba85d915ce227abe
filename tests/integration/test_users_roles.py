"""Users with roles on a real process: each role runs exactly its commands, refusals
in Redis's NOPERM form, failed AUTH slowed (without slowing anyone else) and logged."""

from __future__ import annotations

import hashlib
import socket
import threading
import time

import pytest
import redis
from support import refused

from disquepy.codec import resp

CONF = f"""\
requirepass defaultpw
user ops on >opspw +@admin
user producer on >prodpw +@producer
user worker on #{hashlib.sha256(b"workpw").hexdigest()} +@consumer
user viewer on >viewpw +@read
user retired off >oldpw +@all
"""
ROLES = {"ops": "opspw", "producer": "prodpw", "worker": "workpw", "viewer": "viewpw"}


def noperm(user: str, cmd: str) -> str:
    return f"User {user} has no permissions to run the '{cmd}' command"


@pytest.fixture
def node(server_factory):
    return server_factory(conf=CONF)


def as_user(server, user):
    return server.client(username=user, password=ROLES[user])


def test_each_role_can_do_exactly_what_it_should(node):
    ops, prod, work, view = (as_user(node, u) for u in ROLES)
    anon = node.client()
    with pytest.raises(redis.exceptions.AuthenticationError, match="Authentication required"):
        anon.execute_command("QLEN", "q")
    for c, name in ((ops, "ops"), (prod, "producer"), (work, "worker"), (view, "viewer")):
        assert c.execute_command("ACL", "WHOAMI") == name.encode()

    # producer: ADDJOB and reads, nothing that takes or removes jobs
    jid = prod.execute_command("ADDJOB", "q", "payload", 0)
    assert prod.execute_command("QLEN", "q") == 1
    assert prod.execute_command("SHOW", jid)
    for cmd in (("GETJOB", "NOHANG", "FROM", "q"), ("ACKJOB", jid), ("NACK", jid),
                ("WORKING", jid), ("FASTACK", jid), ("DELJOB", jid)):
        assert refused(prod, *cmd) == noperm("producer", cmd[0].lower())
    # viewer (read-only): reads only
    assert view.execute_command("QSTAT", "q")
    assert view.execute_command("QPEEK", "q", 1)[0][1] == jid
    assert view.execute_command("JOBSTATUS", jid)
    assert view.execute_command("HELLO")
    for cmd in (("ADDJOB", "q", "x", 0), ("GETJOB", "NOHANG", "FROM", "q"), ("ACKJOB", jid)):
        assert refused(view, *cmd) == noperm("viewer", cmd[0].lower())
    # consumer: takes, works on, nacks and acks jobs, cannot add them
    assert refused(work, "ADDJOB", "q", "x", 0) == noperm("worker", "addjob")
    got = work.execute_command("GETJOB", "NOHANG", "FROM", "q")
    assert got[0][1] == jid
    assert work.execute_command("WORKING", jid) > 0
    assert work.execute_command("NACK", jid) == 1
    assert work.execute_command("GETJOB", "NOHANG", "FROM", "q")[0][1] == jid
    assert work.execute_command("ACKJOB", jid) == 1
    jid2 = prod.execute_command("ADDJOB", "q", "two", 0)
    assert work.execute_command("FASTACK", jid2) == 1
    # admin-only: CLUSTER, CONFIG, DEBUG, SHUTDOWN (and the job surgery commands)
    for c, name in ((prod, "producer"), (work, "worker"), (view, "viewer")):
        for cmd in (("CLUSTER", "NODES"), ("CONFIG", "GET", "port"), ("DEBUG", "JOBS"),
                    ("SHUTDOWN",), ("DELJOB", jid), ("ENQUEUE", jid), ("PAUSE", "q", "in"),
                    ("BGREWRITEAOF",)):
            assert refused(c, *cmd) == noperm(name, cmd[0].lower())
        assert refused(c, "CLIENT", "LIST") == noperm(name, "client|list")
        assert refused(c, "ACL", "LIST") == noperm(name, "acl|list")
    assert ops.execute_command("CONFIG", "GET", "port") == [b"port", str(node.port).encode()]
    assert ops.execute_command("CLUSTER", "MYID")
    assert b"user=worker" in ops.execute_command("CLIENT", "LIST")
    users = ops.execute_command("ACL", "LIST")
    assert b"user viewer on #" + hashlib.sha256(b"viewpw").hexdigest().encode() + \
        b" +@read" in users
    assert all(b"viewpw" not in line for line in users)  # hashes only
    assert ops.info("stats")["acl_access_denied_cmd"] >= 30
    with pytest.raises(redis.exceptions.ConnectionError):
        ops.execute_command("SHUTDOWN")  # admin may stop the node
    assert node.proc.wait(10) == 0


def test_auth_forms(node):
    c = node.client(password="defaultpw")  # AUTH <password>: requirepass, the default user
    assert c.execute_command("ACL", "WHOAMI") == b"default"
    assert c.execute_command("CONFIG", "GET", "requirepass")  # default is +@all
    assert c.execute_command("AUTH", "viewer", "viewpw") is True
    assert refused(c, "ADDJOB", "q", "x", 0) == noperm("viewer", "addjob")
    # redis-py connects with HELLO 3 AUTH user pass
    r3 = node.client(protocol=3, username="worker", password="workpw")
    assert r3.execute_command("ACL", "WHOAMI") == b"worker"
    assert r3.execute_command("HELLO", 3, "AUTH", "producer", "prodpw")[b"proto"] == 3
    assert r3.execute_command("ACL", "WHOAMI") == b"producer"
    for user, pw in (("retired", "oldpw"), ("ops", "wrong"), ("nobody", "x")):
        with pytest.raises(redis.exceptions.AuthenticationError, match="invalid username-password pair"):
            node.client(username=user, password=pw).ping()


def test_failed_auth_is_slowed_without_blocking_others_and_logged(node):
    bad = socket.create_connection(("127.0.0.1", node.port), timeout=15)
    replies = bad.makefile("rb")
    took = []
    pings = []
    stop = threading.Event()

    def pinger():
        c = as_user(node, "viewer")
        while not stop.is_set():
            t = time.monotonic()
            assert c.ping()
            pings.append(time.monotonic() - t)
            time.sleep(0.01)

    th = threading.Thread(target=pinger)
    th.start()
    try:
        for _ in range(5):
            t = time.monotonic()
            bad.sendall(resp.bulk_array([b"AUTH", b"ops", b"guess"]))
            assert replies.readline().startswith(b"-WRONGPASS")
            took.append(time.monotonic() - t)
    finally:
        stop.set()
        th.join(10)
    # 0.1, 0.2, 0.4, 0.8, 1.6 s: doubling per failure on the connection
    for want, got in zip((0.1, 0.2, 0.4, 0.8, 1.6), took, strict=True):
        assert want * 0.9 <= got < want + 1.0, took
    assert len(pings) > 50 and max(pings) < 0.5  # the others are not slowed
    bad.sendall(resp.bulk_array([b"AUTH", b"ops", b"opspw"]))  # the right one: no delay
    t = time.monotonic()
    assert replies.readline() == b"+OK\r\n" and time.monotonic() - t < 0.5
    replies.close()
    bad.close()
    log = node.log()
    assert log.count("Failed AUTH as 'ops' from 127.0.0.1:") >= 2  # a line a second at most
    assert log.count("Failed AUTH as") <= 5
    assert "guess" not in log  # never the password


def test_a_bad_user_line_stops_the_node_at_start(server_factory):
    s = server_factory(conf="user a on +nosuchcommand\n", start=False)
    s.start(wait=False)
    assert s.proc.wait(15) == 1
    assert "Unknown command 'nosuchcommand'" in s.log()
    s2 = server_factory(conf="user a on fly\n", start=False)
    s2.start(wait=False)
    assert s2.proc.wait(15) == 1
    assert "Error in user declaration: Syntax error in ACL rule 'fly'" in s2.log()
