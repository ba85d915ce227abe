"""disquepy.spark.analytics on a hand-made event log and on a real server's event log."""

from __future__ import annotations

import json
import struct
import time

import pytest
from spark_support import wait_for

from disquepy.spark.analytics import dead_letter_regex, pick_bucket, run_analytics

N1 = "a" * 40
N2 = "b" * 40
# a minute ago, on a second: the hand-made log and the real node's share 1 s buckets
T0 = (int(time.time()) - 60) * 1000


def ev(ts, event, job, queue, node=N1, **extra):
    return json.dumps({"ts": T0 + ts, "event": event, "node": node, "job": job,
                       "queue": queue, **extra})


def fixture_lines() -> list[str]:
    added = {"ttl": 3600, "retry": 5, "delay": 0, "replicate": 2, "size": 10}
    d = {"nacks": 0, "additional_deliveries": 0}
    return [
        # j1: queued 0, delivered 100, acked 300
        ev(0, "added", "j1", "emails", **added), ev(0, "queued", "j1", "emails"),
        ev(100, "delivered", "j1", "emails", **d), ev(300, "acked", "j1", "emails"),
        # j2: delivered 200, nacked 250 (queued again), delivered 450, acked 1450
        ev(0, "added", "j2", "emails", **added), ev(0, "queued", "j2", "emails"),
        ev(200, "delivered", "j2", "emails", **d), ev(250, "nacked", "j2", "emails"),
        ev(250, "queued", "j2", "emails"), ev(450, "delivered", "j2", "emails", **d),
        ev(1450, "acked", "j2", "emails"),
        # j3: three deliveries (one after a retry on another node), a nack, never acked
        ev(0, "added", "j3", "emails", **added), ev(0, "queued", "j3", "emails"),
        ev(100, "delivered", "j3", "emails", **d),
        ev(5100, "queued", "j3", "emails", node=N2),
        ev(5200, "delivered", "j3", "emails", node=N2, **d),
        ev(5300, "nacked", "j3", "emails", node=N2), ev(5300, "queued", "j3", "emails", node=N2),
        ev(5400, "delivered", "j3", "emails", node=N2, **d),
        # j4: never consumed, expired on both nodes holding a copy
        ev(1000, "added", "j4", "reports", **added), ev(1000, "queued", "j4", "reports"),
        ev(9000, "expired", "j4", "reports"), ev(9001, "expired", "j4", "reports", node=N2),
        # j5: queued on N1 at 0, moved by federation to N2 (queued there at 30000),
        # delivered at 30100: it waited 30.1 s, not 100 ms
        ev(0, "added", "j5", "moved", **added), ev(0, "queued", "j5", "moved"),
        ev(30000, "queued", "j5", "moved", node=N2),
        ev(30100, "delivered", "j5", "moved", node=N2, **d),
        ev(30200, "acked", "j5", "moved", node=N2),
        # s1-s3: added, never delivered: a backlog of 3 jobs still queued at the end
        *(x for i in (1, 2, 3) for x in (ev(2000, "added", f"s{i}", "stuck", **added),
                                         ev(2000, "queued", f"s{i}", "stuck"))),
        # a worker with back-off: w1 failed, re-added as w2 (delayed 1 s) and acked; w2
        # failed too and went to the dead-letter queue "work:dead"
        ev(0, "added", "w1", "work", **added), ev(0, "queued", "w1", "work"),
        ev(10, "delivered", "w1", "work", **d), ev(20, "added", "w2", "work", **added),
        ev(20, "acked", "w1", "work"), ev(1020, "queued", "w2", "work"),
        ev(1030, "delivered", "w2", "work", **d), ev(1040, "added", "d1", "work:dead", **added),
        ev(1040, "queued", "d1", "work:dead"), ev(1041, "acked", "w2", "work"),
        # the Spark source's bookkeeping: not a user queue
        ev(50, "added", "m1", "__disquepy_spark_marks__:abc", **added),
    ]


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_bucket_keeps_the_history_within_120_points():
    assert pick_bucket(60_000) == 1
    assert pick_bucket(3_600_000) == 30
    assert pick_bucket(40 * 86_400_000) == 86400


def test_dead_letter_queue_names_map_to_their_queue():
    import re

    assert re.match(dead_letter_regex(), "emails:dead").group(1) == "emails"
    assert re.match(dead_letter_regex(), "emails") is None
    assert re.match(dead_letter_regex("dlq.{queue}.x"), "dlq.a:b.x").group(1) == "a:b"
    with pytest.raises(ValueError, match="no {queue} field"):
        dead_letter_regex("dead")


