"""Safe defaults on real worker processes (issue #24): a job with no retry policy gets the
default one (3 retries, exponential back-off from 1 s, then the dead letters), a handler
that always fails never spins, a worker with no --priorities flag serves every priority
level of its queues, the example handler, the worker's connection name, the group
worker's log lines."""

from __future__ import annotations

import json
import logging
import random
import re
import signal
import time

import pytest
from support import wait_for

from disquepy.client.envelope import DEFAULT_POLICY, RetryPolicy, stamp, unwrap, wrap
from disquepy.client.workerinfo import parse_name
from disquepy.worker import Backoff, GroupWorker, Worker, list_dead
from disquepy.worker.example import SimulatedFailure, handle


def attempt_times(log_text: str, jid: str) -> list[tuple[str, float]]:
    """(outcome, seconds) of each outcome line of job ``jid`` in a worker's log."""
    out = []
    for line in log_text.splitlines():
        if f"job={jid} " in line:
            m = re.search(r"\d\d:(\d\d):(\d\d\.\d{3}) .* outcome=(\S+)", line)
            out.append((m.group(3), int(m.group(1)) * 60 + float(m.group(2))))
    return out


@pytest.mark.timeout(90)
def test_an_always_failing_job_ends_failed_in_the_dead_letters_after_the_default_retries(
        dq, server, spawn_worker):
    """The Disqueue README's failing job, `{"payload": {"fail": true}}`, with no retry
    policy: 4 attempts (the first and 3 retries) 1, 2 and 4 s apart, then `failed` with
    its error and a dead letter; nothing in between (it was 14,175 attempts in 7.7 s)."""
    jid = dq.add_job("default", json.dumps({"fail": True}))
    p = spawn_worker(server.port, "disquepy.worker.example:handle", "--queues", "default",
                     "--poll-timeout-ms", "200")
    st = wait_for(lambda: (s := dq.status(jid)).status == "failed" and s, timeout=40,
                  what="the job to end failed")
    assert st.attempt == DEFAULT_POLICY.max_attempts == 4
    assert "SimulatedFailure" in st.error and 'says "fail": true' in st.error
    (dl,) = list_dead(dq, "default")
    assert dl.original_id == jid and dl.json() == {"fail": True}
    assert dl.extra["attempts"] == 4 and dl.nacks == 4
    time.sleep(1.0)  # nothing more happens to it
    p.send_signal(signal.SIGTERM)
    assert p.wait(20) == 0
    seen = attempt_times(p.log_path.read_text(), jid)
    assert [o for o, _ in seen] == ["retry-later"] * 3 + ["dead-lettered"], seen
    gaps = [b - a for (_, a), (_, b) in zip(seen, seen[1:], strict=False)]
    for gap, delay in zip(gaps, [1, 2, 4], strict=True):
        assert delay - 0.1 <= gap < delay + 1.5, gaps
    assert p.log_path.read_text().count("Traceback") == 4


@pytest.mark.timeout(60)
def test_a_policy_carried_by_the_job_wins_and_a_worker_option_sets_the_default(
        dq, server, spawn_worker):
    """A job's own policy (its envelope: what disque-web stamps) comes first; the others
    get the worker's --max-retries / --backoff."""
    own = dq.add_job("q", wrap(b'{"fail": true}', policy=RetryPolicy(
        max_attempts=2, strategy="fixed", base=1)))
    plain = dq.add_job("q", json.dumps({"fail": True}))
    p = spawn_worker(server.port, "disquepy.worker.example:handle", "--queues", "q",
                     "--max-retries", "0", "--poll-timeout-ms", "200")
    wait_for(lambda: dq.status(own).status == "failed", timeout=20, what="own policy")
    assert dq.status(own).attempt == 2 and dq.status(plain).attempt == 1
    assert dq.status(plain).status == "failed"
    p.send_signal(signal.SIGTERM)
    assert p.wait(20) == 0


