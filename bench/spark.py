#!/usr/bin/env python3
"""Benchmark the Spark connector against the plain client, in the same run.

    .venv/bin/python bench/spark.py                # 200k rows/jobs, 2 connections, 3 rounds
    .venv/bin/python bench/spark.py --quick        # 50k, 2 rounds
    .venv/bin/python bench/spark.py --rows 500000 --conns 4 --json bench/results/spark.json

One fresh node (``disque-server --port P`` in a scratch directory) serves both sides.

write   rows/s of a batch write of N rows (body: a 16-byte string) to a queue:
        - Spark: ``df.write.format("disque")`` from a cached DataFrame of C partitions
          (local[C]: C Python writer processes, each one connection, pipelined 1000 deep,
          with IDEMPOTENT keys, as by default), and once more with ``idempotent=false``;
        - plain: C processes, each one redis-py connection, the same ADDJOBs pipelined
          1000 deep, without keys and with the same keys as Spark.
        Target: Spark >= 0.8x plain (same connections, same commands).
read    jobs/s consuming a queue of N jobs until empty, every job acked:
        - Spark: ``readStream.format("disque")``, availableNow, into the ``noop`` sink,
          with the default options (a micro-batch takes every job queued: the
          source's capacity when it has a backlog) and with maxJobsPerTrigger N/4
          (4 micro-batches); reported from the first trigger to termination (the
          running rate, acks included) and over the whole query (its start included);
        - plain: C processes, each ``GETJOB NOHANG COUNT 1000`` then one ``ACKJOB`` of
          the IDs, until the queue is empty;
        - floor: the same two queries against a stream source with the connector's
          schema and partitioning and no server (its read tasks convert a canned
          GETJOB reply with the connector's own code): the most the connector could
          reach here, Spark's cost per micro-batch and per row alone.
        Target: Spark >= 0.5x plain (running rate, default options).

Rounds alternate sides; the queue is emptied (DEBUG FLUSHALL) between runs; the best
round of each side is reported (the machine is shared), with the median in the JSON.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from servers import Fleet

BODY = "x" * 16


# ------------------------------------------------------------------ plain side


def _plain_writer(args: tuple) -> int:
    port, queue, lo, hi, keys = args
    import uuid

    import redis

    from disquepy.spark._nodes import pipeline

    c = redis.Redis(port=port, protocol=2)
    wid, part = uuid.uuid4().hex[:16], lo
    n = 0
    for start in range(lo, hi, 1000):
        cmds = []
        for i in range(start, min(hi, start + 1000)):
            cmd: tuple = ("ADDJOB", queue, BODY, 10000)
            if keys:  # the same shape and length as the connector's keys
                cmd += ("IDEMPOTENT", f"{wid}:{part}:{i - lo}")
            cmds.append(cmd)
        for r in pipeline(c, cmds):
            if isinstance(r, Exception):
                raise r
            n += 1
    return n


def _plain_consumer(args: tuple) -> int:
    port, queue = args
    import redis

    c = redis.Redis(port=port, protocol=2)
    n = 0
    while True:
        jobs = c.execute_command("GETJOB", "NOHANG", "COUNT", 1000, "FROM", queue)
        if not jobs:
            return n
        n += int(c.execute_command("ACKJOB", *[j[1] for j in jobs]))


def plain_write(pool, port: int, rows: int, conns: int, keys: bool) -> float:
    step = -(-rows // conns)
    t0 = time.perf_counter()
    done = sum(pool.map(_plain_writer, [(port, "bench", k * step, min(rows, (k + 1) * step),
                                         keys) for k in range(conns)]))
    dt = time.perf_counter() - t0
    assert done == rows, done
    return rows / dt


def plain_read(pool, port: int, rows: int, conns: int) -> float:
    t0 = time.perf_counter()
    done = sum(pool.map(_plain_consumer, [(port, "bench")] * conns))
    dt = time.perf_counter() - t0
    assert done == rows, done
    return rows / dt


def fill(port: int, rows: int) -> None:
    import redis

    from disquepy.spark._nodes import pipeline

    c = redis.Redis(port=port, protocol=2)
    for lo in range(0, rows, 2000):
        pipeline(c, [("ADDJOB", "bench", BODY, 0) for _ in range(lo, min(rows, lo + 2000))])
    assert int(c.execute_command("QLEN", "bench")) == rows


def flush(port: int) -> None:
    import redis

    redis.Redis(port=port, protocol=2).execute_command("DEBUG", "FLUSHALL")


# ------------------------------------------------------------------ Spark side


def spark_write(spark, df, port: int, rows: int, idempotent: bool, tmp: Path) -> float:
    report = tmp / "report.json"
    t0 = time.perf_counter()
    (df.write.format("disque").option("nodes", f"127.0.0.1:{port}").option("queue", "bench")
     .option("idempotent", str(idempotent)).option("reportFile", str(report))
     .mode("append").save())
    dt = time.perf_counter() - t0
    assert json.loads(report.read_text())["written"] == rows
    return rows / dt


def spark_read(spark, port: int, rows: int, tmp: Path, n: str,
               per_trigger: int | None = None, fmt: str = "disque") -> tuple[float, float]:
    """(jobs/s over the whole query, jobs/s from its first trigger): availableNow into
    the noop sink, at most ``per_trigger`` jobs a micro-batch (None: the default, all
    queued); every job acked when the query ends. ``fmt`` "floor": the server-less
    floor source instead (``rows`` canned jobs). Prints each micro-batch's durations
    as Spark reports them (not for the warm-up, n starting with "w")."""
    from datetime import datetime

    t0 = time.perf_counter()
    r = spark.readStream.format(fmt).option("nodes", f"127.0.0.1:{port}").option(
        "queue", "bench")
    if fmt != "disque":  # the floor's canned jobs (the real source refuses the option)
        r = r.option("rows", str(rows))
    if per_trigger:
        r = r.option("maxJobsPerTrigger", str(per_trigger))
    q = (r.load().writeStream.format("noop").option("checkpointLocation", str(tmp / f"ck{n}"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    t_end = time.time()
    dt = time.perf_counter() - t0
    first = datetime.fromisoformat(q.recentProgress[0]["timestamp"].replace("Z", "+00:00"))
    got = sum(p["numInputRows"] for p in q.recentProgress)
    assert got == rows, (got, rows)
    if fmt == "disque":
        import redis

        c = redis.Redis(port=port, protocol=2)
        left = int(c.execute_command("QLEN", "bench"))
        jobs = sum(int(x) for x in c.execute_command("DEBUG", "JOBS"))
        assert left == 0 and jobs == 0, (left, jobs)
    if not n.startswith("w"):  # where a micro-batch's time goes (Spark's durations, ms)
        per = f"at most {per_trigger}" if per_trigger else "all"
        print(f"  {fmt}, {per} per batch:")
        keys = ("addBatch", "walCommit", "commitOffsets", "latestOffset", "queryPlanning",
                "triggerExecution")
        for p in q.recentProgress:
            if p["numInputRows"]:
                d = p["durationMs"]
                print(f"    batch {p['batchId']}: {p['numInputRows']} jobs, "
                      + ", ".join(f"{k} {d.get(k, 0)}" for k in keys), flush=True)
    return rows / dt, rows / (t_end - first.timestamp())


def _on_sigterm(signum, frame):
    raise KeyboardInterrupt


def floor_source():
    """The server-less floor: a stream source with the connector's schema, offsets
    (``rows`` jobs planned as the connector plans them: all, or maxJobsPerTrigger a
    batch) and read tasks (``readersPerNode`` 2 for one node), whose tasks turn a
    canned ``GETJOB ... WITHCOUNTERS`` reply of 1000 jobs into Arrow batches with the
    connector's own ``stream_columns`` and ``arrow_batch``: what is left is Spark."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    from disquepy.spark.source import DisqueDataSource, node_readers

    class Part(InputPartition):
        def __init__(self, n: int) -> None:
            self.n = n

    class Reader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def __init__(self, opts: dict, schema) -> None:
            self.schema = schema
            self.total = int(opts["rows"])
            self.cap = int(opts.get("maxjobspertrigger", 0)) or None

        def initialOffset(self) -> dict:
            return {"planned": 0}

        def prepareForTriggerAvailableNow(self) -> None:
            pass

        def getDefaultReadLimit(self):
            return ReadMaxRows(self.cap) if self.cap else ReadAllAvailable()

        def latestOffset(self, start: dict, limit) -> dict:
            cap = limit.max_rows if isinstance(limit, ReadMaxRows) else self.total
            return {"planned": min(self.total, start["planned"] + cap)}

        def partitions(self, start: dict, end: dict) -> list:
            # the connector's split of one node's share into read tasks and chunks
            n = end["planned"] - start["planned"]
            return [Part(sum(k for _, k in chunks))
                    for _, chunks in node_readers("floor", n, 1000, 2)]

        def commit(self, end: dict) -> None:
            pass

        def read(self, part: Part):
            from disquepy.spark.rows import arrow_batch, stream_columns

            reply = [[b"bench", b"D-c386bbc4-BT3nvYWM20Rp3MT1jfVgmQve-05a1", BODY.encode(),
                      b"nacks", 0, b"additional-deliveries", 0]] * 1000
            left = part.n
            while left > 0:
                k = min(1000, left)
                yield arrow_batch(self.schema, stream_columns(reply[:k], "string", "f" * 40))
                left -= k

    class Floor(DataSource):
        @classmethod
        def name(cls) -> str:
            return "disquefloor"

        def schema(self) -> str:
            return DisqueDataSource({}).schema()

        def streamReader(self, schema):
            return Reader({k.lower(): v for k, v in self.options.items()}, schema)

    return Floor


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Spark connector vs plain client")
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--conns", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    # SIGTERM unwinds through the finally below (stopping Spark and the node), but only
    # once Spark is up: interrupted while it launches, pyspark leaves its JVM running
    asked: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: asked.append(signum))
    if a.quick:
        a.rows, a.rounds = 50_000, 2
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    tmp = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    fleet = Fleet(tmp / "servers")
    port = fleet.start("ours").port
    from pyspark.sql import SparkSession

    from disquepy.spark import register

    cap = max(1, a.rows // 4)
    res: dict[str, list[float]] = {k: [] for k in (
        "spark_write", "spark_write_nokeys", "plain_write", "plain_write_keys",
        "spark_read", "spark_read_running", "spark_read_capped", "spark_read_capped_running",
        "floor_read_running", "floor_read_capped_running", "plain_read")}
    spark = None
    try:
        spark = (SparkSession.builder.master(f"local[{a.conns}]").appName("bench-spark")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", str(a.conns)).getOrCreate())
        signal.signal(signal.SIGTERM, _on_sigterm)
        if asked:
            raise KeyboardInterrupt
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        spark.dataSource.register(floor_source())
        df = spark.range(0, a.rows, numPartitions=a.conns).selectExpr(
            f"'{BODY}' as body").cache()
        df.count()
        with multiprocessing.get_context("spawn").Pool(a.conns) as pool:
            # warm-up (JVM, Python workers), not counted
            spark_write(spark, df.limit(1000).repartition(a.conns), port, 1000, True, tmp)
            flush(port)
            fill(port, 1000)
            spark_read(spark, port, 1000, tmp, "w0")  # warm-up
            spark_read(spark, port, 1000, tmp, "w1", fmt="disquefloor")
            flush(port)
            for r in range(a.rounds):
                for side in (("spark", "plain") if r % 2 == 0 else ("plain", "spark")):
                    if side == "spark":
                        res["spark_write"].append(spark_write(spark, df, port, a.rows, True, tmp))
                        flush(port)
                        res["spark_write_nokeys"].append(
                            spark_write(spark, df, port, a.rows, False, tmp))
                        flush(port)
                        fill(port, a.rows)
                        whole, running = spark_read(spark, port, a.rows, tmp, f"{r}a")
                        res["spark_read"].append(whole)
                        res["spark_read_running"].append(running)
                        fill(port, a.rows)
                        whole, running = spark_read(spark, port, a.rows, tmp, f"{r}c", cap)
                        res["spark_read_capped"].append(whole)
                        res["spark_read_capped_running"].append(running)
                        flush(port)
                        res["floor_read_running"].append(spark_read(
                            spark, port, a.rows, tmp, f"{r}f", fmt="disquefloor")[1])
                        res["floor_read_capped_running"].append(spark_read(
                            spark, port, a.rows, tmp, f"{r}g", cap, fmt="disquefloor")[1])
                    else:
                        res["plain_write"].append(plain_write(pool, port, a.rows, a.conns,
                                                              False))
                        flush(port)
                        res["plain_write_keys"].append(plain_write(pool, port, a.rows,
                                                                   a.conns, True))
                        flush(port)
                        fill(port, a.rows)
                        res["plain_read"].append(plain_read(pool, port, a.rows, a.conns))
                        flush(port)
                print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}"
                                                      for k, v in res.items()), flush=True)
    finally:
        if spark is not None:
            spark.stop()
        fleet.__exit__()
        shutil.rmtree(tmp, ignore_errors=True)
    best = {k: max(v) for k, v in res.items()}
    plain = best["plain_read"]
    w = best["spark_write"] / best["plain_write_keys"]
    w2 = best["spark_write_nokeys"] / best["plain_write"]
    rr = best["spark_read_running"] / plain
    ratios = {"write_keys": w, "write_nokeys": w2, "read_running": rr,
              "read_whole": best["spark_read"] / plain,
              "read_capped_running": best["spark_read_capped_running"] / plain,
              "floor_running": best["floor_read_running"] / plain,
              "floor_capped_running": best["floor_read_capped_running"] / plain}
    print(f"\n{a.rows:,} rows/jobs, {a.conns} connections, best of {a.rounds} rounds")
    print("| Measure | Spark | plain client | ratio | target |")
    print("|---|---:|---:|---:|---|")
    print(f"| batch write rows/s (IDEMPOTENT keys) | {best['spark_write']:,.0f} | "
          f"{best['plain_write_keys']:,.0f} | {w:.2f}x | >= 0.8x: "
          f"{'PASS' if w >= 0.8 else 'FAIL'} |")
    print(f"| batch write rows/s (no keys) | {best['spark_write_nokeys']:,.0f} | "
          f"{best['plain_write']:,.0f} | {w2:.2f}x | (information) |")
    print(f"| stream read jobs/s, default options, from the first trigger | "
          f"{best['spark_read_running']:,.0f} | {plain:,.0f} | {rr:.2f}x | "
          f">= 0.5x: {'PASS' if rr >= 0.5 else 'FAIL'} |")
    print(f"| stream read jobs/s, default options, whole query (start included) | "
          f"{best['spark_read']:,.0f} | {plain:,.0f} | {ratios['read_whole']:.2f}x | "
          f"(information) |")
    print(f"| stream read jobs/s, maxJobsPerTrigger {cap:,}, from the first trigger | "
          f"{best['spark_read_capped_running']:,.0f} | {plain:,.0f} | "
          f"{ratios['read_capped_running']:.2f}x | (information) |")
    print(f"| floor (no server), default options, from the first trigger | "
          f"{best['floor_read_running']:,.0f} | {plain:,.0f} | {ratios['floor_running']:.2f}x | "
          f"(ceiling) |")
    print(f"| floor (no server), maxJobsPerTrigger {cap:,}, from the first trigger | "
          f"{best['floor_read_capped_running']:,.0f} | {plain:,.0f} | "
          f"{ratios['floor_capped_running']:.2f}x | (ceiling) |")
    targets = [
        {"name": "Spark batch write >= 0.8x the plain client (IDEMPOTENT keys, best round)",
         "value": w, "pass": w >= 0.8, "shown": f"{w:.2f}x",
         "note": f"median {statistics.median(res['spark_write']):,.0f} vs "
                 f"{statistics.median(res['plain_write_keys']):,.0f} rows/s"},
        {"name": "Spark stream read >= 0.5x the plain consumer (default options, running "
                 "rate, best round)",
         "value": rr, "pass": rr >= 0.5, "shown": f"{rr:.2f}x",
         "note": f"ceiling (server-less floor) {ratios['floor_running']:.2f}x; "
                 f"with maxJobsPerTrigger {cap:,}: {ratios['read_capped_running']:.2f}x, "
                 f"ceiling {ratios['floor_capped_running']:.2f}x"},
    ]
    for t in targets:
        print(f"  {'PASS' if t['pass'] else 'FAIL'}  {t['name']}: {t['shown']}  ({t['note']})")
    if a.json:
        Path(a.json).write_text(json.dumps({
            "rows": a.rows, "conns": a.conns, "per_trigger": cap, "rounds": res, "best": best,
            "median": {k: statistics.median(v) for k, v in res.items()},
            "ratios": ratios, "targets": targets}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
