"""Queues: jobs ordered by creation time, blocked consumers, pause state, counters.

A queue holds only jobs in state ``queued``, sorted by ``ctime`` (ns, unique per
node), so a job re-queued after a failed delivery goes back to its place by age, not to
the tail. Consumers blocked in GETJOB wait in ``waiters`` and are served FIFO.
"""

from __future__ import annotations

from collections import deque
from operator import attrgetter

from sortedcontainers import SortedKeyList

PAUSED_IN = 1
PAUSED_OUT = 2
PAUSE_NAMES = (b"none", b"in", b"out", b"all")

_by_ctime = attrgetter("ctime")


class Queue:
    __slots__ = (
        "name",
        "jobs",
        "ctime",
        "atime",
        "jobs_in",
        "jobs_out",
        "flags",
        "waiters",
        # federation (NEEDJOBS / YOURJOBS) bookkeeping
        "needjobs_bcast_time",
        "needjobs_adhoc_time",
        "needjobs_bcast_attempt",
        "needjobs_adhoc_attempt",
        "needjobs_responders",
        "import_window_start",
        "import_window_count",
        "import_rate",
    )

    def __init__(self, name: bytes, now: int) -> None:
        self.name = name
        self.jobs = SortedKeyList(key=_by_ctime)
        self.ctime = now
        self.atime = now
        self.jobs_in = 0
        self.jobs_out = 0
        self.flags = 0
        self.waiters: deque = deque()
        self.needjobs_bcast_time = 0
        self.needjobs_adhoc_time = 0
        self.needjobs_bcast_attempt = 0
        self.needjobs_adhoc_attempt = 0
        self.needjobs_responders: dict = {}
        self.import_window_start = 0
        self.import_window_count = 0
        self.import_rate = 0

    def __len__(self) -> int:
        return len(self.jobs)

    def __repr__(self) -> str:
        return f"<Queue {self.name!r} len={len(self.jobs)}>"

    @property
    def pause_name(self) -> bytes:
        return PAUSE_NAMES[self.flags & 3]

    def push(self, job) -> None:
        self.jobs.add(job)
        self.jobs_in += 1

    def remove(self, job) -> None:
        """Take a job out (DEQUEUE, ACK, delete): not counted as jobs-out."""
        self.jobs.remove(job)

    def pop(self):
        """Remove and return the oldest job for delivery; the queue must not be empty."""
        self.jobs_out += 1
        return self.jobs.pop(0)

    def peek(self, count: int) -> list:
        """Oldest ``count`` jobs first, or for a negative count the newest first."""
        jobs = self.jobs
        if count >= 0:
            return list(jobs.islice(0, count))
        return list(jobs.islice(max(0, len(jobs) + count), len(jobs), reverse=True))

    def removable(self) -> bool:
        """Empty, nobody blocked on it and not paused: may be evicted when idle."""
        return not self.jobs and not self.waiters and not self.flags
