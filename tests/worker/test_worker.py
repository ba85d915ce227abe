"""The worker in-process against a real node: acks, queue priority, NACK, back-off,
dead letters, heartbeats, logs, decorated tasks."""

from __future__ import annotations

import json
import logging
import random
import threading
import time
import traceback

import pytest
from support import wait_for

from disquepy.client.envelope import unwrap, wrap
from disquepy.worker import (
    Backoff,
    RetryLater,
    Tasks,
    Worker,
    current_attempt,
    current_job,
    list_dead,
    requeue_dead,
)


def start(w: Worker) -> Worker:
    return w.start()


def test_success_acks_json_payloads(dq):
    got = []
    ids = [dq.add_job("q", json.dumps({"n": i})) for i in range(5)]
    w = Worker(dq, ["q"], 2, lambda p: got.append(p), poll_timeout_ms=100).start()
    wait_for(lambda: len(got) == 5, what="5 jobs handled")
    wait_for(lambda: w.stats["acked"] == 5, what="acks")
    assert w.stop(5)
    assert sorted(p["n"] for p in got) == list(range(5))
    assert all(dq.show(i) is None for i in ids)  # acked and collected on a single node


def test_bytes_and_text_bodies(dq):
    got = []
    dq.add_job("b", b"\xff\x00raw")
    dq.add_job("b", b"not json {")
    w = Worker(dq, ["b"], 1, got.append, body="bytes", poll_timeout_ms=100).start()
    wait_for(lambda: len(got) == 2)
    w.stop(5)
    assert got == [b"\xff\x00raw", b"not json {"]
    # json mode: a body that is not JSON arrives as bytes
    got.clear()
    dq.add_job("j", b"plain words")
    w = Worker(dq, ["j"], 1, got.append, poll_timeout_ms=100).start()
    wait_for(lambda: len(got) == 1)
    w.stop(5)
    assert got == [b"plain words"]


def test_queues_are_served_in_priority_order(dq):
    for i in range(3):
        dq.add_job("low", json.dumps(f"low{i}"))
    for i in range(3):
        dq.add_job("high", json.dumps(f"high{i}"))
    order = []
    w = Worker(dq, ["high", "low"], 1, order.append, poll_timeout_ms=100).start()
    wait_for(lambda: len(order) == 6)
    w.stop(5)
    assert order == ["high0", "high1", "high2", "low0", "low1", "low2"]


def test_a_failure_comes_back_after_the_default_back_off(dq):
    """No retry policy anywhere: the default (3 retries, exponential from 1 s). The same
    job comes back once its 1 s delay passed (NACK ... DELAY counts a nack), never at
    once."""
    seen = []

    def h(p):
        job = current_job()
        seen.append((job.id, job.nacks, time.monotonic()))
        if len(seen) == 1:
            raise ValueError("first try fails")

    jid = dq.add_job("q", "{}")
    w = Worker(dq, ["q"], 1, h, poll_timeout_ms=100).start()
    wait_for(lambda: w.stats["acked"] == 1, timeout=10)
    w.stop(5)
    assert [(i, n) for i, n, _ in seen] == [(jid, 0), (jid, 1)]
    assert 0.9 <= seen[1][2] - seen[0][2] < 2.5
    assert w.stats["retry-later"] == 1 and w.stats["nacked"] == 0


def test_backoff_delays_grow(dq, r):
    """Back-off retries are NACK ... DELAY: the same job (one ID through its retries)
    comes back after 1, 2 and 4 s."""
    ids, attempts, times = [], [], []

    def h(p):
        ids.append(current_job().id)
        attempts.append(current_attempt())
        times.append(time.monotonic())
        if current_attempt() < 4:
            raise RuntimeError("not yet")

    jid = dq.add_job("q", json.dumps({"x": 1}))
    w = Worker(dq, ["q"], 1, h, backoff=Backoff.exponential(base=1, factor=2, jitter=0),
               poll_timeout_ms=100).start()
    wait_for(lambda: w.stats["acked"] == 1, timeout=30)
    w.stop(5)
    assert attempts == [1, 2, 3, 4] and ids == [jid] * 4
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    for gap, delay in zip(gaps, [1, 2, 4], strict=True):
        assert delay - 0.3 <= gap < delay + 1.5, gaps
    assert w.stats["retry-later"] == 3 and w.stats["nacked"] == 0
    assert dq.status(jid).status == "completed"


