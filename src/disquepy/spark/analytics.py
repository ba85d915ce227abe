"""Queue analytics over the server's job-lifecycle event log, computed with Spark.

``run_analytics(path, out)`` reads the JSON-lines files a node writes with
``event-log yes`` (``events-<node>-<time>-<seq>.jsonl``, one event per line: ``ts`` in
unix ms, ``event``, ``node``, ``job``, ``queue`` and per-event fields) from a file or a
directory (searched recursively; an unparsable line, such as the partial last line of
a file being written, is skipped) and computes, per queue:

- throughput over time: jobs added, delivered and acked per time bucket (the bucket
  is chosen so the history spans at most ~120 buckets);
- wait time: from the job being queued (the latest ``queued`` event before the
  delivery; ``added`` when no ``queued`` was logged) to each delivery;
- processing time: from the last delivery before the ack to the ack;
- p50/p90/p99/max of both, delivery attempts per job (mean, max), nack rate
  (nacks per delivery) and expiry rate (expired jobs per job added);
- likely dead letters: jobs delivered at least ``dead_deliveries`` times or nacked at
  least ``dead_nacks`` times and never acked (nor deleted).

Queues named ``__disquepy_spark_*`` (the Spark source's markers) are left out.
``expired`` is logged by every node holding a copy and ``acked`` possibly by several:
events are deduplicated per job before counting. The results go to ``out`` as
Parquet (``summary``, ``throughput``, ``dead_letters``), ``summary.json``, and a PNG
chart ``queues.png`` (throughput lines and latency bars, drawn by
:mod:`disquepy.spark.png`); a summary is printed and returned as a dict.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from . import png

log = logging.getLogger("disquepy.spark.analytics")

EVENT_SCHEMA = ("ts long, event string, node string, job string, queue string, ttl long, "
                "retry long, delay long, replicate long, size long, nacks long, "
                "additional_deliveries long")
INTERNAL_PREFIX = "__disquepy_spark_"
BUCKETS_S = (1, 5, 10, 30, 60, 300, 600, 1800, 3600, 3 * 3600, 6 * 3600, 86400)


def _session() -> tuple[Any, bool]:
    """The active SparkSession, or a small local one (then ours to stop)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("disque-analytics")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "4")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark, True


def _event_files(path: str) -> list[str]:
    p = Path(path)
    if p.is_file():
        return [str(p)]
    files = sorted(str(f) for f in p.rglob("*.jsonl"))
    if not files:
        raise FileNotFoundError(f"no event files (*.jsonl) under {path}")
    return files


def pick_bucket(span_ms: int, max_buckets: int = 120) -> int:
    """The smallest bucket (seconds) that keeps ``span_ms`` within ``max_buckets``."""
    for b in BUCKETS_S:
        if span_ms / (b * 1000) <= max_buckets:
            return b
    return BUCKETS_S[-1]