@pytest.mark.timeout(60)
def test_a_worker_without_priorities_flag_serves_every_level_highest_first(
        dq, server, spawn_worker, tmp_path):
    """`--queues q` alone serves q:high, q and q:low (the HTTP API's priorities), high
    first: before, high and low jobs stayed queued for ever."""
    for level, n in (("q:low", 0), ("q", 1), ("q:high", 2)):
        dq.add_job(level, json.dumps({"n": n, "sleep": 0, "dir": str(tmp_path)}))
    p = spawn_worker(server.port, "handlers:slow", "--queues", "q", "--prefetch", "0",
                     "--poll-timeout-ms", "200", "--low-share", "0")
    wait_for(lambda: all((tmp_path / f"done-{n}").exists() for n in range(3)),
             what="every level served")
    started = sorted(range(3), key=lambda n: (tmp_path / f"started-{n}").stat().st_mtime_ns)
    assert started == [2, 1, 0]  # high, medium, low
    p.send_signal(signal.SIGTERM)
    assert p.wait(20) == 0
    assert all(dq.qlen(q) == 0 for q in ("q:high", "q", "q:low"))


def test_no_path_retries_faster_than_the_back_off(dq):
    """Handlers that fail in every way a handler can (an exception, SystemExit, a body
    the text mode cannot decode) and a dead-letter queue that refuses jobs: each job
    comes back no sooner than its back-off (1 s), the worker never spins."""
    attempts: list[float] = []

    def h(p):
        attempts.append(time.monotonic())
        if p == "exit":
            raise SystemExit(3)
        raise RuntimeError("always")

    dq.add_job("q", json.dumps("exit"))
    dq.add_job("q", json.dumps("raise"))
    dq.pause("q:dead", "in")  # the dead letters cannot be added: retried later, not at once
    w = Worker(dq, ["q"], 2, h, dead_letter_after=1, poll_timeout_ms=100).start()
    time.sleep(2.5)
    w.stop(5)
    # two jobs, each tried at most once per second: 0, ~1 s, ~2 s
    assert 2 <= len(attempts) <= 6, len(attempts)
    assert w.stats["dead-lettered"] == 0
    got = []
    dq.add_job("t", b"\xff\xfe not utf-8")
    w = Worker(dq, ["t"], 1, got.append, body="text", poll_timeout_ms=100).start()
    wait_for(lambda: w.stats["retry-later"] >= 1)
    time.sleep(1.5)
    w.stop(5)
    assert got == [] and 1 <= w.stats["retry-later"] <= 3


def test_backoff_jitter_never_rounds_a_second_up():
    """A base of 1 s is 1 s (it was 2 s about half the time: jitter rounded up)."""
    rng = random.Random(24)
    assert {Backoff.exponential(1).delay(1, rng) for _ in range(2000)} == {1}
    assert {Backoff.fixed(1).delay(5, rng) for _ in range(2000)} == {1}
    assert {Backoff.exponential(1).delay(a, rng) for a in (2, 3) for _ in range(500)} \
        == {2, 4}
    assert Backoff.from_policy(DEFAULT_POLICY) == Backoff.exponential(1, 2, 3600)


def test_retry_policy_format():
    p = RetryPolicy()
    assert (p.max_attempts, p.max_retries, p.strategy, p.base, p.cap) == \
        (4, 3, "exponential", 1.0, 3600.0)
    assert p.to_dict() == {"max_attempts": 4, "strategy": "exponential", "base": 1.0,
                           "cap": 3600.0}
    assert RetryPolicy.from_dict(p.to_dict()) == p
    assert RetryPolicy.from_dict({"max_retries": 0, "strategy": "fixed"}) == \
        RetryPolicy(1, "fixed")
    assert RetryPolicy.from_dict({}) == DEFAULT_POLICY
    for bad, said in (({"max_attempts": 0}, "max_attempts"), ({"strategy": "linear"},
                      "strategy"), ({"base": -1}, "base"), ({"cap": "x"}, "cap"),
                      ({"max_attempts": 2, "max_retries": 1}, "not both"),
                      ({"attempts": 3}, "unknown"), ([], "JSON object")):
        with pytest.raises(ValueError, match=said):
            RetryPolicy.from_dict(bad)
    # stamp: the default policy on a body without one; a body's own policy stays
    stamped = stamp(b'{"x": 1}')
    env = unwrap(stamped)
    assert env.body == b'{"x": 1}' and env.policy == DEFAULT_POLICY.to_dict()
    own = wrap(b"b", policy=RetryPolicy(2))
    assert stamp(own) == own and stamp(stamped, RetryPolicy(9)) == stamped


