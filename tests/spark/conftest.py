"""Spark test fixtures: one local SparkSession for the whole run, real server processes.

The session is tuned to start fast (local[2], 2 shuffle partitions, no UI, no progress
bar) and allows a task 2 attempts so a test can make a write task fail once.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import pytest
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from support import Server  # noqa: E402

pytest.importorskip("pyspark")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs Java 17+", allow_module_level=True)

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


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """The one SparkSession of the test run, with the "disque" format registered."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from disquepy.spark import register

    session = (SparkSession.builder.master("local[2,2]").appName("disquepy-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
               .config("spark.sql.streaming.stopTimeout", "20s")
               .config("spark.driver.memory", "1g")
               .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def _cluster3(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("spark-cluster"), 3)
    yield c
    c.stop()


@pytest.fixture
def cluster3(_cluster3) -> Cluster:
    """A 3-node cluster shared by the Spark tests, emptied for each test."""
    for s in _cluster3.servers:
        assert s.alive(), s.log()[-2000:]
    _cluster3.flush()
    return _cluster3


@pytest.fixture(scope="session")
def _single(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("spark-single"), 1)
    yield c
    c.stop()


@pytest.fixture
def single(_single) -> Cluster:
    """One node, emptied for each test."""
    _single.flush()
    return _single