def test_retry_later_exception_sets_the_delay(dq, r):
    seen = []

    def h(p):
        seen.append((p, current_job().id, time.monotonic()))
        if len(seen) == 1:
            raise RetryLater(delay=2)

    jid = dq.add_job("q", json.dumps({"k": "v"}))
    w = Worker(dq, ["q"], 1, h, poll_timeout_ms=100).start()  # no back-off policy
    wait_for(lambda: w.stats["acked"] == 1, timeout=20)
    w.stop(5)
    assert [(p, i) for p, i, _ in seen] == [({"k": "v"}, jid)] * 2  # same job, same body
    assert 1.7 <= seen[1][2] - seen[0][2] < 3.5


def test_dead_letter_after_n_failures_then_requeue(dq):
    calls = []

    def h(p):
        calls.append(p)
        raise ValueError(f"bad payload {p['n']}")

    jid = dq.add_job("q", json.dumps({"n": 7}))
    w = Worker(dq, ["q"], 1, h, dead_letter_after=3, poll_timeout_ms=100).start()
    wait_for(lambda: w.stats["dead-lettered"] == 1, timeout=20)
    w.stop(5)
    assert len(calls) == 3 and w.stats["retry-later"] == 2
    assert dq.show(jid) is None  # the original is acknowledged
    (dl,) = list_dead(dq, "q")
    assert dl.dead_queue == "q:dead" and dl.queue == "q" and dl.original_id == jid
    assert dl.json() == {"n": 7} and dl.nacks == 3 and dl.additional_deliveries == 0
    assert "ValueError" in dl.error and "bad payload 7" in dl.error
    assert abs(dl.failed_at / 1000 - time.time()) < 600
    raw = json.loads(dq.show(dl.id)["body"])
    assert set(raw) >= {"queue", "id", "body", "error", "nacks", "additional_deliveries",
                        "failed_at"}
    assert dq.qlen("q:dead") == 1 and dq.qlen("q") == 0
    # re-queue: the original body goes back to q, the dead letter is acknowledged
    assert requeue_dead(dq, "q") == 1
    assert dq.qlen("q:dead") == 0 and dq.show(dl.id) is None
    (back,) = dq.get_jobs("q", nohang=True)
    assert json.loads(back.body) == {"n": 7}


def test_requeue_dead_by_id_and_binary_bodies(dq):
    def h(p):
        raise KeyError("nope")

    a = dq.add_job("q", b"\xff\xfe")
    b = dq.add_job("q", b"\x00\x01")
    w = Worker(dq, ["q"], 1, h, body="bytes", dead_letter_after=1, poll_timeout_ms=100)
    w.start()
    wait_for(lambda: w.stats["dead-lettered"] == 2)
    w.stop(5)
    dls = list_dead(dq, "q")
    assert sorted(d.body for d in dls) == [b"\x00\x01", b"\xff\xfe"]
    assert requeue_dead(dq, "q", ids=[a]) == 1  # by original ID
    assert [d.original_id for d in list_dead(dq, "q")] == [b]
    assert [j.body for j in dq.get_jobs("q", nohang=True)] == [b"\xff\xfe"]


def test_dead_letter_after_additional_deliveries(dq, r):
    calls = []
    jid = dq.add_job("q", "{}", retry=1)
    # a consumer takes it and never acks (a crashed worker): it comes back after RETRY
    assert [j.id for j in dq.get_jobs("q")] == [jid]
    wait_for(lambda: dq.qlen("q") == 1, timeout=10, what="re-queue after retry")
    w = Worker(dq, ["q"], 1, calls.append, dead_letter_deliveries=1, poll_timeout_ms=100)
    w.start()
    wait_for(lambda: w.stats["dead-lettered"] == 1)
    w.stop(5)
    assert calls == []  # never handed to the handler
    (dl,) = list_dead(dq, "q")
    assert dl.original_id == jid and dl.additional_deliveries == 1
    assert "delivered 1 extra times" in dl.error


def steal(server, queue: str, seconds: float) -> list:
    """A second consumer polling ``queue`` for ``seconds``: the IDs it got (at most one)."""
    other = server.client()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        rep = other.execute_command("GETJOB", "NOHANG", "FROM", queue)
        if rep:
            return [rep[0][1].decode()]
        time.sleep(0.05)
    return []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("heartbeat", [True, False])
