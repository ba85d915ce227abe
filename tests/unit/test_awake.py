"""The timer index (core/awake.py): jobs wake in order, never early, once each."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from disquepy.core.awake import GRANULARITY, AwakeIndex
from disquepy.core.job import Job


def J(n: int) -> Job:
    """A job created at ``n`` (the index reads awake, ctime and id; the compiled index
    takes real Jobs only)."""
    return Job(b"%040d" % n, b"q", b"", n, 60)


def test_jobs_wake_in_time_order_and_never_early():
    ix = AwakeIndex()
    jobs = [J(i) for i in range(6)]
    for j, at in zip(jobs, (500, 100, 100, 37, 900, 101), strict=True):
        ix.schedule(j, at)
    assert ix.pop_due(36) == []
    assert ix.pop_due(37 + GRANULARITY - 1) == [jobs[3]]
    assert ix.pop_due(200) == [jobs[1], jobs[2], jobs[5]]  # by (awake, ctime, id)
    assert ix.pop_due(10_000) == [jobs[0], jobs[4]]
    assert len(ix) == 0 and ix.next_due() is None
    assert all(j.awake == 0 for j in jobs)


def test_a_rescheduled_or_cancelled_job_wakes_once_at_its_new_time():
    ix = AwakeIndex()
    a, b = J(1), J(2)
    ix.schedule(a, 100)
    ix.schedule(b, 100)
    ix.schedule(a, 5000)  # moved to a later bucket: its old entry is stale
    ix.cancel(b)
    assert ix.pop_due(1000) == []
    assert ix.pop_due(6000) == [a]
    assert ix.pop_due(100_000) == []


def test_cancel_compacts_a_bucket_once_most_of_it_is_stale():
    ix = AwakeIndex()
    jobs = [J(i) for i in range(40)]
    for j in jobs:
        ix.schedule(j, 800)
    for j in jobs[:30]:
        ix.cancel(j)
    bucket = 800 // GRANULARITY
    assert len(ix._buckets[bucket].jobs) <= 2 * 10  # compacted: within twice the live entries
    assert ix.pop_due(1000) == jobs[30:]


def test_cancel_near_leaves_the_entry_to_go_stale_in_its_bucket():
    ix = AwakeIndex()
    waiting, moved, same = J(1), J(2), J(3)
    for j in (waiting, moved, same):
        ix.schedule(j, 50)  # a replication retry
    for j in (waiting, moved, same):
        ix.cancel_near(j)
    assert waiting.awake == 0
    ix.schedule(moved, 300_000)  # queued: re-queue time far away
    ix.schedule(same, 52)  # rescheduled into the same bucket: listed twice there
    assert ix.pop_due(60) == [same]  # once, and neither of the others
    assert ix.pop_due(200_000) == []
    assert ix.pop_due(400_000) == [moved]
    assert len(ix) == 0


def test_jobs_cancelled_in_the_order_they_were_listed_are_let_go_at_once():
    ix = AwakeIndex()
    jobs = [J(i) for i in range(100)]
    for j in jobs:
        ix.schedule(j, 800)
    bucket = ix._buckets[800 // GRANULARITY]
    for k, j in enumerate(jobs[:70]):
        ix.cancel(j)
        assert not any(e is j for e in bucket.jobs), k  # no longer held by the index
    assert len(bucket.jobs) <= 2 * 30
    ix.cancel(jobs[90])  # out of order: left stale in place, then compacted away
    ix.schedule(jobs[80], 5000)
    assert ix.pop_due(1000) == [j for j in jobs[70:] if j not in (jobs[80], jobs[90])]
    assert ix.pop_due(10_000) == [jobs[80]]


def test_jobs_cancelled_nearly_in_order_are_let_go_at_once_too():
    """Consumers taking turns ack a little out of order: each job is let go at its
    cancel, and the bucket shrinks by dropping its first entries."""
    ix = AwakeIndex()
    jobs = [J(i) for i in range(100)]
    for j in jobs:
        ix.schedule(j, 800)
    bucket = ix._buckets[800 // GRANULARITY]
    order = [k + d for k in range(0, 80, 4) for d in (2, 0, 3, 1)]  # within 4 of order
    for k in order:
        ix.cancel(jobs[k])
        assert not any(e is jobs[k] for e in bucket.jobs), k
    # compacted by dropping first entries: what is left is the live jobs in order,
    # behind at most a few placeholders (never scheduled: awake 0)
    assert len(bucket.jobs) <= 2 * 20
    assert [e for e in bucket.jobs if e.awake] == jobs[80:]
    ix.cancel(jobs[99])  # further than the window: left stale, as before
    assert any(e is jobs[99] for e in bucket.jobs)
    assert ix.pop_due(1000) == jobs[80:99]


def test_stale_entries_past_the_first_ones_are_compacted_by_reading_the_jobs():
    ix = AwakeIndex()
    jobs = [J(i) for i in range(40)]
    for j in jobs:
        ix.schedule(j, 800)
    # 1 in order, then 20 out of order, none near the first live entry: dropping the
    # first entry would not be enough
    for j in jobs[:1] + jobs[39:9:-2] + jobs[10:17:2]:
        ix.cancel(j)
    ix.cancel(jobs[18])  # the 21st: over half stale, not only the first ones
    bucket = ix._buckets[800 // GRANULARITY]
    live = [j for j in jobs if j.awake]
    assert len(live) == 19 and bucket.jobs == live


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["schedule", "cancel", "pop"]),
                          st.integers(0, 39), st.integers(1, 400)), max_size=300))
def test_the_index_wakes_what_a_plain_model_says(ops):
    """Schedules, cancels (mostly in listing order, as a consumer acks) and pops
    against a dict of job -> awake: each due job comes out once, in order, on time."""
    ix = AwakeIndex()
    jobs = [J(i) for i in range(40)]
    model: dict[int, int] = {}  # job index -> awake ms
    now = 0
    for kind, k, t in ops:
        if kind == "schedule":
            ix.schedule(jobs[k], now + t)
            model[k] = now + t
        elif kind == "cancel":
            # the oldest scheduled job when k is even (in order), else job k
            k = min(model, key=lambda m: (model[m], m)) if model and k % 2 == 0 else k
            ix.cancel(jobs[k])
            model.pop(k, None)
        else:
            now += t
            last = (now - GRANULARITY + 1) // GRANULARITY
            due = sorted((m for m, a in model.items() if a // GRANULARITY <= last),
                         key=lambda m: (model[m], m))
            assert ix.pop_due(now) == [jobs[m] for m in due]
            for m in due:
                del model[m]
        for b, bk in ix._buckets.items():  # memory within twice the live entries
            live = sum(1 for j in bk.jobs if j.awake and j.awake // GRANULARITY == b)
            assert len(bk.jobs) < 16 or len(bk.jobs) <= 2 * live
    assert len(ix) == len(model)
