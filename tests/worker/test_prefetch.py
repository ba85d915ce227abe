"""Prefetch and batches, at-least-once unchanged (issue #31): a worker killed -9 holding a
prefetched batch loses nothing, a prefetched job never outlives its lease unnoticed
(WORKING while it waits, given back on stop), prefetch is bounded by the free threads
for slow handlers, and priorities and fairness hold with batches."""

from __future__ import annotations

import json
import threading
import time

import pytest
from support import wait_for

from disquepy.worker import Worker


def states(dq, ids) -> dict[str, int]:
    """How many of ``ids`` are in each state (``gone`` once acked)."""
    out: dict[str, int] = {}
    for i in ids:
        s = dq.show(i)
        k = s["state"] if s else "gone"
        out[k] = out.get(k, 0) + 1
    return out


@pytest.mark.timeout(90)
def test_worker_killed_holding_a_prefetched_batch_loses_nothing(dq, server, spawn_worker,
                                                                 tmp_path):
    """80 jobs (RETRY 2): the worker fetches them in batches, the handler stalls on one
    with a batch behind it, kill -9. The jobs it held come back after their retry and a second
    worker does every one: nothing lost."""
    jobs = [{"n": n, "dir": str(tmp_path), "stall": n == 30, "sleep": 60} for n in range(80)]
    ids = dq.add_jobs("q", [json.dumps(j) for j in jobs], retry=2)
    p = spawn_worker(server.port, "handlers:stall_once", "--queues", "q",
                     "--poll-timeout-ms", "200", "--prefetch", "64")
    wait_for(lambda: (tmp_path / "stalled").exists(), what="the handler to stall")
    time.sleep(0.3)  # the acks of the jobs done before the stall go out
    held = states(dq, ids)
    # done before the stall: acked; the stalled one and the batch fetched with it: held
    # by the worker (active: with concurrency 1, all but one of them prefetched)
    assert held["gone"] >= 30 and held["active"] >= 5, held
    assert held["gone"] + held["active"] + held.get("queued", 0) == 80
    p.kill()
    p.wait(10)
    wait_for(lambda: dq.qlen("q") > 0, timeout=10, what="the held jobs to come back")
    done = []
    w = Worker(dq, ["q"], 2, lambda payload: done.append(payload["n"]),
               poll_timeout_ms=100).start()
    wait_for(lambda: states(dq, ids) == {"gone": 80}, timeout=20, what="every job acked")
    w.stop(5)
    # the second worker did what was held and what was left queued, each once
    assert w.stats["acked"] == 80 - held["gone"] == len(set(done)) == len(done)
    assert 30 in done  # the stalled one, too


@pytest.mark.timeout(60)
def test_prefetched_jobs_are_kept_while_they_wait_and_given_back_on_stop(dq, server):
    """RETRY 4 and a 5.5 s stall with 30 jobs prefetched behind it: WORKING keeps them
    from re-delivery (another consumer polling never gets one); a stop then gives them
    back at once, the running job finishing first. (RETRY 2 left the heartbeat, at 80%
    of it, 0.4 s for its 30 WORKINGs: a loaded machine missed it once.)"""
    release = threading.Event()
    done = []

    def h(p):
        if p == "stall":
            release.wait(30)
        done.append(p)

    ids = dq.add_jobs("q", [json.dumps(i) for i in range(10)] + [json.dumps("stall")]
                      + [json.dumps(i) for i in range(10, 40)], retry=4)
    w = Worker(dq, ["q"], 1, h, poll_timeout_ms=100).start()
    wait_for(lambda: len(done) == 10 and dq.qlen("q") == 0, what="the stall")
    other = server.client()
    deadline = time.monotonic() + 5.5
    stolen = []
    while time.monotonic() < deadline and not stolen:
        stolen = other.execute_command("GETJOB", "NOHANG", "FROM", "q") or []
        time.sleep(0.05)
    assert stolen == []
    held = states(dq, ids[11:])
    assert held == {"active": 30}, held
    w.request_stop()
    wait_for(lambda: states(dq, ids[11:]) == {"queued": 30}, what="given back on stop")
    assert dq.show(ids[10])["state"] == "active"  # the running one is still running
    release.set()
    assert w.stop(5)
    assert w.stats["requeued-on-stop"] == 30 and w.stats["acked"] == 11
    assert dq.show(ids[10]) is None


@pytest.mark.timeout(60)
def test_slow_handlers_get_no_prefetch(dq):
    """0.3 s jobs: after the first, each fetch takes one job per free thread (about
    20 ms of work at most wait), not a batch of 64 hoarded from other workers."""
    ids = dq.add_jobs("q", [json.dumps(i) for i in range(12)])
    w = Worker(dq, ["q"], 2, lambda p: time.sleep(0.3), poll_timeout_ms=100).start()
    held_most = 0
    while w.stats["acked"] < 12:
        held_most = max(held_most, states(dq, ids).get("active", 0))
        time.sleep(0.05)
    w.stop(5)
    assert held_most <= 3, held_most  # two running, at most one more between two reads


def test_priorities_hold_with_batches(dq):
    """Strict (low_share 0): every high job before any medium one, medium before low,
    in batches; high jobs added while medium ones are being done go first from the next
    batch on (a probe of each level above the one being served)."""
    order: list[str] = []
    added: list[int] = []

    def h(p):
        order.append(p)
        if p == "m49":
            added.append(len(order))
            dq.add_jobs("q:high", [json.dumps(f"h{i}") for i in range(100, 110)])

    dq.add_jobs("q:low", [json.dumps(f"l{i}") for i in range(100)])
    dq.add_jobs("q", [json.dumps(f"m{i}") for i in range(300)])
    dq.add_jobs("q:high", [json.dumps(f"h{i}") for i in range(100)])
    w = Worker(dq, ["q"], 1, h, low_share=0, poll_timeout_ms=100).start()
    wait_for(lambda: len(order) == 510, what="510 jobs")
    w.stop(5)
    level = [x[0] for x in order]
    assert level[:100] == ["h"] * 100
    assert level[-100:] == ["l"] * 100
    late = [i for i, x in enumerate(order) if x in {f"h{i}" for i in range(100, 110)}]
    # the late high jobs: one with the next batch (its probe of q:high), the others in
    # the batch after it; before the medium ones left, and before any low job
    assert late[0] - added[0] <= 65 and late[-1] - added[0] <= 3 * 65, (added, late)
    assert late[1:] == list(range(late[1], late[1] + 9))
    assert late[-1] < max(i for i, x in enumerate(level) if x == "m")
    assert set(level[100:410]) == {"h", "m"}


def test_low_is_not_starved_with_batches(dq):
    """low_share 0.1: with 2000 high jobs queued, low ones are still served (about a
    tenth of the fetches take low first), long before high runs out."""
    order: list[str] = []
    dq.add_jobs("q:high", [b'"h"'] * 2000)
    dq.add_jobs("q:low", [b'"l"'] * 300)
    w = Worker(dq, ["q"], 1, order.append, poll_timeout_ms=100).start()
    wait_for(lambda: len(order) == 2300, timeout=60, what="2300 jobs")
    w.stop(5)
    last_high = max(i for i, x in enumerate(order) if x == "h")
    lows_before = order[:last_high].count("l")
    assert lows_before >= 0.05 * last_high, (lows_before, last_high)