def test_heartbeats_keep_a_long_job_from_redelivery(dq, server, heartbeat):
    """RETRY 2 and a 4.5 s handler: with heartbeats no other consumer ever sees the job;
    without them (the control) it is re-queued and taken by the other consumer."""
    release = threading.Event()
    jid = dq.add_job("q", "{}", retry=2)

    def h(p):
        release.wait(4.5)

    w = Worker(dq, ["q"], 1, h, heartbeat=heartbeat, poll_timeout_ms=100).start()
    wait_for(lambda: (dq.show(jid) or {}).get("state") == "active", what="job taken")
    stolen = steal(server, "q", 4.2)
    release.set()
    w.stop(5)
    if heartbeat:
        assert stolen == []
        assert w.stats["acked"] == 1
    else:
        assert stolen == [jid]


@pytest.mark.timeout(60)
def test_a_job_that_waited_in_its_queue_is_kept_too(dq, server):
    """RETRY counts from when the job was queued: after 2 s in the queue a RETRY 3 job
    is re-queued about 1 s after delivery. The worker reads that from SHOW and sends
    WORKING at once instead of at 80% of the retry."""
    release = threading.Event()
    jid = dq.add_job("q", "{}", retry=3)
    time.sleep(2.0)

    def h(p):
        release.wait(3.0)

    w = Worker(dq, ["q"], 1, h, poll_timeout_ms=100).start()
    wait_for(lambda: (dq.show(jid) or {}).get("state") == "active", what="job taken")
    stolen = steal(server, "q", 2.5)
    release.set()
    w.stop(5)
    assert stolen == [] and w.stats["acked"] == 1


def commandstats(r) -> dict[str, int]:
    """The node's calls per command (INFO commandstats), e.g. {"getjob": 3}."""
    return {k.removeprefix("cmdstat_"): v["calls"]
            for k, v in r.execute_command("INFO", "commandstats").items()}


def test_a_busy_worker_fetches_and_acks_in_batches(dq, r):
    """400 queued jobs: the worker takes them in batches (GETJOB ... COUNT n) and acks
    each batch with one ACKJOB sent in the write of the next fetch: a few dozen
    commands in all, not two per job; every job acked once, in order."""
    ids = dq.add_jobs("q", [json.dumps(i) for i in range(400)])
    before = commandstats(r)
    got = []
    w = Worker(dq, ["q"], 1, got.append, poll_timeout_ms=100).start()
    wait_for(lambda: w.stats["acked"] == 400, what="400 acks")
    assert w.stop(5)
    after = commandstats(r)
    calls = {k: after.get(k, 0) - before.get(k, 0) for k in ("getjob", "ackjob")}
    assert got == list(range(400))  # one queue: its order
    assert all(dq.show(i) is None for i in ids)
    # the first fetch takes one job (no handler time known yet), then up to 1 + 64 (7
    # batches, about 25 commands on a quiet machine); a fifth of a command per job at
    # most even when a loaded machine's pauses shrink the prefetch (it was 2 per job)
    assert calls["ackjob"] <= 80 and calls["getjob"] <= 160, calls
    assert w.stats["acked"] == 400 and sum(w.stats.values()) == 400


def test_stopping_worker_sends_the_acks_it_holds(dq):
    """A stop requested while a job finishes: its ACK still goes out (alone), no job is
    NACKed or left to come back."""
    ids = [dq.add_job("q", json.dumps(i)) for i in range(5)]
    w = Worker(dq, ["q"], 1, lambda p: p == 4 and w.request_stop(), poll_timeout_ms=100)
    w.start()
    wait_for(lambda: w.stopping and w.stats["acked"] == 5, what="5 acks after the stop")
    assert w.stop(5)
    assert all(dq.show(i) is None for i in ids)
    assert w.stats["requeued-on-stop"] == 0 and w.stats["acked"] == 5


def test_structured_log_line_per_job(dq, caplog):
    caplog.set_level(logging.INFO, logger="disquepy.worker")

    def h(p):
        if p == "bad":
            raise ValueError("x")

    ok = dq.add_job("q", '"good"')
    bad = dq.add_job("q", '"bad"')
    w = Worker(dq, ["q"], 1, h, dead_letter_after=1, poll_timeout_ms=100).start()
    wait_for(lambda: w.stats["acked"] + w.stats["dead-lettered"] == 2)
    w.stop(5)
    recs = {rec.disque["job"]: rec for rec in caplog.records if hasattr(rec, "disque")}
    assert recs[ok].disque["outcome"] == "acked" and recs[ok].disque["queue"] == "q"
    assert recs[bad].disque["outcome"] == "dead-lettered"
    for jid in (ok, bad):
        line = recs[jid].getMessage()
        assert "\n" not in line and f"job={jid}" in line and "queue=q" in line
        assert "duration_ms=" in line and recs[jid].disque["duration_ms"] >= 0


