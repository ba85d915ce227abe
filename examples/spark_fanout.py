"""Fan a table out into jobs: a DataFrame of 1M rows becomes 1M jobs with Spark.

    .venv/bin/python examples/spark_fanout.py --nodes 127.0.0.1:7711 --rows 1000000

Each row becomes one job whose body is the row's JSON (``user_id``, ``email``,
``template``) in queue ``emails``. Every Spark partition writes to one node with
pipelined ADDJOBs carrying idempotency keys, so a retried task does not enqueue twice;
the number of jobs written comes back from the tasks' commit messages. By default there
are as many partitions as cores, rounded up to a multiple of the cluster's nodes, so
every node gets its share; progress (jobs queued so far, the rate, tasks done) is printed
every ``--progress`` seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
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


def default_partitions(spark: Any, n_nodes: int) -> int:
    """The cores Spark has, rounded up to a multiple of the nodes (partition i writes to
    node i mod n): every node gets the same share."""
    cores = max(2, spark.sparkContext.defaultParallelism)
    return -(-cores // n_nodes) * n_nodes


def _progress(spark: Any, nodes: list, queue: str, every: float,
              stop: threading.Event) -> None:
    """Every ``every`` seconds: jobs queued on the nodes since the start, the rate and
    the write's tasks done (from Spark's status tracker)."""
    from disquepy.spark._nodes import connect

    conns = [connect(n.host, n.port, timeout=5) for n in nodes]
    try:
        def queued() -> int:
            return sum(int(c.execute_command("QLEN", queue)) for c in conns)

        base = queued()
        t0, last, last_t = time.perf_counter(), 0, time.perf_counter()
        tracker = spark.sparkContext.statusTracker()
        while not stop.wait(every):
            now, done = time.perf_counter(), queued() - base
            tasks = ""
            for sid in tracker.getActiveStageIds():
                st = tracker.getStageInfo(sid)
                if st is not None:
                    tasks = f", tasks {st.numCompletedTasks}/{st.numTasks} done"
            print(f"  {now - t0:6.1f} s  {done:>10,} jobs queued  "
                  f"{(done - last) / (now - last_t):>9,.0f} jobs/s{tasks}", flush=True)
            last, last_t = done, now
    finally:
        for c in conns:
            c.close()


def run(spark: Any, nodes: str, queue: str = "emails", rows: int = 1_000_000,
        partitions: int | None = None, replicate: int | None = None,
        connections: int | None = None, progress: float = 0) -> dict:
    """Write ``rows`` jobs to ``queue``; returns {"written", "seconds", "rows_per_s",
    "per_node": {node "host:port": jobs}}. ``progress`` > 0 prints progress every that
    many seconds."""
    from disquepy.spark import register
    from disquepy.spark._nodes import discover

    register(spark)
    cluster = discover({"nodes": nodes})
    parts = partitions or default_partitions(spark, len(cluster))
    df = spark.range(0, rows, numPartitions=parts).selectExpr(
        "named_struct('user_id', id, 'email', concat('user', id, '@example.net'), "
        "'template', 'welcome') as body")
    stop = threading.Event()
    ticker = None
    if progress > 0:
        ticker = threading.Thread(target=_progress, daemon=True,
                                  args=(spark, cluster, queue, progress, stop))
        ticker.start()
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        w = (df.write.format("disque").option("nodes", nodes).option("queue", queue)
             .option("reportFile", report).mode("append"))
        if replicate:
            w = w.option("replicate", str(replicate))
        if connections:
            w = w.option("connections", str(connections))
        t0 = time.perf_counter()
        try:
            w.save()
        finally:
            stop.set()
        dt = time.perf_counter() - t0
        if ticker is not None:
            ticker.join(10)
        with open(report) as f:
            rep = json.load(f)
    where = {n.id: f"{n.host}:{n.port}" for n in cluster}
    per_node: dict[str, int] = {}
    for p in rep["partitions"]:
        addr = where.get(p["node"], p["node"][:8])
        per_node[addr] = per_node.get(addr, 0) + p["written"]
    written = rep["written"]
    return {"written": written, "seconds": dt, "rows_per_s": written / dt if dt else 0.0,
            "partitions": parts, "per_node": per_node}


def main(argv: list[str] | None = None) -> int:
    """Command line: see the module docstring."""
    from disquepy.extras import require

    require("spark", "examples/spark_fanout.py")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="127.0.0.1:7711", help="seed nodes host:port,...")
    ap.add_argument("--queue", default="emails")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=None)
    ap.add_argument("--replicate", type=int, default=None,
                    help="copies per job (default: the node's, up to 3 in a cluster)")
    ap.add_argument("--connections", type=int, default=None,
                    help="connections per task (the connector's default: 16 in a cluster)")
    ap.add_argument("--progress", type=float, default=2.0,
                    help="seconds between progress lines (0: none)")
    a = ap.parse_args(argv)
    spark = spark_session("disque-fanout")
    try:
        res = run(spark, a.nodes, a.queue, a.rows, a.partitions, a.replicate,
                  a.connections, a.progress)
    finally:
        spark.stop()
    print(f"{res['written']:,} jobs written to {a.queue} in {res['seconds']:.1f} s "
          f"({res['rows_per_s']:,.0f} rows/s), {res['partitions']} partitions; per node: "
          + ", ".join(f"{k} {v:,}" for k, v in sorted(res["per_node"].items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
