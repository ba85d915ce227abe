"""``disque bench`` on a real node, ``disque analytics`` when its pieces are missing."""

from __future__ import annotations

import sys

import pytest
from cli_support import table_rows
from click.testing import CliRunner

from disquepy.cli import cli


@pytest.mark.timeout(120)
def test_bench_reports_totals_and_leaves_the_queue_empty(run_cli, server, r):
    acked = r.info("stats")["jobs_acked"]
    res = run_cli("-p", server.port, "bench", "--jobs", 230, "--clients", 3, "--pipeline", 7,
                  "--queue", "bq", "--body-size", 100)
    assert res.rc == 0, res.err
    rows = {row[0]: row for row in table_rows(res.out)}
    assert rows["produce"][1:3] == ["230", "0"]  # jobs, errors
    assert rows["consume+ack"][1:3] == ["230", "0"]
    for phase in ("produce", "consume+ack"):
        p50, p99 = float(rows[phase][5]), float(rows[phase][6])
        assert 0 < p50 <= p99
        assert float(rows[phase][4].replace(",", "")) > 0  # jobs/s
    assert "Queue bq: 0 jobs before, 0 after" in res.out
    assert r.execute_command("QLEN", "bq") == 0
    assert r.info("jobs")["registered_jobs"] == 0  # every job acknowledged, none left
    assert r.info("stats")["jobs_acked"] - acked == 230
    stat = dict(zip(*[iter(r.execute_command("QSTAT", "bq"))] * 2, strict=True))
    assert stat[b"jobs-in"] == 230 and stat[b"jobs-out"] == 230


@pytest.mark.timeout(120)
def test_bench_with_replicate_on_a_single_node_reports_the_error(run_cli, server, r):
    res = run_cli("-p", server.port, "bench", "--jobs", 10, "--replicate", 2, "--queue", "bq")
    assert res.rc == 1
    assert "produce failed" in res.err and "NOREPL" in res.err
    assert "Traceback" not in res.err


@pytest.mark.timeout(120)
def test_bench_takes_no_more_than_its_jobs_from_a_busy_queue(run_cli, server, r):
    for i in range(20):
        r.execute_command("ADDJOB", "bq", f"someone else's {i}", 0)
    res = run_cli("-p", server.port, "bench", "--jobs", 50, "--clients", 2, "--pipeline", 8,
                  "--queue", "bq")
    assert res.rc == 0, res.err
    assert "Queue bq: 20 jobs before, 20 after" in res.out
    assert r.execute_command("QLEN", "bq") == 20


def test_analytics_without_pyspark_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pyspark", None)  # import pyspark -> ImportError
    res = CliRunner().invoke(cli, ["analytics", str(tmp_path)])
    assert res.exit_code == 1
    assert "disque analytics needs the spark extra" in res.output
    assert "pip install -e '.[spark]'" in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)


def test_analytics_without_the_module_is_a_clear_error(monkeypatch, tmp_path):
    pytest.importorskip("pyspark")
    monkeypatch.setitem(sys.modules, "disquepy.spark.analytics", None)
    res = CliRunner().invoke(cli, ["analytics", str(tmp_path), "--out", "x"])
    assert res.exit_code == 1
    assert "cannot import disquepy.spark.analytics" in res.output
    assert isinstance(res.exception, SystemExit)


def test_analytics_calls_run_analytics_and_prints_its_summary(monkeypatch, tmp_path):
    import types

    calls = []
    fake = types.ModuleType("disquepy.spark.analytics")

    def run_analytics(path: str, out: str) -> dict:
        calls.append((path, out))
        print("summary: 3 jobs")
        return {"jobs": 3, "queues": ["a"]}

    fake.run_analytics = run_analytics
    pytest.importorskip("pyspark")
    monkeypatch.setitem(sys.modules, "disquepy.spark.analytics", fake)
    res = CliRunner().invoke(cli, ["analytics", str(tmp_path), "--out", "o"])
    assert res.exit_code == 0, res.output
    assert calls == [(str(tmp_path), "o")]
    assert res.output == "summary: 3 jobs\nResults written to o\n"


@pytest.mark.timeout(180)
def test_bench_with_replication_on_a_cluster(run_cli, make_cluster):
    from support import wait_for

    servers, clients = make_cluster(3)
    res = run_cli("-p", servers[0].port, "bench", "--jobs", 60, "--clients", 2, "--pipeline",
                  5, "--replicate", 3, "--queue", "rq")
    assert res.rc == 0, res.err
    rows = {row[0]: row for row in table_rows(res.out)}
    assert rows["produce"][1:3] == ["60", "0"] and rows["consume+ack"][1:3] == ["60", "0"]
    assert all(c.execute_command("QLEN", "rq") == 0 for c in clients)
    # every copy on every node is gone once the acks went around
    wait_for(lambda: all(c.info("jobs")["registered_jobs"] == 0 for c in clients),
             timeout=30, what="acked copies to be collected on every node")


def test_analytics_errors_of_the_module_are_one_line(monkeypatch, tmp_path):
    import types

    pytest.importorskip("pyspark")
    fake = types.ModuleType("disquepy.spark.analytics")

    def run_analytics(path: str, out: str) -> dict:
        raise FileNotFoundError(f"no event files (*.jsonl) under {path}")

    fake.run_analytics = run_analytics
    monkeypatch.setitem(sys.modules, "disquepy.spark.analytics", fake)
    res = CliRunner().invoke(cli, ["analytics", str(tmp_path)])
    assert res.exit_code == 1
    assert res.output == f"no event files (*.jsonl) under {tmp_path}\n"


def test_analytics_of_a_missing_path_is_refused_before_spark_starts(monkeypatch, tmp_path):
    """One line naming the path, exit 2, and neither PySpark nor Java is looked for."""
    monkeypatch.setitem(sys.modules, "pyspark", None)  # reaching it would say "needs PySpark"
    missing = tmp_path / "no-such-log"
    res = CliRunner().invoke(cli, ["analytics", str(missing)])
    assert res.exit_code == 2
    assert f"Error: Invalid value for 'PATH': Path '{missing}' does not exist." in res.output
    assert "PySpark" not in res.output
