"""TLS on real processes: a tls-port beside the plain port, mutual TLS on client
connections (tls-auth-clients), and a cluster bus over mutual TLS (tls-cluster), with
a CA and certificates made by the test (tests/tlscerts.py)."""

from __future__ import annotations

import contextlib
import re
import socket
import ssl
import subprocess
import sys
import threading
import time

import pytest
import redis
from support import CLUSTER_TIMEOUT_MS, free_port, wait_for
from tlscerts import CA

from disquepy.client import Disque


@pytest.fixture
def ca(tmp_path):
    return CA(tmp_path / "certs")


def tls_args(ca: CA, name: str, tls_port: int, *extra: str) -> list[str]:
    crt, key = ca.issue(name)
    return ["--tls-port", str(tls_port), "--tls-cert-file", crt, "--tls-key-file", key,
            "--tls-ca-cert-file", str(ca.cert_path), *extra]


def tls_client(ca: CA, port: int, cert: tuple[str, str] | None, **kw) -> redis.Redis:
    return redis.Redis(port=port, protocol=2, socket_timeout=10, ssl=True,
                       ssl_ca_certs=str(ca.cert_path), ssl_certfile=cert and cert[0],
                       ssl_keyfile=cert and cert[1], **kw)


def start_tls_node(server_factory, ca, tls_port):
    s = server_factory(*tls_args(ca, "node", tls_port))
    wait_for(lambda: f"ready to accept TLS connections on port {tls_port}" in s.log(),
             what="the TLS listener")
    return s


def test_tls_and_plain_clients_side_by_side(server_factory, ca):
    tls_port = free_port()
    s = start_tls_node(server_factory, ca, tls_port)
    crt, key = ca.issue("app")
    stop = threading.Event()
    plain_ids: list[str] = []

    def plain_producer():  # the plain port keeps working while TLS clients run
        c = s.client()
        while not stop.is_set() and len(plain_ids) < 500:
            plain_ids.append(c.execute_command("ADDJOB", "plainq", "p", 0).decode())
        c.close()

    t = threading.Thread(target=plain_producer)
    t.start()
    try:
        with Disque([f"127.0.0.1:{tls_port}"], ssl=True, ssl_ca_certs=str(ca.cert_path),
                    ssl_certfile=crt, ssl_keyfile=key) as c:
            ids = [c.add_job("tlsq", f"job {n}") for n in range(50)]
            jobs = c.get_jobs("tlsq", count=50, timeout_ms=1000)
            assert [j.id for j in jobs] == ids
            assert [j.body for j in jobs] == [f"job {n}".encode() for n in range(50)]
            assert c.ack(*ids) == 50
    finally:
        stop.set()
        t.join(30)
    assert plain_ids and all(i.startswith("D-") for i in plain_ids)
    assert s.client().execute_command("QLEN", "plainq") == len(plain_ids)
    # the TLS port speaks only TLS: a plain client gets nothing back
    with pytest.raises(redis.ConnectionError):
        redis.Redis(port=tls_port, socket_timeout=3, protocol=2).ping()


def test_client_without_certificate_refused_under_tls_auth_clients_yes(server_factory, ca):
    tls_port = free_port()
    s = server_factory(*tls_args(ca, "node", tls_port), "--loglevel", "verbose")
    with pytest.raises(redis.ConnectionError):  # tls-auth-clients yes: the default
        tls_client(ca, tls_port, None).ping()
    wait_for(lambda: re.search(r"Error accepting a TLS client connection from 127\.0\.0\.1: "
                               r"PEER_DID_NOT_RETURN_A_CERTIFICATE", s.log()),
             what="the refusal logged")
    other = CA(ca.dir / "other", "other")  # a certificate from another CA: refused too
    with pytest.raises(redis.ConnectionError):
        tls_client(ca, tls_port, other.issue("intruder")).ping()
    assert tls_client(ca, tls_port, ca.issue("app")).ping() is True
    # and the server is verified by the client: a client trusting another CA refuses it
    with pytest.raises(redis.ConnectionError, match="certificate verify failed"):
        redis.Redis(port=tls_port, ssl=True, ssl_ca_certs=str(other.cert_path),
                    protocol=2).ping()