def test_example_handler():
    assert handle({"msg": "urgent"}) == {"processed": True}
    assert handle("text") == {"processed": True}
    with pytest.raises(SimulatedFailure):
        handle({"fail": True})
    assert handle({"fail": "no"}) == {"processed": True}
    t0 = time.monotonic()
    handle({"sleep": 0.2})
    assert time.monotonic() - t0 >= 0.2


def named_worker(r):
    """The worker CLIENT LIST shows, parsed (or None): of the connections it named (a
    worker's pooled connections are named in turn, each with the counts of its time),
    the freshest counts, as the dashboard reads them."""
    found = []
    for line in r.execute_command("CLIENT", "LIST").decode().splitlines():
        name = dict(f.split("=", 1) for f in line.split(" ") if "=" in f).get("name", "")
        info = parse_name(name)
        if info is not None:
            found.append(info)
    return max(found, key=lambda w: (w.done, w.failed), default=None)


def test_worker_names_its_connection_with_its_counts(dq, r):
    """CLIENT LIST on the node shows the worker (host, pid, queues, concurrency) and its
    jobs done and failed, updated as they change."""
    import os

    def named():
        return named_worker(r)

    w = Worker(dq, ["emails", "sms"], 3, lambda p: None, poll_timeout_ms=100).start()
    info = wait_for(named, what="the worker's connection name")
    assert (info.pid, info.queues, info.concurrency, info.done) == (os.getpid(),
                                                                     ("emails", "sms"), 3, 0)
    assert abs(info.started - time.time()) < 60
    dq.add_jobs("sms", [b"1"] * 5)
    wait_for(lambda: (named() or info).done == 5, what="done=5 in the name")
    w.stop(5)


def test_group_worker_names_its_connection_too(dq, r):
    import os

    for n in range(3):
        dq.qadd("events", json.dumps(n), 60)
    w = GroupWorker(dq, ["events"], "g", 2, lambda p: None, poll_timeout=0.2).start()
    info = wait_for(lambda: (i := named_worker(r)) is not None and i.done == 3 and i,
                    what="the group worker's name with done=3")
    assert (info.pid, info.queues, info.concurrency) == (os.getpid(), ("events",), 2)
    assert w.stop(5)


@pytest.mark.timeout(60)
def test_group_worker_logs_start_each_event_and_stop(dq, server, spawn_worker, tmp_path,
                                                     caplog):
    dq.qadd("events", json.dumps({"n": 1, "sleep": 0, "dir": str(tmp_path)}), 60)
    p = spawn_worker(server.port, "handlers:slow", "--queues", "events", "--group", "g",
                     "--poll-timeout-ms", "200")
    wait_for(lambda: "outcome=acked" in p.log_path.read_text(), what="the event's line")
    p.send_signal(signal.SIGTERM)
    assert p.wait(20) == 0
    text = p.log_path.read_text()
    assert "group worker started: group=g queues=events" in text
    line = next(ln for ln in text.splitlines() if "outcome=acked" in ln)
    assert " * event=event id=" in line and "queue=events group=g" in line
    assert "group worker stopped: group=g processed=1 failed=0" in text
    # in process: the records carry the fields, a failure its traceback, at WARNING
    caplog.set_level(logging.INFO, logger="disquepy.worker")

    def fails(payload):
        raise ValueError("no")

    w = GroupWorker(dq, ["events"], "other", 1, fails, lease=5, poll_timeout=0.2).start()
    wait_for(lambda: w.failed == 1)
    assert w.stop(5)
    (rec,) = [r for r in caplog.records if getattr(r, "disque", {}).get("group") == "other"]
    assert rec.levelno == logging.WARNING and rec.disque["outcome"] == "failed"
    assert isinstance(rec.exc_info[1], ValueError) and rec.disque["delivery"] == 1
