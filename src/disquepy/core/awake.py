"""The one ordered index that drives every timer of the node.

Delay expiry, retry re-queue, WILLQUEUE, TTL expiry and ack garbage collection all
reduce to "wake this job at time T" (``job.awake``, ms); so do a consumer group's
event expiry and lease ends, and its requests and clients waiting with a deadline
(core/groups/). What the index wakes is a :class:`Timer`: a job, or one of the
groups' (the node tells them apart when they fire). Timers sit in time buckets of
``GRANULARITY`` ms and a heap orders the bucket keys. A bucket fires whole once the
clock passes its end: a timer is never early and at most GRANULARITY-1 ms late
(Disque's own timer resolution is coarser). Due timers come out sorted by (awake,
ctime, id), so runs are deterministic.

Buckets are plain lists (8 bytes a job). Rescheduling or cancelling a job leaves its
old entry behind, recognisable because the job's ``awake`` no longer falls in that
bucket; a bucket is compacted when over half its entries are stale, so memory stays
within twice the live entries. Jobs leave a bucket mostly in the order they entered
it (consumed oldest first), so a bucket also knows how many of its first entries
went stale, in order: such an entry is replaced at once by a placeholder (the job is
freed when its work is done, while its memory is still in the cache, not at the next
compaction), and while the stale entries are exactly those first ones, compacting is
dropping a prefix of the list: no job is read. Consumers taking turns ack a little
out of order, so a cancel also looks a few entries past the first live one (the first
entries then become placeholders as the ones before them go), and a compaction drops
just the prefix when that is enough to bring the bucket back within twice its live
entries.
"""

from __future__ import annotations

import heapq
from typing import Final

GRANULARITY: Final = 8  # ms
_COMPACT_MIN: Final = 16  # buckets smaller than this are never compacted
_NEAR: Final = 8  # how far past a bucket's first live entry a cancel looks for its job


class Timer:
    """What the awake index wakes. ``awake``: when (ms), 0 while not scheduled;
    ``ctime`` and ``id`` order the timers due at the same ms (a job's creation time
    and ID; a sequence number and b"" for the groups' requests and clients)."""

    __slots__ = ("id", "ctime", "awake")

    def __init__(self, tid: bytes, ctime: int) -> None:
        self.id = tid
        self.ctime = ctime
        self.awake = 0


def _order(job: Timer) -> tuple[int, int, bytes]:
    return (job.awake, job.ctime, job.id)


NEVER: Final = float("inf")


_GONE: Final = Timer(b"", 0)  # the placeholder of a stale entry (never scheduled: awake 0)


class _Bucket:
    """The jobs listed in one time bucket, how many of those entries went stale, and
    how many of its first entries did, in order (``head``: each replaced by _GONE;
    one dict lookup per cancel finds all three)."""

    __slots__ = ("jobs", "stale", "head")

    def __init__(self, job: Timer) -> None:
        self.jobs: list[Timer] = [job]
        self.stale = 0
        self.head = 0


