"""The cluster-secret handshake cannot be relayed or reflected (issue #26, item 1), on
real processes. The attack: a peer P of nodes A and B is down; whoever binds P's bus
port (any local user can, on loopback) accepts the link A keeps reopening to P, opens
one to B, relays the bytes between them, and once the handshake is through sends its
own frames to B (DELJOB of every job). Before, B took them: 20 of 20 jobs deleted on
both live nodes, also over TLS for anyone with a certificate from the nodes' CA.

Each test runs that attack, or a variant (the relay rewrites B's node ID into P's; it
reflects A's handshake back to A; it terminates TLS on both sides with a client
certificate of the same CA), and checks the nodes refused it, said why in their logs,
and kept every job."""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import threading
import time

import pytest
from support import CLUSTER_TIMEOUT_MS, join_cluster, wait_for
from tlscerts import CA

from disquepy.codec.bus import encode_frame
from disquepy.core import messages as M
from disquepy.server.busauth import HELLO_LEN

SECRET = "relay-test-secret-0123456789abcdef"
NJOBS = 20


class Relay(threading.Thread):
    """Listens on ``port``; relays the first connection made to it by node ``want``
    (told by the node ID in its handshake hello; None: any) to ``target`` (a port),
    both ways, for ``duration`` seconds. ``rewrite(hello)`` may change the
    target's 78-byte handshake hello on its way; ``inject`` is sent to the target
    ``inject_after`` seconds in (what an attacker does with a link it thinks is up).
    With ``tls`` = (server context, client context) it terminates TLS on both sides."""

    def __init__(self, port: int, target: int, want: str | None = None, rewrite=None,
                 inject: bytes = b"", inject_after: float = 1.0, duration: float = 4.0,
                 tls=None) -> None:
        super().__init__(daemon=True)
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", port))
        self.lsock.listen(8)
        self.target, self.want, self.rewrite, self.inject = target, want, rewrite, inject
        self.inject_after, self.duration, self.tls = inject_after, duration, tls
        self.from_target = b""
        self.from_client = b""  # its handshake hello included
        self.relayed = False
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            self._run()
        except Exception as e:  # reported by the test
            self.error = e
        finally:
            self.lsock.close()

    def _run(self) -> None:
        deadline = time.monotonic() + 10
        while True:  # the connection of the node to relay (others reconnect to P too)
            self.lsock.settimeout(max(0.1, deadline - time.monotonic()))
            client, _ = self.lsock.accept()
            client.settimeout(5)
            if self.tls is not None:
                try:
                    client = self.tls[0].wrap_socket(client, server_side=True)
                except (OSError, ssl.SSLError):  # a node refused our certificate
                    if time.monotonic() > deadline:
                        raise
                    continue
            first = b""
            with contextlib.suppress(OSError, ssl.SSLError):
                while self.want is not None and len(first) < HELLO_LEN:
                    chunk = client.recv(HELLO_LEN - len(first))
                    if not chunk:
                        break
                    first += chunk
            if self.want is None or first[-40:] == self.want.encode():
                break
            client.close()
        upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
        if self.tls is not None:
            upstream = self.tls[1].wrap_socket(upstream)
        self.from_client = first
        upstream.sendall(first)
        self.relayed = True
        socks = [client, upstream]
        start = time.monotonic()
        injected = False
        hello = b""
        with client, upstream:
            while time.monotonic() - start < self.duration:
                if not injected and time.monotonic() - start >= self.inject_after:
                    injected = True
                    with contextlib.suppress(OSError):
                        upstream.sendall(self.inject)
                ready, _, _ = select.select(socks, [], [], 0.05)
                for s in ready:
                    try:
                        data = s.recv(65536)
                    except (OSError, ssl.SSLError):
                        data = b""
                    if not data:
                        socks.remove(s)
                        continue
                    if s is upstream:
                        self.from_target += data
                        if self.rewrite is not None and len(hello) < HELLO_LEN:
                            hello += data
                            if len(hello) < HELLO_LEN:
                                continue
                            data = self.rewrite(hello[:HELLO_LEN]) + hello[HELLO_LEN:]
                        with contextlib.suppress(OSError):
                            client.sendall(data)
                    else:
                        self.from_client += data
                        with contextlib.suppress(OSError):
                            upstream.sendall(data)
                if not socks:
                    break


def node_id(c) -> str:
    return c.execute_command("CLUSTER", "MYID").decode()


def deljobs(sender: str, jids: list[bytes]) -> bytes:
    return b"".join(encode_frame([M.DELJOB, sender, 7711, 0, j]) for j in jids)


