"""The timer index (core/awake.py): jobs wake in order, never early, once each."""

from __future__ import annotations

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