def chart_input(names: list[str]) -> tuple[dict, list]:
    """What _chart gets for queues with the same traffic (their lines would coincide):
    60 added and 40 acked in 2 s each; "q:dead" queues are dead-letter queues."""
    queues, rows = {}, []
    for q in names:
        queues[q] = dict(added=60, acked=40, backlog=20, queued=20, nack_rate=0.1,
                         dead_letter_rate=0.0, **{f"{k}_p{p}": 10.0 * p for k in
                                                  ("wait_ms", "proc_ms") for p in (50, 90, 99)})
        rows += [dict(queue=q, bucket=1000 + b, added=30, acked=20, backlog=10 * (b + 1),
                      queued=10 * (b + 1)) for b in (0, 1)]
    queues["never"] = dict(queues[names[0]], acked=0, **{f"{k}_p{p}": None for k in
                                                        ("wait_ms", "proc_ms") for p in (50, 90, 99)})
    return queues, rows


def test_chart_draws_each_queue_on_axes_of_its_own(tmp_path):
    """Queues with the same traffic drew on top of each other in one throughput and one
    backlog panel, so all but the last were hidden: each drawn queue has its own row.
    Only the 6 busiest are drawn, dead-letter queues count in their queue's rate, and
    every latency row, a queue never delivered included, lies inside its axes."""
    from matplotlib.colors import to_hex

    from disquepy.spark.analytics import COLORS, _chart

    names = [f"queue-{i}" for i in range(7)] + ["queue-0:dead"]
    queues, rows = chart_input(names)
    fig = _chart(tmp_path / "q.png", queues, rows, 1)
    assert png_size((tmp_path / "q.png").read_bytes())[0] == 1400
    drawn = {}  # queue colour -> the axes with a line of that colour
    for ax in fig.axes:
        colours = {to_hex(ln.get_color()) for ln in ax.get_lines()} & set(COLORS)
        assert len(colours) <= 1, (ax.get_title("left"), colours)
        for c in colours:
            drawn.setdefault(c, []).append(ax)
    assert len(drawn) == 6 and all(len(axes) == 2 for axes in drawn.values())
    lat = next(ax for ax in fig.axes if ax.get_title("left").startswith("Wait"))
    ticks = [t.get_text() for t in lat.get_yticklabels()]
    assert len(ticks) == 12 and not any(":dead" in t for t in ticks)
    lo, hi = sorted(lat.get_ylim())
    assert lo <= -0.4 and hi >= len(ticks) - 0.6
    # a queue with nothing delivered: its row says so, inside the axes
    queues, rows = chart_input(["only"])
    queues = {"never": queues["never"]}
    fig = _chart(tmp_path / "one.png", queues, [dict(r, queue="never") for r in rows], 1)
    lat = next(ax for ax in fig.axes if ax.get_title("left").startswith("Wait"))
    assert [t.get_text() for t in lat.texts] == ["no data", "no data"]
    assert all(sorted(lat.get_ylim())[0] < t.get_position()[1] < sorted(lat.get_ylim())[1]
               for t in lat.texts)
    _chart(tmp_path / "none.png", {}, [], 1)  # an empty log still gives a chart


def real_server_events(base) -> None:
    """A real node with the event log on: queue "fast" (40 jobs acked), queue "flaky"
    (5 jobs nacked three times each, never acked), queue "failing" (3 jobs a real worker
    retries once with back-off, then dead-letters to "failing:dead")."""
    from support import Server

    from disquepy.worker import Backoff, Worker

    s = Server(base, "--event-log", "yes").start()
    try:
        c = s.client()
        for i in range(40):
            c.execute_command("ADDJOB", "fast", f"f{i}", 0)
        for i in range(5):
            c.execute_command("ADDJOB", "flaky", f"x{i}", 0, "RETRY", 1)
        jobs = c.execute_command("GETJOB", "COUNT", 40, "FROM", "fast")
        c.execute_command("ACKJOB", *[j[1] for j in jobs])
        for _ in range(3):
            got = c.execute_command("GETJOB", "COUNT", 5, "FROM", "flaky")
            c.execute_command("NACK", *[j[1] for j in got])
        for i in range(3):
            c.execute_command("ADDJOB", "failing", json.dumps({"n": i}), 0)

        def fail(payload):
            raise RuntimeError(f"cannot handle {payload}")

        w = Worker(f"127.0.0.1:{s.port}", queues=["failing"], handler=fail, backoff=Backoff.fixed(1, jitter=0),
                   dead_letter_after=2).start()
        try:
            wait_for(lambda: w.stats["dead-lettered"] == 3, timeout=30, what="dead letters")
        finally:
            w.stop(5)
        time.sleep(0.3)  # one more loop iteration writes the last events
    finally:
        s.stop()
    wait_for(lambda: list((base / "events").glob("events-*.jsonl")), what="event files")