def run_analytics(path: str, out: str, *, dead_deliveries: int = 3, dead_nacks: int = 2,
                  spark: Any = None, quiet: bool = False) -> dict:
    """Analyse the event log under ``path``; write Parquet, JSON and a PNG to ``out``;
    print a summary (unless ``quiet``) and return it as a dict."""
    from pyspark.sql import functions as F

    own = False
    if spark is None:
        spark, own = _session()
    try:
        files = _event_files(path)
        raw = (spark.read.schema(EVENT_SCHEMA).option("mode", "DROPMALFORMED")
               .json(files))
        ev = raw.where(F.col("ts").isNotNull() & F.col("event").isNotNull()
                       & F.col("job").isNotNull() & F.col("queue").isNotNull()
                       # the Spark source's own bookkeeping queues are not the user's
                       & ~F.col("queue").startswith(INTERNAL_PREFIX)).cache()
        n_events, lo, hi = ev.agg(F.count("*"), F.min("ts"), F.max("ts")).first()
        outp = Path(out)
        outp.mkdir(parents=True, exist_ok=True)
        if n_events == 0:
            result = {"events": 0, "files": len(files), "queues": {}}
            (outp / "summary.json").write_text(json.dumps(result, indent=2))
            if not quiet:
                print(f"no events in {len(files)} file(s) under {path}")
            return result

        # One shuffle: every job's history in one row. Copies of one fact (expired on
        # every node holding a copy, an ack seen twice) collapse into min(ts).
        ts, e = F.col("ts"), F.col("event")

        def first(kind: str):
            return F.min(F.when(e == kind, ts)).alias(kind)

        def times(*kinds: str):
            return F.array_sort(F.collect_list(F.when(e.isin(*kinds), ts)))

        jobs = (ev.groupBy("queue", "job").agg(
            first("added"), first("acked"), first("expired"), first("deleted"),
            F.count(F.when(e == "nacked", 1)).alias("nacks"),
            times("delivered").alias("dts"), times("queued", "added").alias("qts"))
            .withColumn("deliveries", F.size("dts"))
            # wait: each delivery minus the latest queued/added at or before it
            .withColumn("waits", F.expr(
                "filter(transform(dts, d -> d - array_max(filter(qts, q -> q <= d))), "
                "w -> w is not null)"))
            # processing: the ack minus the last delivery at or before it
            .withColumn("proc", F.expr(
                "acked - array_max(filter(dts, d -> d <= acked))"))
            .drop("qts")).cache()

        def pct(col: str):
            return [F.percentile_approx(col, p, 1000).alias(f"{col}_p{int(p * 100)}")
                    for p in (0.5, 0.9, 0.99)] + [F.max(col).alias(f"{col}_max")]

        per_queue = jobs.groupBy("queue").agg(
            F.count(F.col("added")).alias("added"),
            F.count(F.col("acked")).alias("acked"),
            F.count(F.col("expired")).alias("expired"),
            F.count(F.col("deleted")).alias("deleted"),
            F.sum("deliveries").alias("deliveries"),
            F.avg(F.when(F.col("deliveries") > 0, F.col("deliveries"))).alias("attempts_mean"),
            F.max("deliveries").alias("attempts_max"),
            F.sum("nacks").alias("nacks"),
            *pct("proc")).withColumnsRenamed(
                {f"proc_{k}": f"proc_ms_{k}" for k in ("p50", "p90", "p99", "max")})
        waits = (jobs.select("queue", F.explode("waits").alias("wait_ms"))
                 .groupBy("queue").agg(*pct("wait_ms")))
        span = ev.groupBy("queue").agg(F.min("ts").alias("first_ts"),
                                      F.max("ts").alias("last_ts"))
        summary = span.join(per_queue, "queue", "left").join(waits, "queue", "left")
        summary = summary.withColumn(
            "nack_rate", F.when(F.col("deliveries") > 0,
                                F.col("nacks") / F.col("deliveries")).otherwise(0.0)
        ).withColumn(
            "expiry_rate", F.when(F.col("added") > 0,
                                  F.col("expired") / F.col("added")).otherwise(0.0)
        ).withColumn(
            "acked_per_s", F.when(F.col("last_ts") > F.col("first_ts"),
                                  F.col("acked") * 1000.0
                                  / (F.col("last_ts") - F.col("first_ts"))).otherwise(None))

        dead = (jobs.where(F.col("acked").isNull() & F.col("deleted").isNull()
                           & ((F.col("deliveries") >= dead_deliveries)
                              | (F.col("nacks") >= dead_nacks)))
                .select("queue", "job", "deliveries", "nacks",
                        F.col("expired").isNotNull().alias("expired")))

        bucket = pick_bucket(hi - lo)
        thr_events = jobs.select("queue", F.explode(F.concat(
            F.when(F.col("added").isNotNull(),
                   F.array(F.struct(F.col("added").alias("ts"), F.lit("added").alias("ev"))))
            .otherwise(F.array().cast("array<struct<ts:long,ev:string>>")),
            F.when(F.col("acked").isNotNull(),
                   F.array(F.struct(F.col("acked").alias("ts"), F.lit("acked").alias("ev"))))
            .otherwise(F.array().cast("array<struct<ts:long,ev:string>>")),
            F.transform("dts", lambda d: F.struct(d.alias("ts"), F.lit("delivered").alias("ev")))
        )).alias("x")).select("queue", "x.ts", "x.ev")
        thr = (thr_events
               .withColumn("bucket", (F.floor(F.col("ts") / (bucket * 1000)) * bucket)
                           .cast("long"))
               .groupBy("queue", "bucket").pivot("ev", ["added", "delivered", "acked"])
               .count().fillna(0).orderBy("queue", "bucket"))

        summary.write.mode("overwrite").parquet(str(outp / "summary"))
        thr.write.mode("overwrite").parquet(str(outp / "throughput"))
        dead.write.mode("overwrite").parquet(str(outp / "dead_letters"))
        # what is printed and drawn comes back from the (small) Parquet results
        summary = spark.read.parquet(str(outp / "summary"))
        thr = spark.read.parquet(str(outp / "throughput"))
        dead = spark.read.parquet(str(outp / "dead_letters"))
        dead_rows = dead.orderBy(F.desc("deliveries"), F.desc("nacks"), "job").collect()
        dead_counts: dict[str, int] = {}
        for r in dead_rows:
            dead_counts[r["queue"]] = dead_counts.get(r["queue"], 0) + 1

        queues: dict[str, dict] = {}
        for r in summary.orderBy("queue").collect():
            d = r.asDict()
            d["likely_dead_letters"] = dead_counts.get(d["queue"], 0)
            queues[d.pop("queue")] = d
        thr_rows = thr.collect()
        chart = outp / "queues.png"
        _chart(chart, queues, thr_rows, bucket, lo)
        result = {"events": n_events, "files": len(files), "bucket_s": bucket,
                  "first_ts": lo, "last_ts": hi, "queues": queues,
                  "dead_letters_sample": [r.asDict() for r in dead_rows[:20]],
                  "outputs": {"summary": str(outp / "summary"),
                              "throughput": str(outp / "throughput"),
                              "dead_letters": str(outp / "dead_letters"),
                              "chart": str(chart)}}
        (outp / "summary.json").write_text(json.dumps(result, indent=2, default=str))
        ev.unpersist()
        jobs.unpersist()
        if not quiet:
            print(format_summary(result))
        log.info("analytics: %d events, %d queues -> %s", n_events, len(queues), out)
        return result
    finally:
        if own:
            spark.stop()


