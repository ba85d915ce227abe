from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support import CLUSTER_TIMEOUT_MS, Server, join_cluster, start_secure_server  # noqa: E402

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