def setup_cluster(server_factory, *extra: str, port_of=lambda s: s.port):
    """Nodes A, B and P sharing the secret, NJOBS jobs on A and B, P killed: the bus
    port P leaves free is the attacker's."""
    nodes = [server_factory("--cluster-node-timeout", str(CLUSTER_TIMEOUT_MS),
                            "--loglevel", "verbose", *extra) for _ in range(3)]
    if port_of(nodes[0]) != nodes[0].port:  # tls-cluster: MEET the TLS ports
        clients = [s.client() for s in nodes]
        for s in nodes[1:]:
            assert clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1",
                                              port_of(s)) == b"OK"
        for c in clients:
            wait_for(lambda c=c: len(c.execute_command("HELLO")) == 5, what="3 nodes")
    else:
        clients = join_cluster(nodes)
    a, b, p = clients
    jids = [a.execute_command("ADDJOB", "q", f"job{n}", 5000, "REPLICATE", 2)
            for n in range(NJOBS)]
    wait_for(lambda: all(b.execute_command("SHOW", j) or a.execute_command("SHOW", j)
                         for j in jids), what="the jobs")
    ids = [node_id(c) for c in clients]
    nodes[2].kill()
    return nodes, (a, b), ids, jids


def closed_by_peer(s: socket.socket) -> bool:
    """True once the peer closed: an EOF, or a reset when it closed with our bytes unread."""
    s.settimeout(5)
    try:
        return s.recv(100) == b""
    except ConnectionResetError:
        return True


def jobs_left(clients, jids) -> int:
    return sum(1 for j in jids for c in clients if c.execute_command("SHOW", j) is not None)


def attack(nodes, ids, jids, bus_port, target_bus, **kw) -> Relay:
    relay = Relay(bus_port, target_bus, want=ids[0], inject=deljobs(ids[0], jids), **kw)
    relay.start()
    relay.join(20)
    assert relay.error is None, relay.error
    assert relay.relayed, "the relay never got a connection from A"
    return relay


@pytest.mark.parametrize("variant", ["relay", "rewrite-id"])
def test_relayed_handshake_on_plain_tcp_gets_nothing(server_factory, variant):
    nodes, (a, b), ids, jids = setup_cluster(server_factory, "--cluster-secret", SECRET)
    before = jobs_left((a, b), jids)
    assert before >= NJOBS  # each job on A and/or B (REPLICATE 2 of 3 nodes)
    rewrite = None
    if variant == "rewrite-id":  # B's hello says it is P
        def rewrite(hello: bytes) -> bytes:
            return hello[:-40] + ids[2].encode()
    relay = attack(nodes, ids, jids, nodes[2].port + 10000, nodes[1].port + 10000,
                   rewrite=rewrite)
    assert relay.from_target[:6] == b"DQBA\x02A"  # B answered with its hello
    time.sleep(0.5)
    assert jobs_left((a, b), jids) == before
    a_log, b_log = nodes[0].log(), nodes[1].log()
    if variant == "relay":
        assert f"the node there is {ids[1][:8]}, not {ids[2][:8]}" in a_log
        assert len(relay.from_client) == HELLO_LEN  # A proved nothing
    else:
        assert len(relay.from_client) == HELLO_LEN + 32  # A's proof, over P's ID...
        assert "Refused cluster bus connection from 127.0.0.1: wrong cluster-secret" \
            in b_log  # ... which B checks over its own
    assert a.execute_command("PING") and b.execute_command("PING")


def test_reflected_handshake_is_refused(server_factory):
    """The attacker at P's port connects A's link to A's own bus port."""
    nodes, (a, b), ids, jids = setup_cluster(server_factory, "--cluster-secret", SECRET)
    before = jobs_left((a, b), jids)
    attack(nodes, ids, jids, nodes[2].port + 10000, nodes[0].port + 10000)
    wait_for(lambda: "a reflected handshake" in nodes[0].log(), what="A to refuse itself")
    assert jobs_left((a, b), jids) == before
    # its own hello, sent straight back to its listener
    with socket.create_connection(("127.0.0.1", nodes[1].port + 10000), timeout=5) as s:
        hello = s.recv(HELLO_LEN)
        s.sendall(hello)
        s.sendall(deljobs(ids[0], jids))
        assert closed_by_peer(s)
    wait_for(lambda: "same role as this node" in nodes[1].log(), what="B to refuse")
    # with the role byte turned into a connector's: its own ID, its own nonce
    with socket.create_connection(("127.0.0.1", nodes[1].port + 10000), timeout=5) as s:
        hello = s.recv(HELLO_LEN)
        s.sendall(hello[:5] + b"C" + hello[6:])
        assert closed_by_peer(s)
    wait_for(lambda: "echoed this node's nonce" in nodes[1].log(), what="B to refuse")
    assert jobs_left((a, b), jids) == before


def test_an_old_version_peer_is_refused_with_a_clear_line(server_factory):
    s = server_factory("--cluster-secret", SECRET)
    with socket.create_connection(("127.0.0.1", s.port + 10000), timeout=5) as sk:
        sk.sendall(b"DQBA\x01" + b"n" * 32)  # what a node of the first round sends
        sk.settimeout(5)
        assert sk.recv(HELLO_LEN)[:5] == b"DQBA\x02"
        assert closed_by_peer(sk)
    wait_for(lambda: "the peer speaks cluster bus handshake version 1 (an older disquepy); "
             "this node speaks version 2: upgrade every node of the cluster" in s.log(),
             what="the refusal")


