"""The "disque" Spark data source against real server processes (1 node and 3 nodes)."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter

import pytest
from spark_support import wait_for

from disquepy.spark._nodes import discover, lower_options
from disquepy.spark.source import (
    DisqueBatchWriter,
    DisqueSnapshotReader,
    DisqueStreamReader,
    _AddJobSpec,
    chunk_tokens,
    marker_batch,
    node_readers,
    share,
    stream_columns,
    write_partition,
)


def add_jobs(cluster, queue: str, n: int, **opts) -> list[str]:
    """n jobs spread round-robin over the cluster's nodes (pipelined)."""
    extra = [x for k, v in opts.items() for x in (k.upper(), v)]
    pipes = [c.pipeline(transaction=False) for c in cluster.clients]
    for i in range(n):
        pipes[i % len(pipes)].execute_command("ADDJOB", queue, f"job-{i}", 0, *extra)
    return [jid.decode() for p in pipes for jid in p.execute()]


# ------------------------------------------------------------------ pure helpers


def test_share_splits_a_cap_fairly_and_never_exceeds_qlen():
    assert share({"a": 5, "b": 0, "c": 7}, None) == {"a": 5, "c": 7}
    assert share({"a": 5, "b": 100, "c": 7}, 12) == {"a": 4, "b": 4, "c": 4}
    got = share({"a": 2, "b": 100, "c": 7}, 20)
    assert sum(got.values()) == 20 and got["a"] == 2 and got["b"] >= got["c"]
    got = share({"a": 1, "b": 1, "c": 1}, 2)
    assert sum(got.values()) == 2 and all(v == 1 for v in got.values())


def test_chunk_tokens_cover_the_count_exactly():
    assert chunk_tokens("t", 2500, 1000) == [("t:0", 1000), ("t:1", 1000), ("t:2", 500)]
    assert chunk_tokens("t", 0, 1000) == []


def test_stream_columns_from_getjob_replies():
    reply = [[b"q1", b"D-1", b"a\xff", b"nacks", 2, b"additional-deliveries", 3],
             [b"q2", b"D-2", b"b", b"additional-deliveries", 5, b"nacks", 1],  # other order
             [b"q1", b"D-3", b"c", b"nacks", 0, b"additional-deliveries", 0]]
    cols = stream_columns(reply, "string", "n1")
    assert cols == [["D-1", "D-2", "D-3"], ["q1", "q2", "q1"], ["a\ufffd", "b", "c"],
                    ["active"] * 3, [None] * 3, [2, 1, 0], [3, 5, 0], ["n1"] * 3]
    assert stream_columns(reply, "binary", "n1")[2] == [b"a\xff", b"b", b"c"]


