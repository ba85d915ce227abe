"""What a client that has not authenticated can make a node hold (issue #26, item 4),
on real processes: Redis 7's limits on requests before AUTH (10 arguments of 16 KB),
the caps on connections in their TLS handshake or before AUTH (per node and per
address, the oldest closed to make room, client-auth-timeout), maxclients counting
TLS handshakes and logged, and RLIMIT_NOFILE raised to fit maxclients and the bus."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time

import pytest
import redis
from support import Server, free_port, wait_for
from test_limits import closed_by_peer
from tlscerts import CA

PW = "preauth-password"


def request(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in args)


def exchange(port: int, data: bytes, timeout: float = 3.0) -> tuple[bytes, bool]:
    """Send ``data``, read until the node closes or ``timeout``: (reply, closed)."""
    got = bytearray()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        with contextlib.suppress(OSError):
            s.sendall(data)
        closed = closed_by_peer(s, timeout, got)
    return bytes(got), closed


def test_requests_before_auth_are_limited_as_in_redis(server_factory):
    s = server_factory("--requirepass", PW)
    reply, closed = exchange(s.port, b"*11\r\n")
    assert reply == b"-ERR Protocol error: unauthenticated multibulk length\r\n" and closed
    reply, closed = exchange(s.port, b"*2\r\n$4\r\nAUTH\r\n$16385\r\n")
    assert reply == b"-ERR Protocol error: unauthenticated bulk length\r\n" and closed
    # within them: a wrong password is just refused, and the connection stays
    reply, closed = exchange(s.port, request(b"AUTH", b"x" * 16384), timeout=1.5)
    assert reply == b"-ERR invalid password\r\n" and not closed
    # AUTH lifts them for what follows, in the same pipeline
    body = b"b" * 100_000
    reply, _ = exchange(s.port, request(b"AUTH", PW.encode())
                        + request(b"ADDJOB", b"q", body, b"0", *[b"TTL", b"100"] * 6)
                        + request(b"QLEN", b"q"), timeout=1.5)
    assert reply.startswith(b"+OK\r\n+D-") and reply.endswith(b":1\r\n")
    # without a password there is nothing to wait for: no such limits
    open_node = server_factory()
    reply, _ = exchange(open_node.port, request(b"ADDJOB", b"q", body, b"0"), timeout=1)
    assert reply.startswith(b"+D-")


def test_partial_auth_arguments_no_longer_fill_memory(server_factory):
    """6 connections each sending 40 MB of a partial AUTH argument pushed used memory
    to 240 MB against maxmemory 200mb, and producers got -OOM."""
    s = server_factory("--requirepass", PW, "--maxmemory", "200mb")
    socks = []
    try:
        for _ in range(6):
            sk = socket.create_connection(("127.0.0.1", s.port), timeout=5)
            socks.append(sk)
            with contextlib.suppress(OSError):
                sk.sendall(b"*2\r\n$4\r\nAUTH\r\n$41943040\r\n")
                for _ in range(40):
                    sk.sendall(b"x" * (1 << 20))
        c = s.client(password=PW)
        used = int(c.info("memory")["used_memory"])
        assert used < 20 << 20, used
        assert c.execute_command("ADDJOB", "q", "from a producer", 0).startswith(b"D-")
    finally:
        for sk in socks:
            sk.close()


def idle(port: int, n: int) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(n)]


def test_connections_not_authenticated_are_capped_and_timed_out(server_factory):
    s = server_factory("--requirepass", PW, "--client-max-unauthenticated-per-ip", "5",
                       "--client-auth-timeout", "2", "--loglevel", "verbose")
    held = idle(s.port, 5)
    try:
        time.sleep(0.2)
        newest = idle(s.port, 1)[0]
        held.append(newest)
        assert closed_by_peer(held[0], 1)  # the oldest made room for it
        assert not any(closed_by_peer(sk, 0.05) for sk in held[1:])
        c = s.client(password=PW)  # an authenticated client does not count
        assert c.ping()
        wait_for(lambda: "Closing a client connection from 127.0.0.1 not authenticated yet "
                 "to make room for a newer one (5 from that address: "
                 "client-max-unauthenticated-per-ip)" in s.log(), what="the eviction line")
        # and those that never AUTH are closed after client-auth-timeout
        assert all(closed_by_peer(sk, 3) for sk in held[1:])
        assert c.ping()
        wait_for(lambda: "Closing a client connection from 127.0.0.1: not authenticated "
                 "within 2 s (client-auth-timeout)" in s.log(), what="the timeout line")
    finally:
        for sk in held:
            sk.close()


def test_maxclients_refusals_are_logged_and_count_tls_handshakes(server_factory, tmp_path):
    ca = CA(tmp_path / "certs")
    crt, key = ca.issue("node")
    tls_port = free_port()
    s = server_factory("--maxclients", "4", "--tls-port", str(tls_port), "--tls-cert-file",
                       crt, "--tls-key-file", key, "--tls-ca-cert-file", str(ca.cert_path))
    held = idle(tls_port, 4)  # in their TLS handshake: clients already
    try:
        time.sleep(0.2)
        reply, closed = exchange(s.port, b"PING\r\n", timeout=2)
        assert reply == b"-ERR max number of clients reached\r\n" and closed
        wait_for(lambda: "Refused a client connection from 127.0.0.1: max number of clients "
                 "reached (maxclients 4)" in s.log(), what="the refusal in the log")
    finally:
        for sk in held:
            sk.close()
    time.sleep(0.2)
    assert s.client().ping()
    assert int(s.client().info("stats")["rejected_connections"]) >= 1


class LimitedServer(Server):
    """A node started under ``prlimit --nofile=SOFT:HARD``."""

    def __init__(self, *args, nofile: str, **kw) -> None:
        super().__init__(*args, **kw)
        self.nofile = nofile

    def command(self) -> list[str]:
        return ["prlimit", f"--nofile={self.nofile}", *super().command()]


def test_idle_connections_to_the_tls_port_do_not_lock_clients_out(tmp_path):
    """1,100 idle connections from an outsider with no certificate made 13 of 15 client
    PINGs fail (a node with the usual 1024 descriptors), and nothing was logged."""
    ca = CA(tmp_path / "certs")
    crt, key = ca.issue("node")
    app = ca.issue("app")
    tls_port = free_port()
    s = LimitedServer(tmp_path / "node", "--tls-port", str(tls_port), "--tls-cert-file", crt,
                      "--tls-key-file", key, "--tls-ca-cert-file", str(ca.cert_path),
                      nofile="1024:1024")
    held = []
    try:
        s.start()
        for _ in range(1100):
            with contextlib.suppress(OSError):
                held.append(socket.create_connection(("127.0.0.1", tls_port), timeout=5))
        ok = 0
        for _ in range(15):
            c = redis.Redis(port=tls_port, protocol=2, socket_timeout=5, ssl=True,
                            ssl_ca_certs=str(ca.cert_path), ssl_certfile=app[0],
                            ssl_keyfile=app[1])
            with contextlib.suppress(redis.RedisError, ssl.SSLError, OSError):
                ok += c.ping() is True
            c.close()
        assert ok == 15
        assert "not authenticated yet to make room" in s.log()
    finally:
        for sk in held:
            sk.close()
        s.kill()


@pytest.mark.parametrize("nofile, lines", [
    ("1024:20000", ["Increased maximum number of open files to 12080 (it was originally "
                    "set to 1024)."]),
    ("1024:1024", ["You requested maxclients of 10000 requiring at least 12080 max file "
                   "descriptors.",
                   "Current maximum open files is 1024. maxclients has been reduced to 744 "
                   "to compensate for low ulimit. If you need higher maxclients increase "
                   "'ulimit -n'.",
                   "cluster-bus-max-connections has been reduced to 124"]),
])
def test_open_files_limit_fits_maxclients_and_the_bus(tmp_path, nofile, lines):
    s = LimitedServer(tmp_path / "node", nofile=nofile)
    try:
        s.start()
        for line in lines:
            assert line in s.log()
        c = s.client()
        assert c.ping()
        if nofile == "1024:1024":
            assert c.config_get("maxclients") == {"maxclients": "744"}
        with open(f"/proc/{s.proc.pid}/limits") as f:
            row = next(ln for ln in f if ln.startswith("Max open files"))
        assert row.split()[3] == ("12080" if nofile == "1024:20000" else "1024")
    finally:
        s.kill()


def test_auth_by_reconnecting_is_slowed_per_address(server_factory):
    """Reconnecting for each try reached 1,875 AUTH tries a second (the delay was per
    connection). Failures are now counted per address: past 10, the address gets one
    password checked per delay (100 ms doubling to 5 s), whatever connection it uses."""
    s = server_factory("--requirepass", PW)
    c = s.client(password=PW)
    stop = time.monotonic() + 3
    attempts = [0]

    def attacker() -> None:
        while time.monotonic() < stop:
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", s.port), timeout=1) as sk:
                sk.sendall(request(b"AUTH", b"guess"))
                attempts[0] += 1
                sk.settimeout(0.02)
                with contextlib.suppress(OSError):
                    sk.recv(100)
    threads = [threading.Thread(target=attacker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    checked = int(c.info("stats")["acl_access_denied_auth"])
    assert attempts[0] > 200  # tried hard...
    assert checked <= 20, checked  # ... got 10 free tries and then about one per delay
    # the right password from another address is checked at once; from this one, in turn
    with socket.create_connection(("127.0.0.1", s.port), timeout=10,
                                  source_address=("127.0.0.2", 0)) as sk:
        t = time.monotonic()
        sk.sendall(request(b"AUTH", PW.encode()))
        assert sk.recv(100) == b"+OK\r\n" and time.monotonic() - t < 1
    with socket.create_connection(("127.0.0.1", s.port), timeout=10) as sk:
        sk.sendall(request(b"AUTH", PW.encode()) + b"PING\r\n")
        sk.settimeout(10)
        got = b""
        while not got.endswith(b"+PONG\r\n"):
            got += sk.recv(100)
        assert got == b"+OK\r\n+PONG\r\n"