# ----------------------------------------------------------------------- TLS
def tls_node_args(ca: CA, name: str, tls_port: int, *extra: str) -> list[str]:
    crt, key = ca.issue(name)
    return ["--tls-port", str(tls_port), "--tls-cert-file", crt, "--tls-key-file", key,
            "--tls-ca-cert-file", str(ca.cert_path), "--tls-cluster", "yes", *extra]


def tls_factory(server_factory, ca: CA, *extra: str):
    from support import free_port

    names = iter(["node-a", "node-b", "node-p", "node-x"])

    def make(*args: str):
        tls_port = free_port()
        s = server_factory(*args, *tls_node_args(ca, next(names), tls_port, *extra))
        s.tls_port = tls_port
        return s
    return make


def attacker_contexts(ca: CA):
    """TLS contexts with a certificate from the nodes' CA issued to an application."""
    crt, key = ca.issue("app")
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False
    for ctx in (server, client):
        ctx.load_cert_chain(crt, key)
        ctx.load_verify_locations(str(ca.cert_path))
        ctx.verify_mode = ssl.CERT_REQUIRED
    return server, client


def test_relay_over_tls_with_a_client_certificate_of_the_ca_gets_nothing(
        server_factory, tmp_path):
    """The attacker holds an application's certificate from the nodes' CA and
    terminates TLS on both sides: the channel bindings differ, so even a relay that
    rewrites B's ID into P's fails B's check."""
    ca = CA(tmp_path / "certs")
    make = tls_factory(server_factory, ca, "--cluster-secret", SECRET)
    nodes, (a, b), ids, jids = setup_cluster(make, port_of=lambda s: s.tls_port)
    before = jobs_left((a, b), jids)

    def rewrite(hello: bytes) -> bytes:
        return hello[:-40] + ids[2].encode()
    relay = attack(nodes, ids, jids, nodes[2].tls_port + 10000, nodes[1].tls_port + 10000,
                   rewrite=rewrite, tls=attacker_contexts(ca))
    assert len(relay.from_client) == HELLO_LEN + 32  # A proved the secret over P's ID...
    wait_for(lambda: "Refused cluster bus connection from 127.0.0.1: wrong cluster-secret"
             in nodes[1].log(), what="B to refuse the proof (another TLS channel)")
    assert jobs_left((a, b), jids) == before


def test_a_certificate_that_is_not_a_nodes_cannot_join_the_bus(server_factory, tmp_path):
    """tls-cluster-peer-name says which certificates are nodes': an application's
    certificate from the same CA is refused by the listener (and by a node connecting
    to it), even with no cluster-secret at all."""
    ca = CA(tmp_path / "certs")
    make = tls_factory(server_factory, ca, "--tls-cluster-peer-name", "node-*")
    nodes, (a, b), ids, jids = setup_cluster(make, port_of=lambda s: s.tls_port)
    before = jobs_left((a, b), jids)
    server_ctx, client_ctx = attacker_contexts(ca)
    with socket.create_connection(("127.0.0.1", nodes[1].tls_port + 10000), timeout=5) as raw, \
            client_ctx.wrap_socket(raw) as s, contextlib.suppress(OSError, ssl.SSLError):
        s.sendall(deljobs(ids[0], jids))
        s.settimeout(5)
        s.recv(100)
    wait_for(lambda: "Refused cluster bus connection from 127.0.0.1: its certificate (app, "
             "localhost) matches no tls-cluster-peer-name: not a cluster node's"
             in nodes[1].log(), what="B to refuse the application's certificate")
    # and a node connecting where the attacker listens (P's port) refuses it too
    stop = threading.Event()

    def listen() -> None:
        with socket.socket() as ls:
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            ls.bind(("127.0.0.1", nodes[2].tls_port + 10000))
            ls.listen(8)
            ls.settimeout(0.2)
            while not stop.is_set():
                with contextlib.suppress(OSError, ssl.SSLError):
                    conn, _ = ls.accept()
                    conn.settimeout(2)
                    with server_ctx.wrap_socket(conn, server_side=True) as tconn, \
                            contextlib.suppress(OSError, ssl.SSLError):
                        tconn.recv(100)
    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    try:
        for n in (0, 1):
            wait_for(lambda n=n: f"Cluster bus handshake with node {ids[2][:8]} at 127.0.0.1:"
                     f"{nodes[2].tls_port + 10000} failed: its certificate (app, localhost) "
                     "matches no tls-cluster-peer-name" in nodes[n].log(),
                     what="A and B to refuse the certificate at P's address")
    finally:
        stop.set()
        thread.join(5)
    assert jobs_left((a, b), jids) == before


def test_a_node_warns_when_clients_certificates_could_join_the_bus(server_factory, tmp_path):
    ca = CA(tmp_path / "certs")
    warning = "Any certificate signed by tls-ca-cert-file can join the cluster bus"
    make = tls_factory(server_factory, ca)
    open_bus = make()
    wait_for(lambda: warning in open_bus.log(), what="the warning")
    named = tls_factory(server_factory, ca, "--tls-cluster-peer-name", "node-*")()
    assert named.client().ping() and warning not in named.log()
