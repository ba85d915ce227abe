"""Fixtures for the worker tests: a client on the shared empty server, worker processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import ROOT

from disquepy.client import Disque

HERE = Path(__file__).resolve().parent


def wait_for(pred, timeout: float = 15.0, step: float = 0.02, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(step)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


@pytest.fixture
def dq(server):
    c = Disque([f"127.0.0.1:{server.port}"])
    yield c
    c.close()


@pytest.fixture
def spawn_worker(tmp_path):
    """spawn(port, "handlers:slow", "--queues", "q", ...) -> Popen of
    ``python -m disquepy.worker`` (stderr to a log file); killed at the end of the test."""
    procs: list[subprocess.Popen] = []

    def spawn(port: int, target: str, *args: str) -> subprocess.Popen:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(HERE)]))
        log = open(tmp_path / f"worker-{len(procs)}.log", "wb")  # noqa: SIM115
        p = subprocess.Popen([sys.executable, "-m", "disquepy.worker", target,
                              "--nodes", f"127.0.0.1:{port}", *args],
                             cwd=HERE, env=env, stdout=log, stderr=subprocess.STDOUT)
        p.log_path = tmp_path / f"worker-{len(procs)}.log"
        procs.append(p)
        return p

    yield spawn
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(10)


CLUSTER_TIMEOUT_MS = 1500


def _hello_ok(c, n: int) -> bool:
    import redis

    try:
        h = c.execute_command("HELLO")
    except redis.RedisError:
        return False
    return len(h) == 2 + n and all(e[3] == b"1" for e in h[2:])


@pytest.fixture
def make_cluster(server_factory):
    """make(n) -> (servers, raw redis-py clients), n nodes joined and converged."""

    def make(n: int, *extra: str):
        servers = [server_factory("--cluster-node-timeout", str(CLUSTER_TIMEOUT_MS), *extra)
                   for _ in range(n)]
        clients = [s.client() for s in servers]
        for s in servers[1:]:
            assert clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", s.port) == b"OK"
        for c in clients:
            wait_for(lambda c=c: _hello_ok(c, n), what="cluster to converge")
        return servers, clients

    return make