def test_big_requests_and_long_pipelines_over_tls(server_factory, ca):
    """Records split across reads, a pipeline long enough to pause reading, a body of
    several TLS records: every reply arrives, in order."""
    tls_port = free_port()
    start_tls_node(server_factory, ca, tls_port)
    c = tls_client(ca, tls_port, ca.issue("app"))
    big = b"x" * (3 << 20)
    jid = c.execute_command("ADDJOB", "big", big, 0)
    assert c.execute_command("GETJOB", "FROM", "big")[0][2] == big
    c.execute_command("ACKJOB", jid)
    pipe = c.pipeline(transaction=False)
    for n in range(3000):
        pipe.execute_command("ADDJOB", "q", b"%04d" % n + b"y" * 1000, 0)
    ids = pipe.execute()
    assert len(ids) == 3000 and all(i.startswith(b"D-") for i in ids)
    jobs = c.execute_command("GETJOB", "COUNT", 3000, "FROM", "q")
    assert [j[1] for j in jobs] == ids
    assert [j[2][:4] for j in jobs] == [b"%04d" % n for n in range(3000)]


class RawTlsClient:
    """A client's TLS over memory BIOs on a plain socket: records can be forged."""

    def __init__(self, ca: CA, port: int) -> None:
        ctx = ssl.create_default_context(cafile=str(ca.cert_path))
        ctx.load_cert_chain(*ca.issue("forger"))
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.inc, self.out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = ctx.wrap_bio(self.inc, self.out, server_hostname="127.0.0.1")
        for _ in range(20):  # a handshake is two round trips
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self.sock.sendall(self.out.read())
                self.inc.write(self.sock.recv(65536))
        self.sock.sendall(self.out.read())

    def request(self, data: bytes) -> bytes:
        """Send ``data`` as TLS records, return the plaintext of the reply."""
        self.tls.write(data)
        self.sock.sendall(self.out.read())
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                return self.tls.read(65536)
            except ssl.SSLWantReadError:
                self.inc.write(self.sock.recv(65536))
        raise TimeoutError("no reply")

    def closed_by_server(self) -> bool:
        try:
            return self.sock.recv(65536) == b""
        except ConnectionResetError:
            return True


@pytest.mark.parametrize("forgery", ["flipped bit", "garbage", "oversized record"])
def test_forged_records_close_the_connection_and_nothing_else(server_factory, ca, forgery):
    """After a good handshake, a record that does not authenticate, bytes that are not a
    record, or a record over TLS's 16 KiB limit: the connection is closed and logged,
    the node and its jobs are unharmed."""
    tls_port = free_port()
    s = start_tls_node(server_factory, ca, tls_port)
    s.client().execute_command("CONFIG", "SET", "loglevel", "verbose")
    c = RawTlsClient(ca, tls_port)
    jid = c.request(b"ADDJOB q before 0\r\n").strip()[1:]
    assert jid.startswith(b"D-")
    if forgery == "flipped bit":
        c.tls.write(b"DEBUG FLUSHALL\r\n")
        wire = bytearray(c.out.read())
        wire[-1] ^= 1
    elif forgery == "garbage":
        wire = bytearray(b"\x17\x03\x03\x00\x20" + bytes(range(32)))
    else:  # an application-data record header announcing 64 KiB
        wire = bytearray(b"\x17\x03\x03\xff\xff" + b"\0" * 65535)
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # closed mid-send
        c.sock.sendall(bytes(wire))
    assert c.closed_by_server()
    wait_for(lambda: "TLS error on a client connection from 127.0.0.1" in s.log(),
             what="the broken connection logged")
    assert s.client().execute_command("SHOW", jid) is not None  # not flushed
    assert RawTlsClient(ca, tls_port).request(b"QLEN q\r\n") == b":1\r\n"


@pytest.mark.parametrize("mode,without_cert_ok", [("no", True), ("optional", True)])
def test_tls_auth_clients_no_and_optional(server_factory, ca, mode, without_cert_ok):
    tls_port = free_port()
    server_factory(*tls_args(ca, "node", tls_port, "--tls-auth-clients", mode))
    assert tls_client(ca, tls_port, None).ping() is without_cert_ok
    other = CA(ca.dir / "other", "other")
    bad = tls_client(ca, tls_port, other.issue("intruder"))
    if mode == "optional":  # a certificate shown is checked
        with pytest.raises(redis.ConnectionError):
            bad.ping()
    else:
        assert bad.ping() is True


