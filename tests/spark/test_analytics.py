"""disquepy.spark.analytics on a hand-made event log and on a real server's event log."""

from __future__ import annotations

import json
import struct
import time
import zlib

import pytest
from spark_support import wait_for

from disquepy.spark import png
from disquepy.spark.analytics import pick_bucket, run_analytics

N1 = "a" * 40
N2 = "b" * 40
T0 = 1_700_000_000_000


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
        # the Spark source's bookkeeping: not a user queue
        ev(50, "added", "m1", "__disquepy_spark_marks__:abc", **added),
    ]


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_png_writer_produces_a_valid_image():
    cv = png.Canvas(40, 20)
    cv.line(0, 0, 39, 19, png.BLACK)
    cv.text(2, 2, "Q1", png.PALETTE[0])
    data = cv.png()
    assert png_size(data) == (40, 20)
    # decode IDAT and check the diagonal's pixels are black, a corner is white
    idat_len = struct.unpack(">I", data[33:37])[0]
    raw = zlib.decompress(data[41:41 + idat_len])
    stride = 1 + 40 * 3
    assert raw[19 * stride + 1 + 39 * 3: 19 * stride + 1 + 40 * 3] == b"\x00\x00\x00"
    assert raw[19 * stride + 1: 19 * stride + 4] == b"\xff\xff\xff"
    assert png.nice_ticks(0, 95)[-1] >= 95 and png.fmt_num(12345) == "12.3K"


def test_bucket_keeps_the_history_within_120_points():
    assert pick_bucket(60_000) == 1
    assert pick_bucket(3_600_000) == 30
    assert pick_bucket(40 * 86_400_000) == 86400


def real_server_events(base) -> None:
    """A real node with the event log on: queue "fast" (40 jobs acked), queue "flaky"
    (5 jobs nacked three times each, never acked)."""
    from support import Server

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
    assert sorted(res["queues"]) == ["emails", "fast", "flaky", "reports"]
    em, rep = res["queues"]["emails"], res["queues"]["reports"]
    assert (em["added"], em["acked"], em["deliveries"], em["nacks"]) == (3, 2, 6, 2)
    assert em["attempts_max"] == 3 and em["attempts_mean"] == pytest.approx(2.0)
    assert em["wait_ms_max"] == 200 and em["wait_ms_p50"] == 100
    assert em["proc_ms_max"] == 1000 and em["proc_ms_p50"] == 200
    assert em["nack_rate"] == pytest.approx(2 / 6) and em["expiry_rate"] == 0
    assert rep["expired"] == 1 and rep["expiry_rate"] == 1.0  # two copies, one job
    assert em["likely_dead_letters"] == 1 and rep["likely_dead_letters"] == 0
    fast, flaky = res["queues"]["fast"], res["queues"]["flaky"]
    assert (fast["added"], fast["acked"], fast["deliveries"], fast["nacks"]) == (40, 40, 40, 0)
    assert fast["proc_ms_p50"] is not None and fast["proc_ms_max"] >= 0
    assert (flaky["added"], flaky["acked"], flaky["deliveries"], flaky["nacks"]) == (5, 0, 15, 15)
    assert flaky["likely_dead_letters"] == 5 and fast["likely_dead_letters"] == 0
    assert sorted(r["job"] for r in res["dead_letters_sample"])[-1] == "j3"
    assert len(res["dead_letters_sample"]) == 6
    printed = capsys.readouterr().out
    assert all(q in printed for q in ("emails", "reports", "fast", "flaky"))
    # Parquet outputs readable by Spark, and the chart
    thr = spark.read.parquet(str(out / "throughput")).where("queue = 'emails'")
    assert thr.groupBy().sum("acked").first()[0] == 2
    assert thr.groupBy().sum("delivered").first()[0] == 6
    assert spark.read.parquet(str(out / "dead_letters")).count() == 6
    assert png_size((out / "queues.png").read_bytes()) == (1000, 760)
    assert json.loads((out / "summary.json").read_text())["queues"]["emails"]["acked"] == 2