def test_decorated_tasks(server):
    app = Tasks([f"127.0.0.1:{server.port}"], dead_letter_after=2)
    done = []

    @app.task("emails", priority=1)
    def send_email(payload):
        """Send one email."""
        done.append(("email", payload["to"]))

    @app.task("urgent")
    def page(payload):
        done.append(("page", payload))

    assert send_email({"to": "direct"}) is None and done == [("email", "direct")]
    done.clear()
    send_email.delay({"to": "tom@example.net"})
    page.delay("wake up")
    assert app.queues() == ["urgent", "emails"]
    w = app.worker(concurrency=1, poll_timeout_ms=100).start()
    wait_for(lambda: len(done) == 2)
    w.stop(5)
    assert done == [("page", "wake up"), ("email", "tom@example.net")]
    assert send_email.__doc__ == "Send one email."
    app.client.close()


# -------------------------------------------------------------------- pure parts


def test_backoff_policy():
    b = Backoff.exponential(base=1, factor=2, max=30, jitter=0)
    assert [b.delay(a) for a in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]
    assert [Backoff.fixed(5, jitter=0).delay(a) for a in (1, 5)] == [5, 5]
    rng = random.Random(1)
    j = Backoff.exponential(base=10, jitter=0.2)
    ds = [j.delay(1, rng) for _ in range(200)]
    assert min(ds) >= 8 and max(ds) <= 12 and len(set(ds)) > 1
    seq = [Backoff.exponential(base=1, jitter=0.3).delay(a, rng) for a in range(1, 10)]
    assert seq == sorted(seq)
    assert Backoff.parse("fixed:3") == Backoff.fixed(3)
    assert Backoff.parse("exponential:2:3:60;jitter=0") == Backoff.exponential(2, 3, 60, 0)
    with pytest.raises(ValueError):
        Backoff.parse("linear")


def test_envelope_roundtrip():
    for body in (b"plain", b"\xff\x00", b'{"_disquepy": "user data"}'):
        env = unwrap(wrap(body, 3, "D-1"))
        assert (env.body, env.attempt, env.first_id) == (body, 3, "D-1")
    assert unwrap(b'{"a": 1}').attempt == 1
    assert unwrap(b'{"_disquepy":broken').body == b'{"_disquepy":broken'


def test_backoff_keeps_retry_and_remaining_ttl(dq, r):
    shown = []

    def h(p):
        s = r.execute_command("SHOW", current_job().id)
        shown.append(dict(zip(s[::2], s[1::2], strict=True)))
        if current_attempt() == 1:
            raise RuntimeError("again")

    dq.add_job("q", "{}", retry=7, ttl=600)
    w = Worker(dq, ["q"], 1, h, backoff=Backoff.fixed(1, jitter=0), poll_timeout_ms=100)
    w.start()
    wait_for(lambda: w.stats["acked"] == 1, timeout=20)
    w.stop(5)
    assert [s[b"retry"] for s in shown] == [7, 7]  # the same job: its own retry and TTL
    assert [s[b"id"] for s in shown] == [shown[0][b"id"]] * 2 and shown[1][b"nacks"] == 1
    assert shown[1][b"ttl"] <= 600


def test_backoff_past_the_ttl_dead_letters(dq):
    def h(p):
        raise RuntimeError("always")

    jid = dq.add_job("q", "{}", ttl=5, retry=1)
    w = Worker(dq, ["q"], 1, h, backoff=Backoff.fixed(30, jitter=0), poll_timeout_ms=100)
    w.start()
    wait_for(lambda: w.stats["dead-lettered"] == 1)
    w.stop(5)
    (dl,) = list_dead(dq, "q")
    assert dl.original_id == jid and "TTL ends before the next attempt" in dl.error


