"""Spark test fixtures: one local SparkSession for the whole run, real server processes.

The session is tuned to start fast (local[2], 2 shuffle partitions, no UI, no progress
bar) and allows a task 2 attempts so a test can make a write task fail once.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from spark_support import Cluster  # noqa: E402

#: a CI run must test the connector: there a missing PySpark or Java fails the Spark
#: tests instead of skipping them (`make test` installs both)
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
if not IN_CI:
    pytest.importorskip("pyspark", reason="the spark extra is not installed")


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """The one SparkSession of the test run, with the "disque" format registered.
    Without Java 17+ every test using it fails in CI and is skipped (saying why) outside."""
    from disquepy.spark.java import java_problem

    problem = java_problem()
    if problem:
        if IN_CI:
            pytest.fail(problem, pytrace=False)
        pytest.skip(problem)
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