def test_tls_protocols_are_enforced(server_factory, ca):
    tls_port = free_port()
    server_factory(*tls_args(ca, "node", tls_port, "--tls-protocols", "TLSv1.3"))
    cert = ca.issue("app")

    def handshake(max_version):
        ctx = ssl.create_default_context(cafile=str(ca.cert_path))
        ctx.load_cert_chain(*cert)
        ctx.maximum_version = max_version
        with socket.create_connection(("127.0.0.1", tls_port), timeout=10) as raw, \
                ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(b"PING\r\n")
            return tls.version(), tls.recv(100)

    assert handshake(ssl.TLSVersion.TLSv1_3) == ("TLSv1.3", b"+PONG\r\n")
    with pytest.raises(ssl.SSLError):
        handshake(ssl.TLSVersion.TLSv1_2)


def test_tls_only_port_zero_and_cli(server_factory, ca):
    tls_port = free_port()
    s = server_factory(*tls_args(ca, "node", tls_port), start=False)
    s.port = tls_port  # the test's idea of "the port" is the TLS one
    s.args += ["--port", "0"]
    proc = s.start(wait=False)
    crt, key = ca.issue("cli")
    cli = [sys.executable, "-m", "disquepy.cli", "--tls", "--cacert", str(ca.cert_path),
           "--cert", crt, "--key", key, "-p", str(tls_port)]
    out = wait_for(lambda: (r := subprocess.run([*cli, "ADDJOB", "q", "over tls", "0"],
                                                capture_output=True, text=True, timeout=30,
                                                env=proc.env)).returncode == 0 and r,
                   timeout=15, what="the CLI to add a job over TLS")
    assert out.stdout.startswith("D-")
    r = subprocess.run([*cli, "qlen", "q"], capture_output=True, text=True, timeout=30,
                       env=proc.env)
    assert r.returncode == 0 and r.stdout.strip().endswith("1"), r
    r = subprocess.run([sys.executable, "-m", "disquepy.cli", "--tls", "--cacert",
                        str(ca.cert_path), "-p", str(tls_port), "PING"],
                       capture_output=True, text=True, timeout=30, env=proc.env)
    assert r.returncode != 0 and "Could not connect" in r.stderr  # no client certificate


@pytest.mark.parametrize("args,message", [
    (["--tls-port", "{p}"], "tls-port needs tls-cert-file and tls-key-file"),
    (["--tls-port", "{p}", "--tls-cert-file", "{crt}", "--tls-key-file", "{key}"],
     "tls-auth-clients yes needs tls-ca-cert-file"),
    (["--tls-cluster", "yes", "--tls-cert-file", "{crt}", "--tls-key-file", "{key}"],
     "tls-cluster yes needs tls-ca-cert-file"),
    (["--tls-port", "{p}", "--tls-cert-file", "/nonexistent.crt", "--tls-key-file", "{key}",
      "--tls-auth-clients", "no"], "Failed to load tls-cert-file /nonexistent.crt"),
    (["--tls-port", "{p}", "--tls-cert-file", "{crt}", "--tls-key-file", "{key}",
      "--tls-auth-clients", "no", "--tls-ciphers", "NO-SUCH-CIPHER"], "Invalid tls-ciphers"),
])
def test_bad_tls_configuration_refuses_to_start(server_factory, ca, args, message):
    crt, key = ca.issue("node")
    args = [a.format(p=free_port(), crt=crt, key=key) for a in args]
    s = server_factory(*args, start=False)
    s.start(wait=False)
    assert s.proc.wait(20) == 1
    assert "Failed to configure TLS: " + message in s.log()


# ------------------------------------------------------------------ tls-cluster
def tls_cluster_node(server_factory, ca: CA, name: str, *extra: str):
    tls_port = free_port()
    s = server_factory("--cluster-node-timeout", str(CLUSTER_TIMEOUT_MS), "--tls-cluster",
                       "yes", *tls_args(ca, name, tls_port), *extra)
    s.tls_port = tls_port
    return s


