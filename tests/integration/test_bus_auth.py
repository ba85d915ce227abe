"""The authenticated cluster bus (cluster-secret) on real processes: nodes sharing the
secret form a cluster; a node without it, or with another, never becomes a peer and is
refused and logged; an exposed node refuses to start with an unauthenticated bus."""

from __future__ import annotations

import re
import time

import pytest
import redis
from support import CLUSTER_TIMEOUT_MS, hello_ok, raw, wait_for

from disquepy.codec.bus import encode_frame
from disquepy.core import messages as M

SECRET = "s3cret-shared-by-the-nodes-0123"
OTHER = "a-different-secret-456789abcdef"


def node(server_factory, *extra: str):
    return server_factory("--cluster-node-timeout", str(CLUSTER_TIMEOUT_MS), *extra)


def known_ids(c) -> set[str]:
    lines = c.execute_command("CLUSTER", "NODES").decode().splitlines()
    return {line.split()[0] for line in lines if line.strip()}


def myid(c) -> str:
    return c.execute_command("CLUSTER", "MYID").decode()


def test_nodes_with_the_same_secret_converge_and_handshake_once_per_link(server_factory):
    servers = [node(server_factory, "--cluster-secret", SECRET, "--loglevel", "verbose")
               for _ in range(3)]
    clients = [s.client() for s in servers]
    for s in servers[1:]:
        assert clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", s.port) == b"OK"
    for c in clients:
        wait_for(lambda c=c: hello_ok(c, 3), what="the cluster to converge")

    def handshakes() -> int:
        return sum(len(re.findall(r"Cluster bus connection from 127\.0\.0\.1 \(node \w{8}\) "
                                  r"authenticated", s.log()))
                   for s in servers)

    # a MEET first links to a placeholder id, then to the real one: let links settle
    wait_for(lambda: handshakes() >= 6, what="one authenticated link each way per pair")
    seen = [handshakes()]
    wait_for(lambda: seen.append(handshakes()) or seen[-1] == seen[-2], step=1.0,
             what="no new link for a second")
    before = seen[-1]
    for n in range(200):
        jid = clients[n % 3].execute_command("ADDJOB", "q", f"j{n}", 5000, "REPLICATE", 3)
    assert all(c.execute_command("SHOW", jid) is not None for c in clients)
    assert handshakes() == before  # per link, never per job
    assert 6 <= before <= 12  # one per pair and direction (plus the MEET placeholders)
    assert "Refused" not in "".join(s.log() for s in servers)


def meet_error(c, port: int) -> str:
    with pytest.raises(redis.ResponseError) as e:
        c.execute_command("CLUSTER", "MEET", "127.0.0.1", port)
    return str(e.value)


def test_a_node_without_the_secret_is_refused_and_its_meet_fails(server_factory):
    guarded = node(server_factory, "--cluster-secret", SECRET)
    open_node = node(server_factory)  # no secret: speaks the plain bus
    plain_peer = node(server_factory)  # control: the same MEET works without a secret
    g, o, p = guarded.client(), open_node.client(), plain_peer.client()

    assert o.execute_command("CLUSTER", "MEET", "127.0.0.1", plain_peer.port) == b"OK"
    wait_for(lambda: myid(o) in known_ids(p), what="the control MEET to land")

    # CLUSTER MEET says why at once, both ways
    assert meet_error(o, guarded.port) == (
        f"CLUSTER MEET 127.0.0.1:{guarded.port} failed: that node uses a cluster-secret "
        "and this node has none")
    assert meet_error(g, open_node.port) == (
        f"CLUSTER MEET 127.0.0.1:{open_node.port} failed: that node has no cluster-secret "
        "(it refused this node's handshake)")
    wait_for(lambda: "the peer uses a cluster-secret and this node has none"
             in open_node.log(), what="the open node to say why")
    assert f"CLUSTER MEET 127.0.0.1:{guarded.port} refused" in open_node.log()
    # a peer that skips MEET and speaks the plain bus at once (bus frames) is refused
    bus_port = guarded.port + 10000
    frame = encode_frame([M.PING, bytes.fromhex(myid(o)), 0, "127.0.0.1", 1, []])
    for _ in range(20):
        answer = raw(bus_port, frame, timeout=2)  # its handshake hello, then it closes
        assert answer[:6] == b"DQBA\x02A" and len(answer) == 78
    wait_for(lambda: "Refused cluster bus connection from 127.0.0.1: no cluster-secret "
             "handshake" in guarded.log(), what="the refusal in the guarded node's log")
    time.sleep(1)
    assert known_ids(g) == {myid(g)}  # nothing reached the node
    assert hello_ok(g, 1)
    refusals = re.findall(r"Refused cluster bus connection from .*: no cluster-secret "
                          r"handshake", guarded.log())
    assert len(refusals) == 1, refusals  # rate-limited: one line per 10 s per peer
    assert myid(g) not in known_ids(o) and myid(o) not in known_ids(g)


def test_a_node_with_another_secret_cannot_join(server_factory):
    a = node(server_factory, "--cluster-secret", SECRET)
    b = node(server_factory, "--cluster-secret", SECRET)
    x = node(server_factory, "--cluster-secret", OTHER)
    ca, cb, cx = a.client(), b.client(), x.client()
    assert ca.execute_command("CLUSTER", "MEET", "127.0.0.1", b.port) == b"OK"
    wait_for(lambda: hello_ok(ca, 2) and hello_ok(cb, 2), what="a and b to converge")

    for c, other in ((cx, a), (ca, x)):
        assert meet_error(c, other.port) == (
            f"CLUSTER MEET 127.0.0.1:{other.port} failed: wrong cluster-secret (that node "
            "refused this node's)")
    wait_for(lambda: "wrong cluster-secret" in a.log(), what="a to refuse x")
    wait_for(lambda: "wrong cluster-secret" in x.log(), what="x to refuse a")
    time.sleep(1)
    for c in (ca, cb):
        assert hello_ok(c, 2)
        assert myid(cx) not in known_ids(c)
    assert known_ids(cx) == {myid(cx)}
    # the cluster still replicates
    jid = ca.execute_command("ADDJOB", "q", "x", 5000, "REPLICATE", 2)
    assert cb.execute_command("SHOW", jid) is not None
    assert cx.execute_command("SHOW", jid) is None


def test_exposed_node_refuses_an_unauthenticated_bus(server_factory):
    # requirepass keeps protected mode quiet: the bus check is the one that refuses
    s = server_factory("--bind", "0.0.0.0", "--requirepass", "pw", start=False)
    s.start(wait=False)
    assert s.proc.wait(20) == 1
    line = [x for x in s.log().splitlines() if "Refusing to start" in x]
    assert len(line) == 1
    assert ("the cluster bus would listen on 0.0.0.0 with no authentication" in line[0]
            and "cluster-allow-unauthenticated-bus yes" in line[0])
