"""Helpers for the Spark tests: bounded polling and a real N-node cluster."""

from __future__ import annotations

import sys
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from support import CLUSTER_TIMEOUT_MS, Server, join_cluster  # noqa: E402
from support import wait_for as _wait_for  # noqa: E402


def wait_for(pred, timeout: float = 20.0, step: float = 0.1, what: str = "condition"):
    """support.wait_for with the Spark tests' longer default (a SparkSession is slow)."""
    return _wait_for(pred, timeout, step, what)


class Cluster:
    """N joined server processes, emptied between tests."""

    def __init__(self, base: Path, n: int, *extra: str) -> None:
        self.servers = [Server(base / f"node{i}", "--cluster-node-timeout",
                               str(CLUSTER_TIMEOUT_MS), *extra).start() for i in range(n)]
        self.clients = join_cluster(self.servers)
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
