"""Queue analytics over the server's job-lifecycle event log, computed with Spark.

``run_analytics(path, out)`` reads the JSON-lines files a node writes with
``event-log yes`` (``events-<node>-<time>-<seq>.jsonl``, one event per line: ``ts`` in
unix ms, ``event``, ``node``, ``job``, ``queue`` and per-event fields) from a file or a
directory (searched recursively; an unparsable line, such as the partial last line of
a file being written, is skipped) and computes, per queue:

- throughput over time: jobs added, delivered, acked and nacked, and dead letters, per
  time bucket (the bucket is chosen so the history spans at most ~120 buckets);
- backlog over time and at the end: jobs added and not yet acked, expired or deleted,
  and the queued depth (jobs waiting in a queue: each job's state after each of its
  events, so a job queued on two nodes after a federation move counts once);
- wait time: from the job being queued (the FIRST ``queued`` event after the previous
  delivery, so a federation move does not restart it; ``added`` when no ``queued`` was
  logged) to each delivery;
- processing time: from the last delivery before the ack to the ack;
- p50/p90/p99/max of both, delivery attempts per job (mean, max), nack rate (nacks per
  delivery), dead-letter rate (jobs a worker added to the queue's dead-letter queue,
  ``Q:dead`` by default, per job added: a worker's back-off re-adds a failing job as a
  new job, so only the dead-letter queue shows that it gave up) and expiry rate;
- likely stuck jobs (``likely_dead_letters``): delivered at least ``dead_deliveries``
  times or nacked at least ``dead_nacks`` times and never acked (nor deleted).

Queues named ``__disquepy_spark_*`` (the Spark source's markers) are left out.
``expired`` is logged by every node holding a copy and ``acked`` possibly by several:
events are deduplicated per job before counting. The results go to ``out`` as
Parquet (``summary``, ``throughput``, ``dead_letters``), ``summary.json``, and a
matplotlib chart ``queues.png`` (throughput in and out, backlog, wait and processing
percentiles, nack and dead-letter rates); a summary is printed and returned as a dict.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..client.deadletter import DEFAULT_DLQ

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from pyspark.sql import Column, Row, SparkSession

log = logging.getLogger("disquepy.spark.analytics")

EVENT_SCHEMA = ("ts long, event string, node string, job string, queue string, ttl long, "
                "retry long, delay long, replicate long, size long, nacks long, "
                "additional_deliveries long")
INTERNAL_PREFIX = "__disquepy_spark_"
BUCKETS_S = (1, 5, 10, 30, 60, 300, 600, 1800, 3600, 3 * 3600, 6 * 3600, 86400)


def _session() -> tuple[SparkSession, bool]:
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


def dead_letter_regex(pattern: str = DEFAULT_DLQ) -> str:
    """A regex whose group 1 is the queue a dead-letter queue name belongs to
    (``pattern`` as the worker's ``dead_letter_queue``: ``"{queue}:dead"``)."""
    head, sep, tail = pattern.partition("{queue}")
    if not sep:
        raise ValueError(f"dead-letter queue pattern {pattern!r} has no {{queue}} field")
    return f"^{re.escape(head)}(.+){re.escape(tail)}$"


def run_analytics(path: str, out: str, *, dead_deliveries: int = 3, dead_nacks: int = 2,
                  dead_letter_queue: str = DEFAULT_DLQ, spark: SparkSession | None = None,
                  quiet: bool = False) -> dict[str, Any]:
    """Analyse the event log under ``path``; write Parquet, JSON and a PNG to ``out``;
    print a summary (unless ``quiet``) and return it as a dict (the JSON summary:
    counts, times, per-queue objects, hence Any)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    own = False
    if spark is None:
        spark, own = _session()
    try:
        files = _event_files(path)
        raw = (spark.read.schema(EVENT_SCHEMA).option("mode", "DROPMALFORMED")
               .json(files))
        # seq: the line order, which breaks ties between one node's events in one ms
        # (NACK, queued and GETJOB's delivered often share it)
        ev = raw.withColumn("seq", F.monotonically_increasing_id()).where(F.col("ts").isNotNull() & F.col("event").isNotNull()
                       & F.col("job").isNotNull() & F.col("queue").isNotNull()
                       # the Spark source's own bookkeeping queues are not the user's
                       & ~F.col("queue").startswith(INTERNAL_PREFIX)).cache()
        totals = ev.agg(F.count("*"), F.min("ts"), F.max("ts")).first()
        assert totals is not None  # an aggregate over the whole frame: one row
        n_events, lo, hi = totals
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

        def first(kind: str) -> Column:
            return F.min(F.when(e == kind, ts)).alias(kind)

        def times(kind: str) -> Column:
            return F.array_sort(F.collect_list(F.when(e == kind, ts)))

        jobs = (ev.groupBy("queue", "job").agg(
            first("added"), first("acked"), first("expired"), first("deleted"),
            F.count(F.when(e == "nacked", 1)).alias("nacks"),
            times("delivered").alias("dts"), times("queued").alias("qts"),
            times("nacked").alias("nts"))
            .withColumn("deliveries", F.size("dts"))
            # wait: from the FIRST time the job was queued after the previous delivery (a
            # federation move or a second copy queues it again, on another node, while it
            # still waits) to the delivery; the job's `added` when no `queued` was logged
            .withColumn("prev", F.concat(F.array(F.lit(-1).cast("long")), "dts"))
            .withColumn("waits", F.expr(
                "filter(transform(dts, (d, i) -> d - coalesce("
                "array_min(filter(qts, q -> q <= d and q > prev[i])), "
                "array_max(filter(qts, q -> q <= d)), "
                "if(added <= d, added, null))), w -> w is not null)"))
            # processing: the ack minus the last delivery at or before it
            .withColumn("proc", F.expr(
                "acked - array_max(filter(dts, d -> d <= acked))"))
            # when the job stopped counting in the backlog: acked, expired or deleted
            .withColumn("done", F.least("acked", "expired", "deleted"))
            .drop("qts", "prev")).cache()

        # dead letters: jobs a worker added to a queue's dead-letter queue ("Q:dead"),
        # counted for Q (the worker re-adds a retried job as a new job and acks the
        # original, so only the dead-letter queue tells that a job gave up)
        origin = F.regexp_extract("queue", dead_letter_regex(dead_letter_queue), 1)
        dlq = (jobs.where(F.col("added").isNotNull() & (origin != ""))
               .select(origin.alias("queue"), F.col("added").alias("dead_ts")).cache())

        def pct(col: str) -> list[Column]:
            return [F.percentile_approx(col, p, 1000).alias(f"{col}_p{int(p * 100)}")
                    for p in (0.5, 0.9, 0.99)] + [F.max(col).alias(f"{col}_max")]

        per_queue = jobs.groupBy("queue").agg(
            F.count(F.col("added")).alias("added"),
            F.count(F.col("acked")).alias("acked"),
            F.count(F.col("expired")).alias("expired"),
            F.count(F.col("deleted")).alias("deleted"),
            # jobs added and not yet acked, expired nor deleted at the end of the log
            F.count(F.when(F.col("added").isNotNull() & F.col("done").isNull(), 1))
            .alias("backlog"),
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

        # queued depth: each job's state after each of its events (1 = waiting in a
        # queue), its changes summed per bucket; the depth is their running sum
        bucket = pick_bucket(hi - lo)
        w_job = Window.partitionBy("queue", "job").orderBy("ts", "seq")
        bcol = (F.floor(F.col("ts") / (bucket * 1000)) * bucket).cast("long").alias("bucket")
        depth = (ev.select(
                     "queue", "job", "ts", "seq",
                     F.when(e == "queued", 1).otherwise(0).alias("state"))
                 .withColumn("change", F.col("state")
                             - F.coalesce(F.lag("state").over(w_job), F.lit(0)))
                 .where(F.col("change") != 0)
                 .groupBy("queue", bcol).agg(F.sum("change").alias("queued_change")))
        last_depth = (depth.groupBy("queue").agg(F.sum("queued_change").alias("queued")))
        dead_per_queue = dlq.groupBy("queue").agg(F.count("*").alias("dead_lettered"))

        summary = (span.join(per_queue, "queue", "left").join(waits, "queue", "left")
                   .join(last_depth, "queue", "left").join(dead_per_queue, "queue", "left")
                   .fillna(0, ["queued", "dead_lettered"]))

        def rate(num: str, den: str) -> Column:
            return F.when(F.col(den) > 0, F.col(num) / F.col(den)).otherwise(0.0)

        def per_s(col: str) -> Column:
            return F.when(F.col("last_ts") > F.col("first_ts"),
                          F.col(col) * 1000.0 / (F.col("last_ts") - F.col("first_ts")))

        summary = summary.withColumns({
            "nack_rate": rate("nacks", "deliveries"),  # nacks per delivery
            "dead_letter_rate": rate("dead_lettered", "added"),  # dead letters per job added
            "expiry_rate": rate("expired", "added"),
            "added_per_s": per_s("added"),
            "acked_per_s": per_s("acked")})

        dead = (jobs.where(F.col("acked").isNull() & F.col("deleted").isNull()
                           & ((F.col("deliveries") >= dead_deliveries)
                              | (F.col("nacks") >= dead_nacks)))
                .select("queue", "job", "deliveries", "nacks",
                        F.col("expired").isNotNull().alias("expired")))

        # per queue and bucket: jobs added, delivered, acked, nacked, dead-lettered, the
        # backlog (added and not done) and the queued depth at the bucket's end
        kinds: list[bool | float | int | str] = [  # (the type pivot takes)
            "added", "delivered", "acked", "nacked", "dead_lettered", "done"]

        def stamps(col: str, kind: str) -> Column:
            return F.transform(F.when(F.col(col).isNotNull(), F.array(col))
                               .otherwise(F.array().cast("array<long>")),
                               lambda t: F.struct(t.alias("ts"), F.lit(kind).alias("ev")))

        def each(col: str, kind: str) -> Column:
            return F.transform(col, lambda t: F.struct(t.alias("ts"), F.lit(kind).alias("ev")))

        thr_events = jobs.select("queue", F.explode(F.concat(
            stamps("added", "added"), stamps("acked", "acked"), each("dts", "delivered"),
            each("nts", "nacked"),
            F.when(F.col("added").isNotNull(), stamps("done", "done"))
            .otherwise(F.array().cast("array<struct<ts:long,ev:string>>")))).alias("x")
        ).select("queue", "x.ts", "x.ev").unionByName(
            dlq.select("queue", F.col("dead_ts").alias("ts"), F.lit("dead_lettered").alias("ev")))
        w_q = Window.partitionBy("queue").orderBy("bucket").rowsBetween(
            Window.unboundedPreceding, Window.currentRow)
        thr = (thr_events.select("queue", bcol, "ev")
               .groupBy("queue", "bucket").pivot("ev", kinds).count()
               .join(depth, ["queue", "bucket"], "full").fillna(0)
               .withColumn("backlog", F.sum(F.col("added") - F.col("done")).over(w_q))
               .withColumn("queued", F.sum("queued_change").over(w_q))
               .drop("done", "queued_change").orderBy("queue", "bucket"))

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

        queues: dict[str, dict[str, Any]] = {}  # a queue's summary row, by column
        for r in summary.orderBy("queue").collect():
            d = r.asDict()
            d["likely_dead_letters"] = dead_counts.get(d["queue"], 0)
            queues[d.pop("queue")] = d
        thr_rows = thr.collect()
        chart = outp / "queues.png"
        _chart(chart, queues, thr_rows, bucket, dead_letter_queue)
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


def _ms(v: float | None) -> str:
    if v is None:
        return "-"
    v = float(v)
    return f"{v / 1000:.2f}s" if v >= 1000 else f"{v:.0f}ms"


def format_summary(result: dict[str, Any]) -> str:
    """The printed summary: one line per queue."""
    lines = [f"{result['events']} events from {result['files']} file(s), "
             f"throughput bucket {result.get('bucket_s', '-')} s"]
    head = (f"{'queue':<20} {'added':>8} {'acked':>8} {'backlog':>8} {'queued':>7} "
            f"{'deliv':>8} {'wait p50':>9} {'wait p99':>9} {'proc p50':>9} {'proc p99':>9} "
            f"{'nack%':>6} {'dead%':>6} {'exp%':>6} {'stuck?':>6}")
    lines += [head, "-" * len(head)]
    for q, d in result["queues"].items():
        lines.append(
            f"{q[:20]:<20} {d['added']:>8} {d['acked']:>8} {d['backlog']:>8} "
            f"{d['queued']:>7} {d['deliveries']:>8} "
            f"{_ms(d.get('wait_ms_p50')):>9} {_ms(d.get('wait_ms_p99')):>9} "
            f"{_ms(d.get('proc_ms_p50')):>9} {_ms(d.get('proc_ms_p99')):>9} "
            f"{100 * d['nack_rate']:>5.1f}% {100 * d['dead_letter_rate']:>5.1f}% "
            f"{100 * d['expiry_rate']:>5.1f}% {d['likely_dead_letters']:>6}")
    lines.append("backlog: added, not yet acked/expired/deleted; queued: waiting in a queue "
                 "at the end; dead%: dead letters (Q:dead) per job added; stuck?: delivered "
                 "3+ times or nacked 2+ times, never acked")
    if "outputs" in result:
        lines.append(f"chart: {result['outputs']['chart']}")
    return "\n".join(lines)


CHART_QUEUES = 6  # the busiest queues drawn (the printed table and Parquet have them all)
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b")


def _chart(path: Path, queues: dict[str, dict[str, Any]], thr_rows: list[Row], bucket: int,
           dead_letter_queue: str = DEFAULT_DLQ) -> Figure:
    """The chart ``queues.png`` (returns its matplotlib Figure): one row per queue (the
    6 busiest; dead-letter queues count in their queue's dead-letter rate) with its jobs
    in and out per second and its backlog and queued depth over time, each queue on axes
    of its own so one queue's lines never hide another's; under them the wait and
    processing percentiles and the nack and dead-letter rates of every drawn queue."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    dlq = re.compile(dead_letter_regex(dead_letter_queue))
    own = [q for q in queues if not dlq.match(q)] or list(queues)
    top = sorted(own, key=lambda q: -(queues[q]["added"] + queues[q]["acked"]))[:CHART_QUEUES]
    colors = dict(zip(top, COLORS, strict=False))
    n = max(len(top), 1)
    rows_h, lat_h = 1.7 * n, max(3.2, 0.62 * 2 * n + 1.2)
    fig = Figure(figsize=(14, 1.2 + rows_h + lat_h), dpi=100, layout="constrained")
    [f_top], [f_bottom] = fig.subfigures(2, 1, squeeze=False,
                                         height_ratios=[rows_h + 0.6, lat_h])
    grid_axes = f_top.subplots(n, 2, sharex=True, squeeze=False)
    a_lat, a_fail = f_bottom.subplots(1, 2, width_ratios=[3, 2])
    buckets = sorted({r["bucket"] for r in thr_rows if r["queue"] in colors})
    first = buckets[0] if buckets else 0
    start = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(first))
    length = (buckets[-1] - first + bucket) if buckets else 0
    fig.suptitle(f"Disque queues: {start}, {length} s", fontsize=15, fontweight="bold")
    # each bucket's value held over the bucket, the last one drawn to its end
    grid = list(range(first, buckets[-1] + 2 * bucket, bucket)) if buckets else []
    xs = [b - first for b in grid]
    for i, q in enumerate(top):
        by_bucket = {r["bucket"]: r for r in thr_rows if r["queue"] == q}

        def series(col: str, carry: bool = False,
                   by_bucket: dict[int, Row] = by_bucket) -> list[int]:
            out, last = [], 0  # a bucket without events: no jobs, the same depth
            for b in grid:
                r = by_bucket.get(b)
                last = (r[col] or 0) if r is not None else (last if carry else 0)
                out.append(last)
            return out

        c = colors[q]
        a_thr, a_back = grid_axes[i]
        a_thr.step(xs, [v / bucket for v in series("added")], where="post", color=c, lw=2)
        a_thr.step(xs, [v / bucket for v in series("acked")], where="post", color="black",
                   lw=1.5, ls="--")
        back = series("backlog", carry=True)
        a_back.fill_between(xs, back, step="post", color=c, alpha=0.25, lw=0)
        a_back.step(xs, back, where="post", color=c, lw=2)
        a_back.step(xs, series("queued", carry=True), where="post", color="black", lw=1.5,
                    ls=":")
        d = queues[q]
        a_thr.set_ylabel(f"{q[:24]}\njobs/s", fontsize=10, color=c, fontweight="bold")
        a_back.set_ylabel("jobs", fontsize=9)
        a_back.text(0.995, 0.95, f"at the end: backlog {d['backlog']}, queued {d['queued']}",
                    transform=a_back.transAxes, ha="right", va="top", fontsize=9,
                    bbox=dict(facecolor="white", alpha=0.8, lw=0))
        a_thr.text(0.995, 0.95, f"added {d['added']}, acked {d['acked']}",
                   transform=a_thr.transAxes, ha="right", va="top", fontsize=9,
                   bbox=dict(facecolor="white", alpha=0.8, lw=0))
        for ax in (a_thr, a_back):
            ax.set_ylim(bottom=0, top=max(ax.get_ylim()[1] * 1.25, 1))
            ax.yaxis.set_major_locator(MaxNLocator(4, integer=True))
            ax.grid(alpha=0.3)
    if not top:
        for ax in grid_axes[0]:
            ax.text(0.5, 0.5, "no queue in the event log", ha="center", va="center",
                    transform=ax.transAxes, color="gray")
    for ax, title, styles in (
            (grid_axes[0][0], f"Throughput, jobs/s ({bucket} s buckets)",
             ((None, "-", "in: added"), ("black", "--", "out: acked"))),
            (grid_axes[0][1], "Backlog",
             ((None, "-", "added, not yet acked"), ("black", ":", "waiting in the queue")))):
        ax.set_title(title, fontsize=12, loc="left", fontweight="bold")
        ax.legend(handles=[Line2D([], [], color=col or "gray", ls=ls, lw=2, label=lab)
                           for col, ls, lab in styles], fontsize=9, ncol=2,
                  loc="lower right", bbox_to_anchor=(1.0, 1.0), frameon=False,
                  borderaxespad=0.1)  # above the axes, beside the title: off the lines
    for ax in grid_axes[-1]:
        ax.set_xlabel("seconds since the start")

    # wait and processing p50 / p90 / p99: one row per queue and kind
    labels: list[tuple[str, str]] = []
    rows: list[list[float | None]] = []  # ms; None: no delivery (wait) or ack (processing)
    for q in top:
        for kind, key in (("wait", "wait_ms"), ("processing", "proc_ms")):
            labels.append((q, kind))
            rows.append([queues[q].get(f"{key}_p{p}") for p in (50, 90, 99)])
    h, shades = 0.27, (1.0, 0.6, 0.3)
    hi = max([float(v) for r in rows for v in r if v is not None] + [1.0])
    for i, alpha in enumerate(shades):
        for k, ((q, _kind), r) in enumerate(zip(labels, rows, strict=True)):
            y = k + (i - 1) * h
            ms = r[i]
            if ms is None:  # no delivery (wait) or no ack (processing)
                if i == 1:
                    a_lat.text(0.6, y, "no data", va="center", fontsize=9, color="gray")
                continue
            v = max(float(ms), 0.5)  # 0 ms on a log axis
            a_lat.barh(y, v, height=h, alpha=alpha, color=colors[q])
            a_lat.text(v * 1.1, y, _ms(ms), va="center", fontsize=8)
    a_lat.set_yticks(range(len(labels)), [f"{q[:24]}: {kind}" for q, kind in labels],
                     fontsize=9)
    a_lat.set_ylim(max(len(labels), 1) - 0.5, -0.5)  # top to bottom, every row inside
    a_lat.set_xscale("log")
    a_lat.set_xlim(0.5, hi * 4)
    a_lat.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _ms(v)))
    a_lat.set_title("Wait (queued to delivered), processing (delivered to acked)",
                    fontsize=12, loc="left", fontweight="bold")
    a_lat.legend(handles=[Patch(color="black", alpha=a, label=f"p{p}")
                          for p, a in zip((50, 90, 99), shades, strict=True)],
                 fontsize=9, loc="lower right")
    a_lat.grid(alpha=0.3, axis="x")

    # failures per queue: nacks per delivery, dead letters per job added
    pos = range(len(top))
    nack = [100 * queues[q]["nack_rate"] for q in top]
    dead = [100 * queues[q]["dead_letter_rate"] for q in top]
    a_fail.bar([x - 0.2 for x in pos], nack, width=0.4, color=[colors[q] for q in top])
    a_fail.bar([x + 0.2 for x in pos], dead, width=0.4, color=[colors[q] for q in top],
               hatch="//", edgecolor="black", alpha=0.5)
    for x, v in [*zip([x - 0.2 for x in pos], nack, strict=True),
                 *zip([x + 0.2 for x in pos], dead, strict=True)]:
        a_fail.text(x, v, f"{v:.1f}%" if v else "0", ha="center", va="bottom", fontsize=9)
    a_fail.set_xticks(list(pos), [q[:16] for q in top], fontsize=9)
    a_fail.set_ylabel("%")
    a_fail.set_ylim(0, max([*nack, *dead, 1.0]) * 1.25)
    a_fail.set_title("Failures", fontsize=12, loc="left", fontweight="bold")
    a_fail.legend(handles=[Patch(color="gray", label="nacks per delivery"),
                           Patch(facecolor="white", edgecolor="black", hatch="//",
                                 label="dead letters per job added")],
                  fontsize=9, loc="upper left")
    a_fail.grid(alpha=0.3, axis="y")
    fig.savefig(path)
    return fig


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