def hello_nodes(c: redis.Redis) -> int:
    h = c.execute_command("HELLO")
    return sum(1 for e in h[2:] if e[3] == b"1")  # this node included


def test_three_nodes_over_tls_cluster_converge_replicate_and_refuse_a_stranger(
        server_factory, ca):
    nodes = [tls_cluster_node(server_factory, ca, f"node{n}") for n in range(3)]
    clients = [s.client() for s in nodes]
    for s in nodes[1:]:  # with tls-cluster the node's port (and bus base) is its tls-port
        assert clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", s.tls_port) == b"OK"
    for c in clients:
        wait_for(lambda c=c: hello_nodes(c) == 3, what="the TLS cluster to converge")
    h = clients[1].execute_command("HELLO")
    assert {int(e[2]) for e in h[2:]} == {s.tls_port for s in nodes}  # HELLO: TLS ports
    jid = clients[0].execute_command("ADDJOB", "q", "replicated", 5000, "REPLICATE", 3).decode()
    assert all(c.execute_command("SHOW", jid) is not None for c in clients)
    # a TLS client through the cluster-aware library: it follows HELLO's TLS ports
    cert = ca.issue("app")
    with Disque([f"127.0.0.1:{nodes[2].tls_port}"], ssl=True, ssl_ca_certs=str(ca.cert_path),
                ssl_certfile=cert[0], ssl_keyfile=cert[1]) as c:
        assert [j.id for j in c.get_jobs("q", timeout_ms=2000)] == [jid]
        c.ack(jid)

    # a node whose certificate comes from another CA cannot join
    rogue_ca = CA(ca.dir / "rogue", "rogue")
    rogue = tls_cluster_node(server_factory, rogue_ca, "rogue")
    with pytest.raises(redis.ResponseError, match=(
            f"CLUSTER MEET 127.0.0.1:{rogue.tls_port} failed: TLS with that node failed: "
            "CERTIFICATE_VERIFY_FAILED")):
        clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", rogue.tls_port)
    assert "CERTIFICATE_VERIFY_FAILED" in nodes[0].log()
    rc = rogue.client()
    with pytest.raises(redis.ResponseError, match="failed: TLS with that node failed"):
        rc.execute_command("CLUSTER", "MEET", "127.0.0.1", nodes[1].tls_port)
    time.sleep(1.5)  # gossip rounds in which it would have joined
    assert hello_nodes(rc) == 1
    for c in clients:
        assert hello_nodes(c) == 3
    assert all(s.alive() for s in [rogue, *nodes])


def test_tls_cluster_with_a_secret_refuses_a_node_with_the_ca_but_not_the_secret(
        server_factory, ca):
    """A certificate from the cluster's CA is not enough when the nodes also share a
    cluster-secret (docs/SECURITY.md): the handshake runs inside TLS."""
    secret = ["--cluster-secret", "tls-and-a-secret-0123456789"]
    a = tls_cluster_node(server_factory, ca, "a", *secret)
    b = tls_cluster_node(server_factory, ca, "b", *secret)
    x = tls_cluster_node(server_factory, ca, "x")  # the right CA, no secret
    ca_, cb, cx = a.client(), b.client(), x.client()
    assert ca_.execute_command("CLUSTER", "MEET", "127.0.0.1", b.tls_port) == b"OK"
    wait_for(lambda: hello_nodes(ca_) == 2 and hello_nodes(cb) == 2, what="a and b")
    jid = ca_.execute_command("ADDJOB", "q", "x", 5000, "REPLICATE", 2)
    assert cb.execute_command("SHOW", jid) is not None
    with pytest.raises(redis.ResponseError, match=(
            f"CLUSTER MEET 127.0.0.1:{a.tls_port} failed: that node uses a cluster-secret "
            "and this node has none")):
        cx.execute_command("CLUSTER", "MEET", "127.0.0.1", a.tls_port)
    with pytest.raises(redis.ResponseError, match="that node has no cluster-secret"):
        ca_.execute_command("CLUSTER", "MEET", "127.0.0.1", x.tls_port)  # inside TLS too
    time.sleep(1)
    assert hello_nodes(cx) == 1 and hello_nodes(ca_) == 2 and hello_nodes(cb) == 2