def _ms(v: Any) -> str:
    if v is None:
        return "-"
    v = float(v)
    return f"{v / 1000:.2f}s" if v >= 1000 else f"{v:.0f}ms"


def format_summary(result: dict) -> str:
    """The printed summary: one line per queue."""
    lines = [f"{result['events']} events from {result['files']} file(s), "
             f"throughput bucket {result.get('bucket_s', '-')} s"]
    head = (f"{'queue':<20} {'added':>8} {'acked':>8} {'deliv':>8} {'wait p50':>9} "
            f"{'wait p99':>9} {'proc p50':>9} {'proc p99':>9} {'nack%':>6} {'exp%':>6} "
            f"{'dead?':>6}")
    lines += [head, "-" * len(head)]
    for q, d in result["queues"].items():
        lines.append(
            f"{q[:20]:<20} {d['added']:>8} {d['acked']:>8} {d['deliveries']:>8} "
            f"{_ms(d.get('wait_ms_p50')):>9} {_ms(d.get('wait_ms_p99')):>9} "
            f"{_ms(d.get('proc_ms_p50')):>9} {_ms(d.get('proc_ms_p99')):>9} "
            f"{100 * d['nack_rate']:>5.1f}% {100 * d['expiry_rate']:>5.1f}% "
            f"{d['likely_dead_letters']:>6}")
    if "outputs" in result:
        lines.append(f"chart: {result['outputs']['chart']}")
    return "\n".join(lines)


def _chart(path: Path, queues: dict, thr_rows: list, bucket: int, t0: int) -> None:
    """Two panels: acked jobs/s over time per queue; wait and processing p90 per queue."""
    top = sorted(queues, key=lambda q: -(queues[q]["added"] + queues[q]["acked"]))[:6]
    cv = png.Canvas(1000, 760)
    cv.text(20, 12, "DISQUE QUEUES", png.BLACK, 3)
    series = []
    all_buckets = [r["bucket"] for r in thr_rows]
    x_label = "SECONDS"
    if all_buckets:
        first, last = min(all_buckets), max(all_buckets)
        t0 = first * 1000
        x_label = "SECONDS SINCE " + time.strftime("%Y-%m-%d %H:%M:%S UTC",
                                                   time.gmtime(first))
        for q in top:  # buckets without acks are zeros, not gaps to interpolate over
            acked = {r["bucket"]: r["acked"] or 0 for r in thr_rows if r["queue"] == q}
            pts = [((b * 1000 - t0) / 1000.0, acked.get(b, 0) / bucket)
                   for b in range(first, last + bucket, bucket)]
            series.append((q, pts))
    png.line_panel(cv, (20, 50, 980, 400), f"ACKED JOBS/S ({bucket} S BUCKETS)",
                   x_label, series)
    groups = []
    for q in top:
        d = queues[q]
        groups.append((q, [float(d.get("wait_ms_p90") or 0), float(d.get("proc_ms_p90") or 0)]))
    png.bar_panel(cv, (20, 420, 980, 750), "LATENCY P90 (MS)", groups,
                  ["WAIT (QUEUED TO DELIVERED)", "PROCESSING (DELIVERED TO ACKED)"])
    path.write_bytes(cv.png())


def main(argv: list[str] | None = None) -> int:
    """``python -m disquepy.spark.analytics PATH [OUT]``."""
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m disquepy.spark.analytics EVENTS_PATH [OUT_DIR]")
        return 2
    run_analytics(args[0], args[1] if len(args) > 1 else "analytics-out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
