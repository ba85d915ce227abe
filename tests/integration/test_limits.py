"""Limits on what one request or one peer can make a node do (issue #18, items 4-5),
on real processes: each limit refuses, logs, and leaves the node serving."""

from __future__ import annotations

import signal
import socket
import time

import pytest
import redis
from support import hello_ok, join_cluster, raw, wait_for

AOF = ["--appendonly", "yes", "--appendfsync", "always"]


def show(c, jid) -> dict:
    r = c.execute_command("SHOW", jid)
    return dict(zip(r[::2], r[1::2], strict=True))


# ----------------------------------------------------------- 32-bit job fields
@pytest.mark.parametrize("opt", ["TTL", "RETRY", "DELAY"])
def test_addjob_refuses_seconds_past_32_bits(server, opt):
    c = server.client()
    errors = {"TTL": "TTL must be a number > 0",
              "RETRY": "RETRY time must be a non negative number",
              "DELAY": "DELAY time must be a non negative number"}
    with pytest.raises(redis.ResponseError, match=errors[opt]):
        c.execute_command("ADDJOB", "q", "b", 0, opt, 2**32)
    assert c.execute_command("QLEN", "q") == 0


def test_largest_32_bit_fields_replicate_and_survive_a_restart(server_factory):
    """What ADDJOB takes, replication and the AOF carry: the largest values reach the
    copy and come back from the file (C Disque would have truncated them)."""
    a, b = server_factory(*AOF), server_factory(*AOF)
    ca, cb = join_cluster([a, b])
    top = 2**32 - 1
    jid = ca.execute_command("ADDJOB", "q", "big", 0, "REPLICATE", 2, "TTL", top,
                             "RETRY", top, "DELAY", top - 1)
    assert show(cb, jid)[b"retry"] == top
    a.kill(signal.SIGTERM)
    a.start()
    ca = a.client()
    s = show(ca, jid)
    assert (s[b"retry"], s[b"delay"]) == (top, top - 1) and s[b"ttl"] > top - 100
    wait_for(lambda: hello_ok(ca, 2), what="the restarted node to rejoin")


# --------------------------------------------------------- one request's size
def rss_mb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(f.read().split("VmRSS:")[1].split()[0]) // 1024


def request(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in args)


def test_getjob_naming_too_many_new_queues_is_refused_within_maxmemory(server_factory):
    """GETJOB creates the queues it names: 200,000 new ones (~240 MB of queues) on a
    node with 50 MB of maxmemory are refused at once with -OOM, nothing created, and
    other clients go on adding jobs (before: it blocked, grew RSS by ~240 MB and left
    every ADDJOB answering -OOM)."""
    s = server_factory("--maxmemory", "50mb")
    c = s.client()
    before = rss_mb(s.proc.pid)
    names = [b"queue-%d" % i for i in range(200_000)]
    t = time.monotonic()
    with socket.create_connection(("127.0.0.1", s.port), timeout=20) as sk:
        sk.sendall(request(b"GETJOB", b"TIMEOUT", b"2000", b"FROM", *names))
        reply = sk.recv(200)
    assert reply.startswith(b"-OOM "), reply
    assert time.monotonic() - t < 1.9  # answered, not blocked for its timeout
    assert c.execute_command("QSCAN", "COUNT", 1000)[1] == []
    assert c.execute_command("ADDJOB", "q", "still-works", 0).startswith(b"D-")
    assert rss_mb(s.proc.pid) - before < 100
    # within the limit the same command blocks as in Disque, and creates its queues
    few = [b"queue-%d" % i for i in range(1000)]
    reply = raw(s.port, request(b"GETJOB", b"TIMEOUT", b"100", b"FROM", *few), timeout=5,
                until=b"\r\n")
    assert reply == b"*-1\r\n"
    assert int(c.info("memory")["used_memory"]) > 1000 * 1000


def test_proto_max_multibulk_len(server_factory):
    s = server_factory("--proto-max-multibulk-len", "1000")
    ok = raw(s.port, request(b"ACKJOB", *[b"x"] * 999), until=b"\r\n")
    assert ok.startswith(b"-BADID")  # parsed and run: 1000 arguments
    out = raw(s.port, request(b"ACKJOB", *[b"x"] * 1000))
    assert out == b"-ERR Protocol error: invalid multibulk length\r\n"  # then closed
    # refused from the header alone, before any element arrives
    assert raw(s.port, b"*1001\r\n") == b"-ERR Protocol error: invalid multibulk length\r\n"
    c = s.client()
    assert c.config_get("proto-max-multibulk-len") == {"proto-max-multibulk-len": "1000"}
    c.config_set("proto-max-multibulk-len", 2000)  # new connections take it
    assert raw(s.port, request(b"ACKJOB", *[b"x"] * 1500), until=b"\r\n").startswith(b"-BADID")


def test_maxclients_refuses_one_more_client(server_factory):
    s = server_factory("--maxclients", "3")
    held = [socket.create_connection(("127.0.0.1", s.port), timeout=5) for _ in range(3)]
    try:
        for sk in held:
            sk.sendall(b"PING\r\n")
            assert sk.recv(100) == b"+PONG\r\n"
        with socket.create_connection(("127.0.0.1", s.port), timeout=5) as extra:
            assert extra.recv(100) == b"-ERR max number of clients reached\r\n"
            assert extra.recv(100) == b""  # closed
    finally:
        for sk in held:
            sk.close()
    c = s.client()
    assert wait_for(lambda: c.ping())
    assert c.info("stats")["rejected_connections"] == 1
