"""The one ordered index that drives every per-job timer.

Delay expiry, retry re-queue, WILLQUEUE, TTL expiry and ack garbage collection all
reduce to "wake this job at time T" (``job.awake``, ms). Jobs sit in time buckets of
``GRANULARITY`` ms (a set per bucket, so rescheduling or deleting a job is O(1) and
leaves nothing stale behind) and a heap orders the bucket keys. A bucket fires whole
once the clock passes its end: a job is never early and at most GRANULARITY-1 ms late
(Disque's own timer resolution is coarser). Due jobs come out sorted by
(awake, ctime, id), so runs are deterministic.
"""

from __future__ import annotations

import heapq

GRANULARITY = 8  # ms


def _order(job):
    return (job.awake, job.ctime, job.id)


class AwakeIndex:
    __slots__ = ("_buckets", "_heap")

    def __init__(self) -> None:
        self._buckets: dict[int, set] = {}
        self._heap: list[int] = []

    def __len__(self) -> int:
        return sum(len(s) for s in self._buckets.values())

    def schedule(self, job, when: int) -> None:
        """(Re)schedule ``job`` to wake at ``when`` ms; 0 means unscheduled."""
        old = job.awake
        if old:
            ob = old // GRANULARITY
            nb = when // GRANULARITY
            if ob == nb and when:
                job.awake = when
                return
            s = self._buckets.get(ob)
            if s is not None:
                s.discard(job)
        job.awake = when
        if when:
            b = when // GRANULARITY
            s = self._buckets.get(b)
            if s is None:
                self._buckets[b] = {job}
                heapq.heappush(self._heap, b)
            else:
                s.add(job)

    def cancel(self, job) -> None:
        if job.awake:
            s = self._buckets.get(job.awake // GRANULARITY)
            if s is not None:
                s.discard(job)
            job.awake = 0

    def next_due(self) -> int | None:
        """The time (ms) at which the earliest bucket fires, or None."""
        heap, buckets = self._heap, self._buckets
        while heap:
            b = heap[0]
            if buckets.get(b):
                return b * GRANULARITY + GRANULARITY - 1
            heapq.heappop(heap)
            buckets.pop(b, None)
        return None

    def pop_due(self, now: int) -> list:
        """Remove and return the jobs of every bucket that ended by ``now``, in order.

        Returned jobs have ``awake`` reset to 0: the caller reschedules what lives on.
        """
        heap, buckets = self._heap, self._buckets
        last = (now - GRANULARITY + 1) // GRANULARITY  # the last bucket that has ended
        out: list = []
        while heap and heap[0] <= last:
            s = buckets.pop(heapq.heappop(heap), None)
            if s:
                out.extend(s)
        for j in out:
            j.awake = 0
        if len(out) > 1:
            out.sort(key=_order)
        return out
