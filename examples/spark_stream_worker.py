"""A Spark streaming worker: consume jobs, transform them, write Parquet, ack.

    .venv/bin/python examples/spark_stream_worker.py --nodes 127.0.0.1:7711 \\
        --queue emails --out /tmp/emails.parquet --checkpoint /tmp/emails.ckpt

Reads jobs from ``--queue`` (JSON bodies as ``spark_fanout.py`` writes them), renders a
subject line per job and appends the result to a Parquet directory with Spark's file
sink. The connector acknowledges the jobs of a micro-batch only after Spark has
committed it, so a crash at any point loses nothing: restart with the same
``--checkpoint`` and the batch in flight is replayed with the same jobs (and the file
sink, which keeps its own log of committed batches, writes it once). ``--once``
processes what is queued now and exits (``availableNow``); without it the worker
polls every ``--every`` seconds until interrupted. Every ``--progress`` seconds it
prints the micro-batches committed since the last line (jobs in them, the total, the
rate).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from spark_fanout import spark_session  # noqa: E402

BODY_SCHEMA = "user_id long, email string, template string"


def start(spark: Any, nodes: str, queue: str, out: str, checkpoint: str, *,
          once: bool = True, every: str = "2 seconds", max_jobs: int | None = None) -> Any:
    """Start the query; returns the StreamingQuery."""
    from pyspark.sql import functions as F

    from disquepy.spark import register

    register(spark)
    r = spark.readStream.format("disque").option("nodes", nodes).option("queue", queue)
    if max_jobs:
        r = r.option("maxJobsPerTrigger", str(max_jobs))
    jobs = r.load()
    parsed = jobs.select(F.col("id").alias("job_id"), "queue", "nacks",
                         F.from_json("body", BODY_SCHEMA).alias("b"))
    out_df = parsed.select(
        "job_id", "queue", F.col("b.user_id").alias("user_id"), F.col("b.email").alias("email"),
        F.concat(F.initcap(F.col("b.template")), F.lit(" to "), F.col("b.email"))
        .alias("subject"),
        F.current_timestamp().alias("processed_at"))
    w = (out_df.writeStream.format("parquet").option("path", out)
         .option("checkpointLocation", checkpoint).queryName(f"worker-{queue}"))
    w = w.trigger(availableNow=True) if once else w.trigger(processingTime=every)
    return w.start()


def follow(q: Any, every: float, out: Any = print) -> None:
    """Wait for the query to end, printing every ``every`` seconds the micro-batches it
    finished since the last line (from Spark's own progress reports)."""
    seen, total, started = -1, 0, time.monotonic()
    while True:
        ended = q.awaitTermination(every)
        new = [p for p in q.recentProgress if p["batchId"] > seen]
        if new:
            seen = new[-1]["batchId"]
            jobs = sum(int(p["numInputRows"]) for p in new)
            total += jobs
            took = time.monotonic() - started
            out(f"{took:7.1f} s  batch {seen:>4}: {jobs:>9,} jobs  ({total:,} in all, "
                f"{total / took:,.0f} jobs/s)")
        if ended:
            return


def main(argv: list[str] | None = None) -> int:
    """Command line: see the module docstring."""
    from disquepy.extras import require

    require("spark", "examples/spark_stream_worker.py")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="127.0.0.1:7711")
    ap.add_argument("--queue", default="emails")
    ap.add_argument("--out", required=True, help="Parquet output directory")
    ap.add_argument("--checkpoint", required=True, help="Spark checkpoint directory")
    ap.add_argument("--once", action="store_true", help="process what is queued, then exit")
    ap.add_argument("--every", default="2 seconds", help="trigger interval when not --once")
    ap.add_argument("--max-jobs-per-trigger", type=int, default=None)
    ap.add_argument("--progress", type=float, default=2.0,
                    help="seconds between progress lines")
    a = ap.parse_args(argv)
    spark = spark_session("disque-stream-worker")
    try:
        q = start(spark, a.nodes, a.queue, a.out, a.checkpoint, once=a.once, every=a.every,
                  max_jobs=a.max_jobs_per_trigger)
        try:
            follow(q, a.progress)
        except KeyboardInterrupt:
            q.stop()
        n = spark.read.parquet(a.out).count() if os.path.exists(a.out) else 0
        print(f"{n} rows in {a.out}")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
