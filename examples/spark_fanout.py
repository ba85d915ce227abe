"""Fan a table out into jobs: a DataFrame of 1M rows becomes 1M jobs with Spark.

    .venv/bin/python examples/spark_fanout.py --nodes 127.0.0.1:7711 --rows 1000000

Each row becomes one job whose body is the row's JSON (``user_id``, ``email``,
``template``) in queue ``emails``. Every Spark partition writes to one node with
pipelined ADDJOBs carrying idempotency keys, so a retried task does not enqueue twice;
the number of jobs written comes back from the tasks' commit messages.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Any


def spark_session(app: str) -> Any:
    """A local SparkSession whose Python workers use this interpreter."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.appName(app).master(os.environ.get("SPARK_MASTER", "local[*]"))
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run(spark: Any, nodes: str, queue: str = "emails", rows: int = 1_000_000,
        partitions: int | None = None, replicate: int | None = None) -> dict:
    """Write ``rows`` jobs to ``queue``; returns {"written", "seconds", "rows_per_s"}."""
    from disquepy.spark import register

    register(spark)
    parts = partitions or max(2, spark.sparkContext.defaultParallelism)
    df = spark.range(0, rows, numPartitions=parts).selectExpr(
        "named_struct('user_id', id, 'email', concat('user', id, '@example.net'), "
        "'template', 'welcome') as body")
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        w = (df.write.format("disque").option("nodes", nodes).option("queue", queue)
             .option("reportFile", report).mode("append"))
        if replicate:
            w = w.option("replicate", str(replicate))
        t0 = time.perf_counter()
        w.save()
        dt = time.perf_counter() - t0
        with open(report) as f:
            written = json.load(f)["written"]
    return {"written": written, "seconds": dt, "rows_per_s": written / dt if dt else 0.0}


def main(argv: list[str] | None = None) -> int:
    """Command line: see the module docstring."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="127.0.0.1:7711", help="seed nodes host:port,...")
    ap.add_argument("--queue", default="emails")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=None)
    ap.add_argument("--replicate", type=int, default=None)
    a = ap.parse_args(argv)
    spark = spark_session("disque-fanout")
    try:
        res = run(spark, a.nodes, a.queue, a.rows, a.partitions, a.replicate)
    finally:
        spark.stop()
    print(f"{res['written']} jobs written to {a.queue} in {res['seconds']:.1f} s "
          f"({res['rows_per_s']:.0f} rows/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