@pytest.mark.timeout(180)
def test_analytics_on_hand_made_and_real_event_logs(spark, tmp_path, capsys):
    """One run (Spark time is precious) over a directory holding a hand-made log with
    known answers and the log of a real server."""
    d = tmp_path / "events"
    d.mkdir()
    lines = fixture_lines()
    (d / f"events-{N1[:8]}-20231114T221320-000001.jsonl").write_text(
        "\n".join(x for x in lines if f'"node": "{N1}"' in x) + "\n")
    # the newest file of a running node may end with a partial line
    (d / f"events-{N2[:8]}-20231114T221320-000001.jsonl").write_text(
        "\n".join(x for x in lines if f'"node": "{N2}"' in x) + '\n{"ts": 17000000')
    real_server_events(d / "real")
    real_lines = sum(len(f.read_text().splitlines()) for f in (d / "real").rglob("*.jsonl"))
    out = tmp_path / "out"
    res = run_analytics(str(d), str(out), spark=spark)
    assert res["events"] == len(lines) - 1 + real_lines
    assert sorted(res["queues"]) == ["emails", "failing", "failing:dead", "fast", "flaky",
                                     "moved", "reports", "stuck", "work", "work:dead"]
    em, rep = res["queues"]["emails"], res["queues"]["reports"]
    assert (em["added"], em["acked"], em["deliveries"], em["nacks"]) == (3, 2, 6, 2)
    assert em["attempts_max"] == 3 and em["attempts_mean"] == pytest.approx(2.0)
    assert em["wait_ms_max"] == 200 and em["wait_ms_p50"] == 100
    assert em["proc_ms_max"] == 1000 and em["proc_ms_p50"] == 200
    assert em["nack_rate"] == pytest.approx(2 / 6) and em["expiry_rate"] == 0
    assert rep["expired"] == 1 and rep["expiry_rate"] == 1.0  # two copies, one job
    # the wait counts from the first `queued`, not from the federation move
    assert res["queues"]["moved"]["wait_ms_max"] == 30100
    # backlog: added and not done; queued: still waiting in a queue at the end
    assert [(res["queues"][q]["backlog"], res["queues"][q]["queued"])
            for q in ("emails", "reports", "moved", "stuck")] == [(1, 0), (0, 0), (0, 0), (3, 3)]
    work = res["queues"]["work"]
    assert (work["added"], work["acked"], work["dead_lettered"]) == (2, 2, 1)
    assert work["dead_letter_rate"] == 0.5 and work["wait_ms_max"] == 10  # w2 from queued
    assert res["queues"]["work:dead"]["backlog"] == 1
    assert em["likely_dead_letters"] == 1 and rep["likely_dead_letters"] == 0
    fast, flaky = res["queues"]["fast"], res["queues"]["flaky"]
    assert (fast["added"], fast["acked"], fast["deliveries"], fast["nacks"]) == (40, 40, 40, 0)
    assert fast["proc_ms_p50"] is not None and fast["proc_ms_max"] >= 0
    assert (flaky["added"], flaky["acked"], flaky["deliveries"], flaky["nacks"]) == (5, 0, 15, 15)
    assert flaky["likely_dead_letters"] == 5 and fast["likely_dead_letters"] == 0
    assert (flaky["backlog"], flaky["queued"], fast["backlog"], fast["queued"]) == (5, 5, 0, 0)
    # a real worker: 3 jobs, each retried once by the back-off (NACK ... DELAY, the same
    # job) then dead-lettered (FAILJOB acknowledges it)
    failing = res["queues"]["failing"]
    assert (failing["added"], failing["acked"], failing["dead_lettered"]) == (3, 3, 3)
    assert failing["nacks"] == 3
    assert failing["dead_letter_rate"] == 1.0 and failing["backlog"] == 0
    assert failing["likely_dead_letters"] == 0  # what the old "dead?" column showed
    assert sorted(r["job"] for r in res["dead_letters_sample"])[-1] == "j3"
    assert len(res["dead_letters_sample"]) == 6
    printed = capsys.readouterr().out
    assert all(q in printed for q in ("emails", "reports", "fast", "flaky"))
    # Parquet outputs readable by Spark, and the chart
    thr = spark.read.parquet(str(out / "throughput")).where("queue = 'emails'")
    assert thr.groupBy().sum("acked").first()[0] == 2
    assert thr.groupBy().sum("delivered").first()[0] == 6
    assert spark.read.parquet(str(out / "dead_letters")).count() == 6
    # over time: the stuck queue's backlog and depth end at 3; the moved job is one job
    # queued on two nodes, never two
    thr_rows = spark.read.parquet(str(out / "throughput")).orderBy("bucket").collect()

    def col(q, c):
        return [r[c] for r in thr_rows if r["queue"] == q]

    assert col("stuck", "backlog")[-1] == 3 and col("stuck", "queued")[-1] == 3
    assert max(col("moved", "queued")) == 1 and col("moved", "queued")[-1] == 0
    assert sum(col("failing", "dead_lettered")) == 3 and sum(col("flaky", "nacked")) == 15
    assert sum(col("emails", "added")) == 3 and sum(col("emails", "nacked")) == 2
    w, h = png_size((out / "queues.png").read_bytes())
    assert w == 1400 and h > 950  # taller with each queue drawn (a row each)
    assert json.loads((out / "summary.json").read_text())["queues"]["emails"]["acked"] == 2
