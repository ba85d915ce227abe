"""The "disque" stream read as a consumer group (option group) against real servers."""

from __future__ import annotations

import threading
import time

import pytest
from spark_support import wait_for

from disquepy.spark._nodes import lower_options
from disquepy.spark.groups import DisqueGroupStreamReader


def qadd(cluster, queue: str, n: int, expire: int = 600) -> list[str]:
    """n events spread round-robin over the cluster's nodes (pipelined)."""
    pipes = [c.pipeline(transaction=False) for c in cluster.clients]
    for i in range(n):
        pipes[i % len(pipes)].execute_command("QADD", queue, expire, f"ev-{i}")
    return [eid.decode() for p in pipes for eid in p.execute()]


def group_stream(spark, nodes: str, queue: str, group: str, **opts):
    r = (spark.readStream.format("disque").option("nodes", nodes).option("queue", queue)
         .option("group", group))
    for k, v in opts.items():
        r = r.option(k, str(v))
    return r.load()


def status(cluster, queue: str, group: str) -> dict[str, int]:
    """The group's counts on the first node (every node holds every event: R = 3)."""
    reply = cluster.clients[0].execute_command("QSTATUS", queue, "GROUPS", group)
    fields = reply[0][1][1]
    return {k.decode(): int(v) for k, v in zip(fields[::2], fields[1::2], strict=True)}


def test_group_options_are_checked(single):
    base = {"nodes": single.nodes, "queue": "q"}
    ok = DisqueGroupStreamReader(lower_options({**base, "group": "g", "lease": "2.5",
                                                "maxEventsPerTrigger": "10"}), None)
    assert (ok.group, ok.lease, ok.max_events) == ("g", 2.5, 10)
    bad = [({"group": "g", "maxJobsPerTrigger": "5"}, "use maxEventsPerTrigger"),
           ({"group": "g", "workingInterval": "5"}, "set lease"),
           ({"group": "g", "states": "queued"}, "does not apply"),
           ({"group": "g", "lease": "0"}, "more than 0"),
           ({"group": "g", "lease": "soon"}, "seconds"),
           ({"group": "g", "maxEventsPerTrigger": "0"}, "at least 1"),
           ({"group": "g", "maxDeliveries": "0"}, "at least 1"),
           ({"group": ""}, "not empty"),
           ({"lease": "5"}, "lease needs option group"),
           ({"group": "g", "groop": "x"}, "groop"),
           ({"group": "g", "queue": ""}, "needs option queue")]
    for extra, msg in bad:
        with pytest.raises(ValueError, match=msg):
            DisqueGroupStreamReader(lower_options({**base, **extra}), None)


def test_batch_read_with_group_is_refused(spark, single):
    with pytest.raises(Exception, match="use spark.readStream"):
        (spark.read.format("disque").option("nodes", single.nodes).option("queue", "q")
         .option("group", "g").load().collect())


@pytest.mark.timeout(200)
def test_two_groups_each_get_every_event_acked_after_commit(spark, cluster3, tmp_path):
    ids = set(qadd(cluster3, "gs1", 300))
    seen: dict[str, list[str]] = {"a": [], "b": []}
    pending_during_batch: list[int] = []

    def collector(group):
        def on_batch(df, batch_id):
            rows = df.collect()
            # a second action on the batch reads the same events (leased on the driver)
            assert sorted(r.id for r in df.collect()) == sorted(r.id for r in rows)
            assert all(r.group == group and r.deliveries == 1 for r in rows)
            assert all(r.body.startswith("ev-") and r.queue == "gs1" for r in rows)
            if group == "a":
                pending_during_batch.append(status(cluster3, "gs1", "a")["inprogress"])
            seen[group] += [r.id for r in rows]
        return on_batch

    for g in ("a", "b"):
        q = (group_stream(spark, cluster3.nodes, "gs1", g, maxEventsPerTrigger=120)
             .writeStream.foreachBatch(collector(g))
             .option("checkpointLocation", str(tmp_path / f"ck-{g}"))
             .trigger(availableNow=True).start())
        q.awaitTermination(120)
        assert not q.isActive and q.exception() is None
    for g in ("a", "b"):
        assert len(seen[g]) == 300 and set(seen[g]) == ids, g
    # held (leased, not acked) while each batch ran; at most 120 a batch
    assert pending_during_batch and all(0 < n <= 120 for n in pending_during_batch)
    # acked once committed, the last batch too (availableNow calls no commit for it)
    for g in ("a", "b"):
        wait_for(lambda g=g: status(cluster3, "gs1", g)["done"] == 300, what=f"{g} done")
    # a third group was never read: it still has every event
    assert status(cluster3, "gs1", "c")["available"] == 300


@pytest.mark.timeout(200)
def test_restart_from_checkpoint_loses_no_unacknowledged_event(spark, cluster3, tmp_path):
    ids = set(qadd(cluster3, "gs2", 200))
    ck = str(tmp_path / "ck")
    first: dict[int, list[str]] = {}

    def crash_in_batch_1(df, batch_id):
        first[batch_id] = [r.id for r in df.collect()]
        if batch_id == 1:
            raise RuntimeError("driver dies mid-batch")

    q = (group_stream(spark, cluster3.nodes, "gs2", "g", maxEventsPerTrigger=80, lease=3)
         .writeStream.foreachBatch(crash_in_batch_1).option("checkpointLocation", ck)
         .trigger(availableNow=True).start())
    with pytest.raises(Exception, match="driver dies mid-batch"):
        q.awaitTermination(120)
    assert sorted(first) == [0, 1] and all(len(b) == 80 for b in first.values())
    st = status(cluster3, "gs2", "g")
    assert st["done"] == 80  # batch 0 committed and acked; batch 1 was not
    time.sleep(3.5)  # batch 1's leases run out: its events go back to the group

    second: dict[int, list] = {}

    def record(df, batch_id):
        second[batch_id] = [(r.id, r.deliveries) for r in df.collect()]

    q = (group_stream(spark, cluster3.nodes, "gs2", "g", maxEventsPerTrigger=80, lease=3)
         .writeStream.foreachBatch(record).option("checkpointLocation", ck)
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    assert second[1] == []  # replayed batch 1: its events were leased by the dead driver
    got = {i for b in second.values() for i, _ in b}
    assert set(first[0]) | got == ids and not got & set(first[0])
    # batch 1's events came back, delivered a second time
    again = {i: d for b in second.values() for i, d in b if i in set(first[1])}
    assert set(again) == set(first[1]) and set(again.values()) == {2}
    wait_for(lambda: status(cluster3, "gs2", "g")["done"] == 200, what="all done")


@pytest.mark.timeout(200)
def test_long_batch_keeps_its_leases_with_qworking(spark, single, tmp_path):
    ids = set(qadd(single, "gs3", 50))
    seen: list[tuple[str, int]] = []
    lock = threading.Lock()

    def slow(df, batch_id):
        rows = df.collect()
        time.sleep(5)  # longer than the lease: only QWORKING keeps the events ours
        with lock:
            seen.extend((r.id, r.deliveries) for r in rows)

    q = (group_stream(spark, single.nodes, "gs3", "g", lease=2).writeStream
         .foreachBatch(slow).option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    # delivered once each: no lease ran out while the batch ran
    assert sorted(i for i, _ in seen) == sorted(ids) and {d for _, d in seen} == {1}
    st = status(single, "gs3", "g")
    assert st["done"] == 50 and st["redo"] == 0
