"""Fixtures for the client tests: a client on the shared empty server, real clusters."""

from __future__ import annotations

import time

import pytest
import redis

from disquepy.client import Disque

TIMEOUT_MS = 1500  # cluster-node-timeout: failures are seen in seconds


def wait_for(pred, timeout: float = 15.0, step: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(step)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def hello_ok(c, n: int) -> bool:
    try:
        h = c.execute_command("HELLO")
    except redis.RedisError:
        return False
    return len(h) == 2 + n and all(e[3] == b"1" for e in h[2:])


@pytest.fixture
def make_cluster(server_factory):
    """make(n) -> (servers, raw redis-py clients), n nodes joined and converged."""

    def make(n: int, *extra: str):
        servers = [server_factory("--cluster-node-timeout", str(TIMEOUT_MS), *extra)
                   for _ in range(n)]
        clients = [s.client() for s in servers]
        for s in servers[1:]:
            assert clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", s.port) == b"OK"
        for c in clients:
            wait_for(lambda c=c: hello_ok(c, n), what="cluster to converge")
        return servers, clients

    return make


@pytest.fixture
def dq(server):
    """A disquepy client on the shared, emptied server."""
    c = Disque([f"127.0.0.1:{server.port}"])
    yield c
    c.close()
