"""The group worker (``python -m disquepy.worker handler --queues q --group G``, and
GroupWorker in process) on a real node: every group gets every event, the workers of
one group share them, a long handler keeps its lease, a failing one gets the event back."""

from __future__ import annotations

import json
import signal
import threading
import time

import pytest
from support import wait_for

from disquepy.worker import GroupWorker


def event(dq, tmp_path, n: int, sleep: float = 0.0) -> str:
    return dq.qadd("events", json.dumps({"n": n, "sleep": sleep, "dir": str(tmp_path)}), 60)


@pytest.mark.timeout(60)
def test_worker_process_consumes_as_a_group_and_other_groups_get_everything(
        dq, server, spawn_worker, tmp_path):
    ids = [event(dq, tmp_path, n) for n in range(1, 5)]
    p = spawn_worker(server.port, "handlers:slow", "--queues", "events", "--group", "mail",
                     "--concurrency", "2", "--poll-timeout-ms", "200")
    wait_for(lambda: all((tmp_path / f"done-{n}").exists() for n in range(1, 5)),
             what="the worker to handle every event")
    wait_for(lambda: dq.qstatus("events")["events"]["mail"]["done"] == 4,
             what="every event acked by the group")
    # another group, in process, gets all four as well
    got: list[int] = []
    lock = threading.Lock()

    def handle(payload):
        with lock:
            got.append(payload["n"])

    w = GroupWorker(dq, ["events"], "audit", 3, handle, poll_timeout=0.2).start()
    wait_for(lambda: len(got) == 4, what="the second group")
    w.stop(5)
    assert sorted(got) == [1, 2, 3, 4] and len(ids) == 4
    p.send_signal(signal.SIGTERM)
    assert p.wait(20) == 0, p.log_path.read_text()


@pytest.mark.timeout(60)
def test_group_worker_keeps_a_long_lease_and_retries_a_failure(dq, server, tmp_path):
    event(dq, tmp_path, 1, sleep=1.5)
    calls: list[int] = []

    def handle(payload):
        calls.append(payload["n"])
        time.sleep(payload["sleep"])
        if len(calls) == 1 and payload["n"] == 2:
            raise ValueError("first attempt fails")

    w = GroupWorker(dq, ["events"], "g", 1, handle, lease=0.6, poll_timeout=0.2).start()
    wait_for(lambda: dq.qstatus("events")["events"]["g"]["done"] == 1, timeout=10,
             what="the long handler to finish")
    assert calls == [1]  # QWORKING kept the lease: never redelivered
    calls.clear()
    event(dq, tmp_path, 2)
    wait_for(lambda: dq.qstatus("events")["events"]["g"]["done"] == 2, timeout=10,
             what="the failed event to come back after its lease")
    w.stop(5)
    assert calls == [2, 2] and w.failed == 1 and w.processed == 2


def test_group_option_refuses_a_tasks_app(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parent
    r = subprocess.run([sys.executable, "-m", "disquepy.worker", "handlers:app", "--group",
                        "g", "--queues", "tq"], cwd=here, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2 and "--group takes a handler function" in r.stderr


@pytest.mark.timeout(90)
def test_group_worker_leases_events_in_batches_and_acks_each_once(dq, server, tmp_path):
    """With a fast handler the worker's QGETs take many events each (QGET ... COUNT n,
    issue #31) and a batch's acks are one QACK of its IDs; every event is handled once
    and acked; a failing one comes back alone when its lease ends."""
    for n in range(400):
        dq.qadd("batched", json.dumps({"n": n}), 120)
    seen: list[int] = []
    failed_once: list[int] = []
    lock = threading.Lock()

    def handle(payload):
        with lock:
            if payload["n"] == 7 and not failed_once:
                failed_once.append(7)
                raise ValueError("first attempt fails")
            seen.append(payload["n"])

    c = server.client()
    stats = c.info("commandstats")
    calls_before = stats.get("cmdstat_qget", {}).get("calls", 0)
    acks_before = stats.get("cmdstat_qack", {}).get("calls", 0)
    w = GroupWorker(dq, ["batched"], "b", 2, handle, lease=1.0, poll_timeout=0.2,
                    prefetch=64).start()
    try:
        wait_for(lambda: dq.qstatus("batched")["batched"]["b"]["done"] == 400, timeout=60,
                 what="every event acked")
    finally:
        w.stop(5)
    assert sorted(seen) == list(range(400))  # each once, 7 after its failure
    assert failed_once == [7] and w.failed == 1 and w.processed == 400
    stats = c.info("commandstats")
    qgets = stats["cmdstat_qget"]["calls"] - calls_before
    assert qgets < 100, qgets  # batches, not one QGET per event
    qacks = stats["cmdstat_qack"]["calls"] - acks_before
    assert qacks <= qgets, (qacks, qgets)  # one QACK per batch, not one per event
