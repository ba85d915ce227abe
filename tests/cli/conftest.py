"""Fixtures for the command line tests: run ``disque`` as a real process, real clusters."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "disquepy.cli"]
NODE_TIMEOUT_MS = 1500


@dataclass
class Result:
    """A finished ``disque`` process."""

    rc: int
    out: str
    err: str


def cli_env(home: Path) -> dict[str, str]:
    env = dict(os.environ, HOME=str(home), PYTHONPATH=str(ROOT / "src"), COLUMNS="200")
    env.pop("DISQUE_AUTH", None)
    env.pop("DISQUE_HISTFILE", None)
    return env


@pytest.fixture
def run_cli(tmp_path):
    """Run ``python -m disquepy.cli ARGS`` to completion; returns :class:`Result`."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)

    def run(*args: object, input: str | None = None, timeout: float = 60) -> Result:
        p = subprocess.run([*CLI, *map(str, args)], input=input, capture_output=True,
                           text=True, timeout=timeout, env=cli_env(home), cwd=tmp_path)
        return Result(p.returncode, p.stdout, p.stderr)

    run.home = home
    return run


def wait_for(pred, timeout: float = 15.0, step: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(step)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def hello_ok(c: redis.Redis, n: int) -> bool:
    """HELLO on ``c`` lists ``n`` nodes, all reachable (priority 1)."""
    try:
        h = c.execute_command("HELLO")
    except redis.RedisError:
        return False
    return len(h) == 2 + n and all(e[3] == b"1" for e in h[2:])


@pytest.fixture
def fresh_nodes(server_factory):
    """``fresh_nodes(n)``: n separate nodes, not joined (cluster-node-timeout 1.5 s)."""

    def make(n: int):
        return [server_factory("--cluster-node-timeout", str(NODE_TIMEOUT_MS))
                for _ in range(n)]

    return make


@pytest.fixture
def make_cluster(fresh_nodes):
    """``make_cluster(n)``: n nodes joined with CLUSTER MEET, converged."""

    def make(n: int):
        servers = fresh_nodes(n)
        clients = [s.client() for s in servers]
        for s in servers[1:]:
            assert clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", s.port) == b"OK"
        for c in clients:
            wait_for(lambda c=c: hello_ok(c, n), what="cluster to converge")
        return servers, clients

    return make


def table_rows(out: str) -> list[list[str]]:
    """The cells of the body rows of the rich tables in ``out`` (box-drawing borders)."""
    rows = []
    for line in out.splitlines():
        if line.startswith("│") and line.rstrip().endswith("│"):
            rows.append([cell.strip() for cell in line.strip()[1:-1].split("│")])
    return rows