def test_node_readers_deal_every_chunk_once():
    # one task when there is one chunk: the marker keeps the batch's name
    assert node_readers("spark:s:3", 500, 1000, 2) == [("spark:s:3", [("spark:s:3:0", 500)])]
    assert node_readers("spark:s:3", 0, 1000, 2) == []
    for count, readers in ((2500, 2), (7000, 3), (3000, 8), (10, 1)):
        tasks = node_readers("spark:s:3", count, 1000, readers)
        assert len(tasks) == min(readers, -(-count // 1000))
        dealt = [c for _, chunks in tasks for c in chunks]
        assert dealt == chunk_tokens("spark:s:3", count, 1000)  # in order, none twice
        sizes = [len(chunks) for _, chunks in tasks]
        assert max(sizes) - min(sizes) <= 1
        assert len({m for m, _ in tasks}) == len(tasks)
        assert all(marker_batch(m) == 3 for m, _ in tasks)


def test_options_are_case_insensitive_and_validated(single):
    from pyspark.sql.types import StringType, StructType

    schema = (StructType().add("Body", StringType()).add("Q", StringType())
              .add("K", StringType()))
    opts = lower_options({"NODES": f"127.0.0.1:{single.servers[0].port}",
                          "QueueColumn": "q", "BODYCOLUMN": "body", "keyColumn": "K",
                          "Replicate": "1", "RETRY": "30", "Async": "TRUE"})
    spec = _AddJobSpec.from_options(opts, schema)
    assert (spec.queue_column, spec.body_column, spec.key_column) == ("Q", "Body", "K")
    assert spec.options == {"replicate": 1, "retry": 30, "async_": True}
    assert [n.id for n in discover(opts)] == single.ids
    with pytest.raises(ValueError, match="queue"):
        _AddJobSpec.from_options({}, schema)
    with pytest.raises(ValueError, match="not a column"):
        _AddJobSpec.from_options({"queue": "q", "bodycolumn": "nope"}, schema)
    spec = _AddJobSpec.from_options({"queue": "q"}, schema)
    assert (spec.sync_connections(1), spec.sync_connections(3)) == (1, 16)
    for one_copy in ({"replicate": "1"}, {"async": "true"}):
        spec = _AddJobSpec.from_options({"queue": "q", **one_copy}, schema)
        assert spec.sync_connections(3) == 1
    for bad in ("0", "257"):
        with pytest.raises(ValueError, match="connections must be between 1 and 256"):
            _AddJobSpec.from_options({"queue": "q", "connections": bad}, schema)


def test_unknown_options_are_refused_naming_the_valid_ones(single):
    """A misspelled option is an error (it used to be ignored), for every use."""
    from pyspark.sql.types import StringType, StructType

    schema = StructType().add("body", StringType())
    with pytest.raises(ValueError, match=r"the disque sink: unknown option 'replicat' "
                       r"\(did you mean 'replicate'\?\); valid options: nodes, password, "
                       r"user, tls, tlsCaCert, tlsCert, tlsKey, queue, .*batchSize"):
        _AddJobSpec.from_options(lower_options({"queue": "q", "Replicat": "2"}), schema)
    with pytest.raises(ValueError, match="the disque batch source: unknown option "
                       "'qeue'.*did you mean 'queue'"):
        DisqueSnapshotReader({"nodes": single.nodes, "qeue": "q"}, schema)
    with pytest.raises(ValueError, match="the disque stream source: unknown option "
                       "'maxjobsperbatch'.*maxJobsPerTrigger"):
        DisqueStreamReader({"queue": "q", "maxjobsperbatch": "10"}, schema)
    # what Spark itself passes along (writeStream's checkpoint, save(path)) is no typo
    spark_set = lower_options({"queue": "q", "checkpointLocation": "/ck", "path": "p"})
    assert _AddJobSpec.from_options(spark_set, schema).queue == "q"
    # a write option makes no sense on a read, and the other way round
    with pytest.raises(ValueError, match="unknown option 'replicate'"):
        DisqueSnapshotReader({"queue": "q", "replicate": "2"}, schema)
    with pytest.raises(ValueError, match="unknown option 'fetchsize'"):
        _AddJobSpec.from_options({"queue": "q", "fetchsize": "2"}, schema)


def test_a_batch_read_needs_a_queue_like_a_stream_read(single):
    from pyspark.sql.types import StringType, StructType

    schema = StructType().add("body", StringType())
    for cls, what in ((DisqueSnapshotReader, "batch"), (DisqueStreamReader, "stream")):
        with pytest.raises(ValueError, match=f"the disque {what} source needs option queue"):
            cls({"nodes": single.nodes}, schema)


# ------------------------------------------------------------------ batch write / read


@pytest.mark.timeout(120)
def test_batch_write_each_partition_to_its_node_then_snapshot_read(spark, cluster3, tmp_path):
    report = tmp_path / "report.json"
    df = spark.range(0, 1200, numPartitions=6).selectExpr(
        "named_struct('n', id, 'tag', 'x') as body")
    (df.write.format("disque").option("Nodes", cluster3.nodes).option("QUEUE", "orders")
     .option("replicate", "2").option("reportFile", str(report)).mode("append").save())
    rep = json.loads(report.read_text())
    assert rep["written"] == 1200
    assert [p["written"] for p in rep["partitions"]] == [200] * 6
    # partition p went to the p-th node of the sorted IDs (p mod 3): 400 jobs each
    order = sorted(cluster3.ids)
    assert [p["node"] for p in rep["partitions"]] == [order[p % 3] for p in range(6)]
    by_id = cluster3.by_id()
    assert [int(by_id[nid].execute_command("QLEN", "orders")) for nid in order] == [400] * 3

    snap = (spark.read.format("disque").option("nodes", cluster3.nodes)
            .option("queues", "orders").load())
    assert snap.rdd.getNumPartitions() == 3
    rows = snap.collect()
    # one row per copy: at least two copies of each job (a slow replica may leave a
    # third one, which Disque allows), each from a different node
    copies = Counter(r.id for r in rows)
    assert len(copies) == 1200 and min(copies.values()) >= 2
    assert len({(r.id, r.node) for r in rows}) == len(rows)
    assert {json.loads(r.body)["n"] for r in rows} == set(range(1200))
    assert {r.state for r in rows} <= {"queued", "active"}
    assert sum(r.state == "queued" for r in rows) == 1200
    primary = (spark.read.format("disque").option("nodes", cluster3.nodes)
               .option("copies", "primary").option("queue", "orders").load())
    assert primary.count() == 1200
    assert primary.select("id").distinct().count() == 1200
    # nothing was consumed by reading
    assert cluster3.qlen("orders") == 1200


def test_same_partition_written_twice_with_the_same_keys_enqueues_once(single):
    """What a task retry does: same partition, same node, same keys."""
    import pyarrow as pa
    from pyspark.sql.types import StringType, StructType

    schema = StructType().add("body", StringType())
    opts = lower_options({"nodes": single.nodes, "queue": "retry", "batchSize": "64",
                          "connections": "5"})
    writer = DisqueBatchWriter(opts, schema)
    batch = pa.RecordBatch.from_pydict({"body": [f"r{i}" for i in range(300)]})
    prefix = f"{writer.write_id}:4:"
    c = single.servers[0].client()

    def connections() -> int:
        return int(c.info("stats")["total_connections_received"])

    before = connections()
    node, n1 = write_partition(writer.nodes, writer.spec, prefix, 4, [batch])
    assert (node.id, n1) == (single.ids[0], 300)
    # the rows went out over several connections at once (one alone moves one
    # replicated job per round trip), at most the 5 asked for: a thread whose slice
    # is done before another starts hands its connection on, so a fast node may see
    # fewer than 5
    assert 2 <= connections() - before <= 5
    # the retry fails half-way in the first attempt's shoes: write a prefix again...
    _, n2 = write_partition(writer.nodes, writer.spec, prefix, 4, [batch.slice(0, 150)])
    # ...and the whole partition again
    _, n3 = write_partition(writer.nodes, writer.spec, prefix, 4, [batch])
    assert (n2, n3) == (150, 300)
    assert single.qlen("retry") == 300
    # a different write (new write id) is new data
    _, n4 = write_partition(writer.nodes, writer.spec, "other:4:", 4, [batch.slice(0, 10)])
    assert single.qlen("retry") == 310 and n4 == 10


@pytest.mark.timeout(120)
@pytest.mark.parametrize("idempotent", [True, False])
def test_spark_task_retry_does_not_enqueue_twice(spark, single, tmp_path, idempotent):
    """A write task that dies after writing part of its rows is retried by Spark; with
    idempotency keys the retry adds nothing twice (the control run without keys shows
    that the first attempt did write rows before failing)."""
    from pyspark.sql.functions import udf

    @udf("string", useArrow=False)
    def fail_once(i):
        from pyspark import TaskContext

        tc = TaskContext.get()
        if tc.partitionId() == 1 and tc.attemptNumber() == 0 and i == 1900:
            import time

            time.sleep(3)  # let the writer send the rows before this one
            raise RuntimeError("simulated executor loss")
        return f"row-{i}-" + "x" * 300  # big enough to get through the UDF's buffers

    report = tmp_path / "report.json"
    df = spark.range(0, 2000, numPartitions=2).select(fail_once("id").alias("body"))
    (df.write.format("disque").option("nodes", single.nodes).option("queue", "rq")
     .option("batchSize", "100").option("idempotent", str(idempotent))
     .option("reportFile", str(report)).mode("append").save())
    rep = json.loads(report.read_text())
    assert rep["written"] == 2000
    assert [(p["partition"], p["attempt"]) for p in rep["partitions"]] == [(0, 0), (1, 1)]
    if idempotent:
        assert single.qlen("rq") == 2000
        bodies = [j[2] for j in single.clients[0].execute_command("QPEEK", "rq", 5000)]
        assert len(set(bodies)) == 2000
    else:
        assert single.qlen("rq") > 2000


# ------------------------------------------------------------------ streaming read


def stream(spark, nodes: str, queue: str, **opts):
    r = spark.readStream.format("disque").option("nodes", nodes).option("queue", queue)
    for k, v in opts.items():
        r = r.option(k, str(v))
    return r.load()


@pytest.mark.timeout(150)
def test_stream_available_now_reads_everything_once_and_acks_after_commit(
        spark, cluster3, tmp_path):
    ids = set(add_jobs(cluster3, "s1", 900))
    assert cluster3.qlen("s1") == 900
    seen: list[tuple[int, list[str]]] = []
    unacked_during_batch: list[bool] = []

    def on_batch(df, batch_id):
        got = [r.id for r in df.select("id").collect()]
        # a second action on the same batch re-reads the same jobs (delivery tokens)
        assert df.count() == len(got)
        unacked_during_batch.append(all(cluster3.exists(j) for j in got))
        seen.append((batch_id, got))

    q = (stream(spark, cluster3.nodes, "s1", maxJobsPerTrigger=250).writeStream
         .foreachBatch(on_batch).option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert not q.isActive
    got = [j for _, batch in seen for j in batch]
    assert len(got) == 900 and set(got) == ids
    assert all(len(b) <= 250 for _, b in seen) and len(seen) >= 4
    assert all(unacked_during_batch)
    # the last batch too (availableNow never calls commit for it): everything acked
    wait_for(lambda: cluster3.jobs() == 0, what="every job acked")


@pytest.mark.timeout(150)
def test_stream_killed_mid_batch_restarts_from_checkpoint_without_loss(
        spark, cluster3, tmp_path):
    ids = set(add_jobs(cluster3, "s2", 600, retry=300))
    ck = str(tmp_path / "ck")
    first: dict[int, list[str]] = {}

    def crash_in_batch_1(df, batch_id):
        got = sorted(r.id for r in df.collect())
        first[batch_id] = got
        if batch_id == 1:
            raise RuntimeError("driver dies mid-batch")

    q = (stream(spark, cluster3.nodes, "s2", maxJobsPerTrigger=200).writeStream
         .foreachBatch(crash_in_batch_1).option("checkpointLocation", ck)
         .trigger(availableNow=True).start())
    with pytest.raises(Exception, match="driver dies mid-batch"):
        q.awaitTermination(120)
    assert sorted(first) == [0, 1]
    # batch 0 was committed and is acked (on a thread while batch 1 ran); batch 1
    # failed: none of its jobs acked
    wait_for(lambda: not any(cluster3.exists(j) for j in first[0]), what="batch 0 acked")
    assert all(cluster3.exists(j) for j in first[1])
    assert cluster3.qlen("s2") == 600 - 400

    second: dict[int, list[str]] = {}

    def record(df, batch_id):
        second[batch_id] = sorted(r.id for r in df.collect())

    q = (stream(spark, cluster3.nodes, "s2", maxJobsPerTrigger=200).writeStream
         .foreachBatch(record).option("checkpointLocation", ck)
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    # batch 1 replayed from the checkpoint reads exactly the jobs it had delivered
    assert second[1] == first[1]
    processed = set(first[0]) | {j for b in second.values() for j in b}
    assert processed == ids
    wait_for(lambda: cluster3.jobs() == 0, what="every job acked")


@pytest.mark.timeout(150)
def test_stream_processing_time_consumes_jobs_added_while_running(spark, single, tmp_path):
    add_jobs(single, "s3", 100)
    seen: list[str] = []
    lock = threading.Lock()

    def on_batch(df, batch_id):
        rows = df.collect()
        with lock:
            seen.extend(r.body for r in rows)

    q = (stream(spark, single.nodes, "s3").writeStream.foreachBatch(on_batch)
         .option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(processingTime="500 milliseconds").start())
    try:
        wait_for(lambda: len(seen) >= 100, timeout=90, what="first jobs")
        c = single.clients[0]
        for i in range(100, 150):
            c.execute_command("ADDJOB", "s3", f"job-{i}", 0)
        wait_for(lambda: len(seen) >= 150, timeout=60, what="jobs added later")
        # the last batch is acked at the next trigger (latestOffset after its commit)
        wait_for(lambda: single.jobs() == 0, timeout=30, what="every job acked")
    finally:
        q.stop()
    assert sorted(seen) == sorted(f"job-{i}" for i in range(150))


@pytest.mark.timeout(150)
def test_stream_read_to_stream_write_moves_every_job_once(spark, cluster3, tmp_path):
    add_jobs(cluster3, "in", 300)
    out = (stream(spark, cluster3.nodes, "in")
           .selectExpr("concat('done-', body) as body")
           .writeStream.format("disque").option("nodes", cluster3.nodes)
           .option("queue", "out").option("checkpointLocation", str(tmp_path / "ck"))
           .trigger(availableNow=True).start())
    out.awaitTermination(120)
    assert cluster3.qlen("out") == 300
    assert cluster3.qlen("in") == 0
    bodies = {j[2] for c in cluster3.clients for j in c.execute_command("QPEEK", "out", 1000)}
    assert bodies == {f"done-job-{i}".encode() for i in range(300)}


@pytest.mark.timeout(150)
def test_long_batch_keeps_its_jobs_with_working(spark, single, tmp_path):
    """A batch that takes 1.5 times the jobs' retry: the driver's WORKING keeps them from
    being queued again (without it all 20 would be back within 4 s of delivery)."""
    add_jobs(single, "s4", 20, retry=4)
    samples: list[tuple[float, int]] = []

    def slow(df, batch_id):
        ids = [r.id for r in df.collect()]
        t0 = time.monotonic()
        while time.monotonic() - t0 < 6:
            samples.append((time.monotonic() - t0,
                            int(single.clients[0].execute_command("QLEN", "s4"))))
            time.sleep(0.25)
        assert len(ids) == 20

    q = (stream(spark, single.nodes, "s4", workingInterval=1).writeStream
         .foreachBatch(slow).option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert not q.isActive and q.exception() is None
    # the first WORKING goes out within ~0.5 s of the read; from then on nothing is queued
    late = [n for t, n in samples if t >= 1.5]
    assert len(late) >= 8 and max(late) == 0
    wait_for(lambda: single.jobs() == 0, what="every job acked")


@pytest.mark.timeout(120)
def test_binary_bodies_round_trip(spark, single):
    blobs = [bytes([i, 255 - i, 0]) for i in range(50)]
    df = spark.createDataFrame([(b,) for b in blobs], "body binary")
    (df.write.format("disque").option("nodes", single.nodes).option("queue", "bin")
     .mode("append").save())
    got = (spark.read.format("disque").option("nodes", single.nodes).option("queue", "bin")
           .option("bodyFormat", "binary").load().select("body").collect())
    assert sorted(bytes(r.body) for r in got) == sorted(blobs)
