"""Worker processes (``python -m disquepy.worker``) on a real node: a crash mid-job is
re-delivered after RETRY, SIGTERM/SIGINT drain the running jobs, the shutdown deadline
NACKs what did not finish."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from support import wait_for

from disquepy.worker import Worker


def slow_job(dq, tmp_path, n: int, sleep: float, **opts) -> str:
    return dq.add_job("q", json.dumps({"n": n, "sleep": sleep, "dir": str(tmp_path)}), **opts)


@pytest.mark.timeout(60)
def test_crashed_worker_job_is_redelivered_after_retry(dq, server, spawn_worker, tmp_path):
    jid = slow_job(dq, tmp_path, 1, 30, retry=2)
    p = spawn_worker(server.port, "handlers:slow", "--queues", "q")
    wait_for(lambda: (tmp_path / "started-1").exists(), what="the worker to start the job")
    p.kill()  # SIGKILL mid-job: no ACK, no NACK
    p.wait(10)
    assert dq.show(jid)["state"] == "active"
    got = []
    w = Worker(dq, ["q"], 1, lambda payload: got.append(payload), poll_timeout_ms=100)
    w.start()
    wait_for(lambda: w.stats["acked"] == 1, timeout=20, what="re-delivery after RETRY")
    w.stop(5)
    assert [g["n"] for g in got] == [1]
    assert dq.show(jid) is None  # acknowledged by the second worker


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_drains_running_jobs(dq, server, spawn_worker, tmp_path, sig):
    running = [slow_job(dq, tmp_path, n, 2.0) for n in (1, 2)]
    waiting = [slow_job(dq, tmp_path, n, 0.0) for n in (3, 4, 5)]
    p = spawn_worker(server.port, "handlers:slow", "--queues", "q", "--concurrency", "2",
                     "--poll-timeout-ms", "200")
    wait_for(lambda: (tmp_path / "started-1").exists() and (tmp_path / "started-2").exists(),
             what="two jobs running")
    assert dq.qlen("q") == 3
    p.send_signal(sig)
    assert p.wait(20) == 0, p.log_path.read_text()
    # the running jobs finished and were acknowledged; nothing else was taken
    assert (tmp_path / "done-1").exists() and (tmp_path / "done-2").exists()
    assert all(dq.show(j) is None for j in running)
    assert not any((tmp_path / f"started-{n}").exists() for n in (3, 4, 5))
    assert dq.qlen("q") == 3
    assert all(dq.show(j)["state"] == "queued" for j in waiting)
    assert "outcome=acked" in p.log_path.read_text()


@pytest.mark.timeout(60)
def test_shutdown_deadline_nacks_unfinished_jobs(dq, server, spawn_worker, tmp_path):
    jid = slow_job(dq, tmp_path, 1, 30.0)
    p = spawn_worker(server.port, "handlers:slow", "--queues", "q", "--shutdown-timeout", "1")
    wait_for(lambda: (tmp_path / "started-1").exists(), what="job running")
    p.send_signal(signal.SIGTERM)
    assert p.wait(20) == 3  # exit status 3: some jobs did not finish
    shown = dq.show(jid)
    assert shown["state"] == "queued" and shown["nacks"] == 1  # back in the queue now
    assert not (tmp_path / "done-1").exists()
    assert "outcome=nacked-on-shutdown" in p.log_path.read_text()


@pytest.mark.timeout(60)
def test_process_pool_runs_jobs_in_parallel_and_drains(dq, server, spawn_worker, tmp_path):
    ids = [slow_job(dq, tmp_path, n, 2.0) for n in (1, 2)]
    p = spawn_worker(server.port, "handlers:slow", "--queues", "q", "--processes", "2")
    # one job each: concurrency 1 per process, so both running means two processes
    wait_for(lambda: (tmp_path / "started-1").exists() and (tmp_path / "started-2").exists(),
             what="both jobs running at once")
    assert not (tmp_path / "done-1").exists() and not (tmp_path / "done-2").exists()
    p.send_signal(signal.SIGTERM)
    assert p.wait(20) == 0, p.log_path.read_text()
    assert all(dq.show(j) is None for j in ids)
    assert p.log_path.read_text().count("outcome=acked") == 2


def _descendants(pid: int) -> set[int]:
    """The processes below ``pid`` (from /proc's children lists, Linux)."""
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        try:
            kids = [int(c) for t in os.listdir(f"/proc/{p}/task")
                    for c in Path(f"/proc/{p}/task/{t}/children").read_text().split()]
        except OSError:
            continue
        found.update(kids)
        todo.extend(kids)
    return found


@pytest.mark.timeout(60)
def test_pool_given_by_an_abbreviated_option_starts_only_its_processes(
        dq, server, spawn_worker, tmp_path):
    """``--proc 2`` (argparse takes abbreviations) was not stripped from the children's
    command line, so each child started a pool of its own, without end."""
    ids = [slow_job(dq, tmp_path, n, 1.0) for n in (1, 2)]
    p = spawn_worker(server.port, "handlers:slow", "--queues", "q", "--proc", "2")
    wait_for(lambda: all((tmp_path / f"done-{n}").exists() for n in (1, 2)),
             what="both jobs done")
    time.sleep(1.0)  # time for a runaway child pool to show
    assert len(_descendants(p.pid)) == 2
    p.send_signal(signal.SIGTERM)
    assert p.wait(20) == 0, p.log_path.read_text()
    assert all(dq.show(j) is None for j in ids)


@pytest.mark.timeout(60)
def test_idle_worker_stops_cleanly_before_its_poll_ends(server, spawn_worker):
    """A SIGTERM while every thread waits in a long GETJOB: nothing was running, so the
    exit is clean (status 0) even though the poll outlives the shutdown deadline."""
    p = spawn_worker(server.port, "handlers:slow", "--queues", "q", "--concurrency", "2",
                     "--poll-timeout-ms", "10000", "--shutdown-timeout", "0.3")
    wait_for(lambda: "worker started" in p.log_path.read_text(), what="worker up")
    p.send_signal(signal.SIGTERM)
    assert p.wait(20) == 0, p.log_path.read_text()


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """``/metrics`` on 127.0.0.1:port: {(sample name, sorted labels): value}."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


@pytest.mark.timeout(60)
def test_metrics_port_serves_durations_outcomes_and_dead_letter_reasons(dq, server,
                                                                         spawn_worker):
    from support import free_port

    for n in range(6):
        dq.add_job("q:high" if n < 2 else "q", json.dumps({"n": n}))
    port = free_port()
    p = spawn_worker(server.port, "handlers:fail_odd", "--queues", "q", "--priorities",
                     "--dead-letter-after", "1", "--metrics-port", str(port),
                     "--poll-timeout-ms", "200")
    m = wait_for(lambda: _scrape_when(port, lambda m: sum(
        v for (k, _), v in m.items() if k == "disquepy_worker_jobs_total") == 6),
        timeout=30, what="six outcomes")
    lab = (("outcome", "acked"), ("priority", "medium"), ("queue", "q"))
    assert m[("disquepy_worker_jobs_total", lab)] == 2  # n = 2, 4
    assert m[("disquepy_worker_jobs_total", (("outcome", "acked"), ("priority", "high"),
                                             ("queue", "q")))] == 1  # n = 0
    assert m[("disquepy_worker_dead_lettered_total", (("priority", "medium"), ("queue", "q"),
                                                      ("reason", "attempts")))] == 2  # 3, 5
    assert m[("disquepy_worker_dead_lettered_total", (("priority", "high"), ("queue", "q"),
                                                      ("reason", "attempts")))] == 1  # 1
    assert m[("disquepy_worker_task_duration_seconds_count", lab)] == 2
    assert m[("disquepy_worker_task_duration_seconds_bucket",
              tuple(sorted((*lab, ("le", "+Inf")))))] == 2
    assert m[("disquepy_worker_in_progress", (("priority", "medium"), ("queue", "q")))] == 0
    assert dq.qlen("q:dead") == 3
    # no job ID anywhere in a label
    assert not any(v.startswith("D-") for _, labels in m for _, v in labels)
    p.send_signal(signal.SIGTERM)
    assert p.wait(20) == 0


def _scrape_when(port: int, pred):
    try:
        m = scrape(port)
    except OSError:  # not listening yet
        return None
    return m if pred(m) else None


@pytest.mark.timeout(60)
def test_metrics_port_with_a_pool_gives_each_process_its_own_port(dq, server, spawn_worker):
    from support import free_port, port_is_free

    port = next(p for p in iter(free_port, None) if port_is_free(p + 1))
    p = spawn_worker(server.port, "handlers:noop", "--queues", "q", "--processes", "2",
                     "--metrics-port", str(port))
    for each in (port, port + 1):
        wait_for(lambda e=each: _scrape_when(e, lambda m: True) is not None, timeout=30,
                 what=f"metrics on {each}")
    p.send_signal(signal.SIGTERM)
    assert p.wait(20) == 0
