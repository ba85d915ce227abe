"""Helpers for the Spark tests: bounded polling and a real N-node cluster."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from support import Server  # noqa: E402

CLUSTER_TIMEOUT_MS = 1500


def wait_for(pred, timeout: float = 20.0, step: float = 0.1, what: str = "condition"):
    """Poll ``pred`` until truthy (bounded); fail with ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(step)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def _hello_ok(c, n: int) -> bool:
    try:
        h = c.execute_command("HELLO")
    except redis.RedisError:
        return False
    return len(h) == 2 + n and all(e[3] == b"1" for e in h[2:])


class Cluster:
    """N joined server processes, emptied between tests."""

    def __init__(self, base: Path, n: int, *extra: str) -> None:
        self.servers = [Server(base / f"node{i}", "--cluster-node-timeout",
                               str(CLUSTER_TIMEOUT_MS), *extra).start() for i in range(n)]
        self.clients = [s.client() for s in self.servers]
        for s in self.servers[1:]:
            assert self.clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1",
                                                   s.port) == b"OK"
        for c in self.clients:
            wait_for(lambda c=c: _hello_ok(c, n), what="cluster to converge")
        self.ids = [c.execute_command("CLUSTER", "MYID").decode() for c in self.clients]

    @property
    def nodes(self) -> str:
        """The seed list option: every node."""
        return ",".join(f"127.0.0.1:{s.port}" for s in self.servers)

    def by_id(self) -> dict[str, redis.Redis]:
        return dict(zip(self.ids, self.clients, strict=True))

    def flush(self) -> None:
        for c in self.clients:
            c.execute_command("DEBUG", "FLUSHALL")

    def qlen(self, queue: str) -> int:
        return sum(int(c.execute_command("QLEN", queue)) for c in self.clients)

    def jobs(self) -> int:
        """Jobs held by any node in any state (DEBUG JOBS sums)."""
        return sum(sum(int(x) for x in c.execute_command("DEBUG", "JOBS"))
                   for c in self.clients)

    def exists(self, jid: str) -> bool:
        """Some node still holds the job (not acked and collected)."""
        for c in self.clients:
            s = c.execute_command("SHOW", jid)
            if s is not None:
                d = dict(zip(s[::2], s[1::2], strict=True))
                if d[b"state"] != b"acked":
                    return True
        return False

    def stop(self) -> None:
        for c in self.clients:
            c.close()
        for s in self.servers:
            s.kill()
