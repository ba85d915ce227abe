"""Real server processes for the tests: start on free loopback ports, wait, stop."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVER = [sys.executable, "-m", "disquepy.server.main"]


FAST_DIRS = ("unit", "sim")  # the fast tier: in process (tests/conftest.py)
TESTS = ROOT / "tests"


def tier(path: Path, fixturenames: list[str]) -> str:
    """The tier (pytest marker) of a test in file ``path`` that uses ``fixturenames``:
    fast (tests/unit, tests/sim), spark, browser or server (the rest)."""
    top = path.resolve().relative_to(TESTS).parts[0]
    if top in FAST_DIRS:
        return "fast"
    if top == "spark" or "spark" in fixturenames:
        return "spark"
    if "browser" in fixturenames:
        return "browser"
    return "server"


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# where free ports are picked ("lo:hi", client ports; their bus ports are +10000): the
# whole range, or a pytest-xdist worker's slice of it (conftest.py sets it per worker;
# the chaos runner reads it too)
PORT_RANGE_ENV = "DISQUEPY_PORT_RANGE"
PORTS_LO, PORTS_HI = 20000, 30000


def worker_port_range(worker: str, count: str | None) -> str:
    """The slice of [PORTS_LO, PORTS_HI) for xdist worker ``gwN`` of ``count``."""
    n, total = int(worker.lstrip("gw") or 0), max(1, int(count or 1))
    size = (PORTS_HI - PORTS_LO) // max(total, n + 1)
    lo = PORTS_LO + n * size
    return f"{lo}:{lo + size}"


def port_range() -> tuple[int, int]:
    lo, _, hi = os.environ.get(PORT_RANGE_ENV, f"{PORTS_LO}:{PORTS_HI}").partition(":")
    return int(lo), int(hi)


def free_port() -> int:
    """A port free on loopback, with port+10000 (the cluster bus) free too, in this
    process's range (port_range)."""
    lo, hi = port_range()
    for _ in range(200):
        p = random.randint(lo, hi - 1)
        if port_is_free(p) and port_is_free(p + 10000):
            return p
    raise RuntimeError("no free port pair found")


def raw(port: int, data: bytes, timeout: float = 5.0, until: bytes | None = None) -> bytes:
    """Send raw bytes, read until the peer closes, ``until`` is seen, or time runs out."""
    out = b""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            out += chunk
            if until is not None and until in out:
                break
    return out


def refused(c, *cmd) -> str:
    """The NOPERM error a command gets from redis-py client ``c`` (fails if it runs)."""
    import pytest
    import redis

    with pytest.raises(redis.exceptions.NoPermissionError) as e:
        c.execute_command(*cmd)
    return str(e.value)


def end_process(proc: subprocess.Popen, sig: int = signal.SIGTERM,
                timeout: float = 10.0) -> None:
    """Send ``sig`` to ``proc`` if it still runs and reap it; SIGKILL after ``timeout``."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


class Server:
    """One disque-server process on 127.0.0.1."""

    def __init__(self, workdir: Path, *args: str, port: int | None = None,
                 conf: str | None = None, env: dict | None = None) -> None:
        self.port = port or free_port()
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.args = list(args)
        self.conf_path = None
        if conf is not None:
            self.conf_path = self.workdir / "disque.conf"
            self.conf_path.write_text(conf)
        self.env = dict(os.environ, **(env or {}))
        self.env.setdefault("PYTHONPATH", str(ROOT / "src"))
        self.proc: subprocess.Popen | None = None
        self.log_path = self.workdir / f"server-{self.port}.log"

    def command(self) -> list[str]:
        cmd = list(SERVER)
        if self.conf_path is not None:
            cmd.append(str(self.conf_path))
        return cmd + ["--port", str(self.port), *self.args]

    def start(self, wait: bool = True) -> Server:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.command(), cwd=self.workdir, stdout=log,
                                         stderr=subprocess.STDOUT, env=self.env)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                reply = raw(self.port, b"PING\r\n", timeout=1, until=b"\r\n")
                if reply.startswith((b"+PONG", b"-NOAUTH")):
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"server not ready on {self.port}:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def client(self, **kw):
        import redis

        kw.setdefault("protocol", 2)
        kw.setdefault("socket_timeout", 10)
        return redis.Redis(host="127.0.0.1", port=self.port, **kw)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None:
            end_process(self.proc, sig)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


# ---------------------------------------------------------------- clusters
CLUSTER_TIMEOUT_MS = 1500  # cluster-node-timeout for test clusters: failures seen in seconds


def wait_for(pred, timeout: float = 15.0, step: float = 0.05, what: str = "condition"):
    """Poll ``pred`` until it returns something truthy (returned); bounded in time."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(step)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def hello_ok(c, n: int) -> bool:
    """HELLO on client ``c`` lists ``n`` nodes, all reachable (priority 1)."""
    import redis

    try:
        h = c.execute_command("HELLO")
    except redis.RedisError:
        return False
    return len(h) == 2 + n and all(e[3] == b"1" for e in h[2:])


def join_cluster(servers: list) -> list:
    """CLUSTER MEET every server with the first, wait until all see all; the clients."""
    clients = [s.client() for s in servers]
    for s in servers[1:]:
        assert clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", s.port) == b"OK"
    for c in clients:
        wait_for(lambda c=c: hello_ok(c, len(servers)), what="cluster to converge")
    return clients


# ------------------------------------------------------------ users and TLS
#: one ACL user per role (name: (password, rule)) on a ``secure_server``
ROLE_USERS = {"ops": ("opspw", "+@admin"), "producer": ("prodpw", "+@producer"),
              "consumer": ("conspw", "+@consumer"), "viewer": ("viewpw", "+@read")}


def start_secure_server(server_factory, certs: Path, *extra: str):
    """A node with a user per role (``ROLE_USERS``; ``requirepass defaultpw``) and a TLS
    port (``.tls_port``, mutual TLS) beside the plain one. ``.ca`` is its CA; ``.tls``
    the client-side files: ``{"cacert", "cert", "key"}``."""
    from tlscerts import CA

    ca = CA(certs)
    crt, key = ca.issue("node")
    tls_port = free_port()
    conf = "requirepass defaultpw\n" + "".join(
        f"user {name} on >{pw} {rule}\n" for name, (pw, rule) in ROLE_USERS.items())
    s = server_factory("--tls-port", str(tls_port), "--tls-cert-file", crt,
                       "--tls-key-file", key, "--tls-ca-cert-file", str(ca.cert_path),
                       *extra, conf=conf)
    wait_for(lambda: f"ready to accept TLS connections on port {tls_port}" in s.log(),
             what="the TLS listener")
    app_crt, app_key = ca.issue("app")
    s.tls_port, s.ca = tls_port, ca
    s.tls = {"cacert": str(ca.cert_path), "cert": app_crt, "key": app_key}
    return s
