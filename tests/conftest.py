from __future__ import annotations

import os
import signal
import socket
import sys
from pathlib import Path

import pytest
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support import (  # noqa: E402
    CLUSTER_TIMEOUT_MS,
    PORT_RANGE_ENV,
    Server,
    join_cluster,
    start_secure_server,
    tier,
    worker_port_range,
)

# Tiers (markers, pyproject.toml): `fast` is tests/unit and tests/sim, in process (no
# network socket: a guard below fails a test that opens one; `make test-fast`);
# `spark` needs a JVM, `browser` a headless Chromium; `server` is the rest (real server
# processes on loopback ports). `make test` runs them all, spread over pytest-xdist
# workers; the Spark and browser tests each stay on one worker (one JVM, one Chromium),
# and so do the simulator's (each runs its seeds on its own pool of processes).

# Each xdist worker picks its free ports in its own slice of the range (support.py and
# the chaos runner read it, spawned processes inherit it): two workers never race for
# one port between the check and the bind.
if os.environ.get("PYTEST_XDIST_WORKER") and PORT_RANGE_ENV not in os.environ:
    os.environ[PORT_RANGE_ENV] = worker_port_range(os.environ["PYTEST_XDIST_WORKER"],
                                                   os.environ.get("PYTEST_XDIST_WORKER_COUNT"))


def pytest_collection_modifyitems(config, items):
    for item in items:
        t = tier(Path(str(item.fspath)), item.fixturenames)
        item.add_marker(getattr(pytest.mark, t))
        if t in ("spark", "browser"):  # one JVM, one Chromium: on one xdist worker
            item.add_marker(pytest.mark.xdist_group(t))
        elif t == "fast" and Path(str(item.fspath)).parent.name == "sim":
            # the simulator's tests run their seeds on a pool of their own (2 processes)
            item.add_marker(pytest.mark.xdist_group("sim"))


_INET = (socket.AF_INET, socket.AF_INET6)


@pytest.fixture(autouse=True)
def _fast_tier_opens_no_network_socket(request, monkeypatch):
    """A `fast` test that binds or connects a TCP/UDP socket fails: it belongs in
    tests/integration (the `server` tier)."""
    if request.node.get_closest_marker("fast") is None:
        return
    for name in ("bind", "connect", "connect_ex"):
        real = getattr(socket.socket, name)

        def guarded(self, *args, _real=real, _name=name):
            if self.family in _INET:
                raise AssertionError(f"a fast-tier test called socket.{_name}{args}: move it "
                                     "to tests/integration (real sockets are the server tier)")
            return _real(self, *args)

        monkeypatch.setattr(socket.socket, name, guarded)

# Tests send SIGINT to the processes they start (Ctrl-C in the CLI, the cluster script,
# the chaos runner). A shell started in the background (`make test &`, nohup) hands its
# children SIGINT *ignored*, and an ignored signal stays ignored across exec: those
# processes would never see the Ctrl-C. A handled signal is reset to the default on
# exec, so handling it here gives every process the tests start a working Ctrl-C.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Hypothesis checks behaviour, not speed: its per-example deadline (200 ms) fails
# sound tests on a loaded machine (speed targets live in `make bench`).
settings.register_profile("disquepy", deadline=None)
settings.load_profile("disquepy")


@pytest.fixture
def server_factory(tmp_path):
    """Start real disque-server processes; all are stopped at the end of the test."""
    servers: list[Server] = []

    def make(*args: str, conf: str | None = None, start: bool = True, **kw) -> Server:
        s = Server(tmp_path / f"node{len(servers)}", *args, conf=conf, **kw)
        servers.append(s)
        return s.start() if start else s

    yield make
    for s in servers:
        s.kill()


@pytest.fixture
def secure_server(server_factory, tmp_path):
    """A node with one ACL user per role and a mutual-TLS port (support.py's
    ``start_secure_server``), for the tools' user and TLS options."""
    return start_secure_server(server_factory, tmp_path / "certs")


@pytest.fixture(scope="session")
def shared_server(tmp_path_factory):
    """One server for the many tests that only need an empty node."""
    s = Server(tmp_path_factory.mktemp("shared")).start()
    yield s
    s.kill()


@pytest.fixture
def server(shared_server) -> Server:
    """The shared server, emptied (DEBUG FLUSHALL) for this test."""
    if not shared_server.alive():
        shared_server.start()
    c = shared_server.client()
    c.execute_command("DEBUG", "FLUSHALL")
    c.close()
    return shared_server


@pytest.fixture
def dq(server):
    """A disquepy client on the shared, emptied server."""
    from disquepy.client import Disque

    c = Disque([f"127.0.0.1:{server.port}"])
    yield c
    c.close()


@pytest.fixture
def r(server):
    """A raw redis-py client (RESP2) on an empty server."""
    c = server.client()
    yield c
    c.close()


@pytest.fixture
def make_cluster(server_factory):
    """make(n, *directives) -> (servers, raw redis-py clients): n nodes joined, converged."""

    def make(n: int, *extra: str):
        servers = [server_factory("--cluster-node-timeout", str(CLUSTER_TIMEOUT_MS), *extra)
                   for _ in range(n)]
        return servers, join_cluster(servers)

    return make