def test_handler_failure_record_carries_its_traceback(dq, caplog):
    """A handler's exception is the log record's exc_info (the traceback reaches any
    handler the application installs) and the outcome a WARNING; a RetryLater is a
    request, logged as INFO without a traceback."""
    caplog.set_level(logging.INFO, logger="disquepy.worker")

    def h(p):
        if p == "later":
            raise RetryLater(30)
        raise KeyError(p)

    ids = {dq.add_job("q", json.dumps(b)): b for b in ("later", "fails")}
    w = Worker(dq, ["q"], 1, h, poll_timeout_ms=100).start()
    wait_for(lambda: w.stats["retry-later"] == 2)
    w.stop(5)
    recs = {}
    for rec in caplog.records:
        if hasattr(rec, "disque"):
            recs.setdefault(ids.get(rec.disque["job"]), rec)
    failed, later = recs["fails"], recs["later"]
    assert failed.disque["outcome"] == "retry-later" and failed.levelno == logging.WARNING
    assert failed.disque["delay"] == 1  # the default policy's first back-off
    assert isinstance(failed.exc_info[1], KeyError)
    assert any(f.name == "h" for f in traceback.extract_tb(failed.exc_info[2]))
    assert "\n" not in failed.getMessage()
    assert later.disque["outcome"] == "retry-later" and later.levelno == logging.INFO
    assert later.disque["delay"] == 30 and not later.exc_info


@pytest.mark.parametrize(("spec", "said"), [
    ("fixed:x", "fixed delay must be a number, got 'x'"),
    ("fixed:", "fixed delay must be a number, got ''"),
    ("fixed:1:2", "fixed takes one number"),
    ("exponential:1:2:3:4", "up to three numbers"),
    ("exponential:0", "base > 0"),
    ("exponential:1:2:600;jiter=0.2", "unknown back-off option 'jiter=0.2'"),
    ("fixed:5;jitter=1.5", "jitter must be >= 0 and < 1"),
    ("fixed:inf", "finite"),
    ("linear", "unknown back-off 'linear' (fixed or exponential)"),
])
def test_backoff_parse_says_what_is_wrong(spec, said):
    """Every malformed spec is a ValueError naming the mistake (never a TypeError, never
    an option silently dropped)."""
    with pytest.raises(ValueError) as e:
        Backoff.parse(spec)
    assert said in str(e.value)
    assert Backoff.parse("fixed") == Backoff.fixed(1)


def test_backoff_chain_keeps_the_first_id_to_the_dead_letter(dq):
    ids = []

    def h(p):
        ids.append(current_job().id)
        raise RuntimeError("always")

    jid = dq.add_job("q", "{}", ttl=600)
    w = Worker(dq, ["q"], 1, h, backoff=Backoff.fixed(1, jitter=0), dead_letter_after=3,
               poll_timeout_ms=100).start()
    wait_for(lambda: w.stats["dead-lettered"] == 1, timeout=30)
    w.stop(5)
    assert ids == [jid] * 3  # one job through its retries (NACK ... DELAY)
    (dl,) = list_dead(dq, "q")
    assert dl.original_id == jid and "last_id" not in dl.extra
    st = dq.status(jid)  # the job itself ended as failed, with the error
    assert st.status == "failed" and "always" in st.error and st.attempt == 3


def test_a_handler_result_is_the_jobs_result_and_wait_tells_failure(dq):
    """The handler's return value goes with the ACK (ACKJOB ... RESULT); wait() tells a
    completed job (with it) from a failed one (with its error)."""

    def h(p):
        if p.get("fail"):
            raise ValueError("bad input")
        return {"sum": p["a"] + p["b"]} if "a" in p else None

    ok = dq.add_job("q", json.dumps({"a": 2, "b": 3}))
    plain = dq.add_job("q", json.dumps({"x": 1}))
    bad = dq.add_job("q", json.dumps({"fail": True}))
    w = Worker(dq, ["q"], 2, h, dead_letter_after=1, poll_timeout_ms=100).start()
    try:
        st = dq.wait(ok, 10)
        assert (st.status, st.result, st.ok, st.finished) == ("completed", {"sum": 5}, True,
                                                              True)
        assert dq.wait(plain, 10).result is None and dq.wait_for_ack(plain, 10) is True
        st = dq.wait(bad, 10)
        assert st.status == "failed" and "bad input" in st.error and not st.ok
        t0 = time.monotonic()
        assert dq.wait_for_ack(bad, 10) is False  # at once: it ended, as failed
        assert time.monotonic() - t0 < 5  # not at the 10 s timeout
    finally:
        w.stop(5)