class AwakeIndex:
    __slots__ = ("_buckets", "_heap", "hint")

    def __init__(self) -> None:
        self._buckets: dict[int, _Bucket] = {}
        self._heap: list[int] = []
        # the earliest firing time of buckets created since the owner last looked:
        # lets a driver keep its timer without recomputing next_due() every event
        self.hint: float = NEVER

    def __len__(self) -> int:
        """Live entries (jobs scheduled); O(entries), for tests and INFO."""
        return sum(len({id(j) for j in self._live(b, bk.jobs)})
                   for b, bk in self._buckets.items())

    @staticmethod
    def _live(b: int, lst: list[Timer]) -> list[Timer]:
        """The entries of bucket ``b`` still due there. A job moved out of a bucket and
        back may be listed twice; pop_due takes it once."""
        out = []
        for j in lst:
            a = j.awake
            if a and a // GRANULARITY == b:
                out.append(j)
        return out

    def schedule(self, job: Timer, when: int) -> None:
        """(Re)schedule ``job`` to wake at ``when`` ms; 0 means unscheduled."""
        old = job.awake
        if old:
            ob = old // GRANULARITY
            if when and ob == when // GRANULARITY:
                job.awake = when
                return
            job.awake = 0
            self._went_stale(ob, job)
        job.awake = when
        if when:
            b = when // GRANULARITY
            bk = self._buckets.get(b)
            if bk is None:
                self._buckets[b] = _Bucket(job)
                heapq.heappush(self._heap, b)
                t = b * GRANULARITY + GRANULARITY - 1
                if t < self.hint:
                    self.hint = float(t)  # mypyc: a float attribute takes no int
            else:
                bk.jobs.append(job)

    def add_new(self, job: Timer, when: int) -> None:
        """schedule() for a job that is not scheduled yet (job.awake == 0)."""
        job.awake = when
        b = when // GRANULARITY
        bk = self._buckets.get(b)
        if bk is not None:
            bk.jobs.append(job)
            return
        self._buckets[b] = _Bucket(job)
        heapq.heappush(self._heap, b)
        t = b * GRANULARITY + GRANULARITY - 1
        if t < self.hint:
            self.hint = float(t)

    def cancel(self, job: Timer) -> None:
        if job.awake:
            b = job.awake // GRANULARITY
            job.awake = 0
            self._went_stale(b, job)

    @staticmethod
    def cancel_near(job: Timer) -> None:
        """cancel() for a job due soon (a replication retry, tens of ms away): its entry
        is left to go stale in its bucket uncounted, which fires shortly and drops it,
        and the compaction bookkeeping is skipped. Outside the memory bound above only
        until that bucket fires."""
        job.awake = 0

    def _went_stale(self, b: int, job: Timer) -> None:
        """``job``'s entry in bucket ``b`` went stale (its awake is no longer there)."""
        bk = self._buckets.get(b)
        if bk is None:
            return
        n = bk.stale + 1
        lst = bk.jobs
        head = bk.head
        size = len(lst)
        if head < size:
            if lst[head] is job:  # the next in order: let go of it now, and of the
                lst[head] = _GONE  # placeholders just after it (see below)
                head += 1
                while head < size and lst[head] is _GONE:
                    head += 1
                bk.head = head
            else:  # nearly in order (consumers take turns): a few entries further
                end = head + _NEAR if head + _NEAR < size else size
                for i in range(head + 1, end):
                    if lst[i] is job:
                        lst[i] = _GONE
                        break
        if n * 2 > size and size >= _COMPACT_MIN:
            if head >= 2 * n - size:  # dropping the first entries, unread, is enough
                del lst[:head]  # to keep the bucket within twice its live entries
                bk.stale = n - head
            else:
                bk.jobs = self._live(b, lst)
                bk.stale = 0
            bk.head = 0
        else:
            bk.stale = n

    def next_due(self) -> int | None:
        """The time (ms) at which the earliest bucket fires, or None."""
        heap, buckets = self._heap, self._buckets
        while heap:
            b = heap[0]
            bk = buckets.get(b)
            if bk is not None and bk.jobs:
                return b * GRANULARITY + GRANULARITY - 1
            heapq.heappop(heap)
            buckets.pop(b, None)
        return None

    def pop_due(self, now: int) -> list[Timer]:
        """Remove and return the jobs of every bucket that ended by ``now``, in order.

        Returned jobs have ``awake`` reset to 0: the caller reschedules what lives on.
        """
        heap, buckets = self._heap, self._buckets
        last = (now - GRANULARITY + 1) // GRANULARITY  # the last bucket that has ended
        due: dict[int, Timer] = {}  # by identity: a job may have been listed twice in one bucket
        while heap and heap[0] <= last:
            b = heapq.heappop(heap)
            bk = buckets.pop(b, None)
            if bk is not None:
                for j in bk.jobs:
                    a = j.awake
                    if a and a // GRANULARITY == b:
                        due[id(j)] = j
        out = sorted(due.values(), key=_order)
        for j in out:
            j.awake = 0
        return out
