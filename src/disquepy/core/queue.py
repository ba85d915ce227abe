"""Queues: jobs ordered by creation time, blocked consumers, pause state, counters.

A queue holds only jobs in state ``queued``, ordered by ``ctime`` (ns, unique per
node), so a job re-queued after a failed delivery goes back to its place by age, not to
the tail. Consumers blocked in GETJOB wait in ``waiters`` and are served FIFO.

Storage is two parts. New jobs arrive in creation order, so almost every insert is
an append: those live in a deque (O(1) append and pop, 8 bytes a job). A job older
than the newest one in the deque (a re-queue, a NACK, a job from another node) goes
to a sorted overflow list instead. The head of the queue is the older of the two
heads, so the order seen by GETJOB and QPEEK is the single ctime order.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator
from itertools import islice
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Final

from sortedcontainers import SortedKeyList

from .job import F_OVERFLOW

if TYPE_CHECKING:
    from .client import Client
    from .job import Job

PAUSED_IN: Final = 1  # Queue.flags: QPAUSE in (no new jobs)
PAUSED_OUT: Final = 2  # QPAUSE out (no deliveries)
PAUSED_ALL: Final = PAUSED_IN | PAUSED_OUT  # the pause bits, an index of PAUSE_NAMES

PAUSE_NAMES: Final = (b"none", b"in", b"out", b"all")

# import rate (QSTAT import-rate): jobs counted per window of at most IMPORT_WINDOW_MS,
# over at least IMPORT_MIN_MS (a burst must not read as infinite), forgotten after
# IMPORT_FORGET_MS without imports: 4 jobs at once read 80/s, fading to 0 over 5 s
IMPORT_WINDOW_MS: Final = 1000
IMPORT_MIN_MS: Final = 50
IMPORT_FORGET_MS: Final = 5000

_by_ctime = attrgetter("ctime")


class JobQueue:
    """Jobs in ctime order: an in-order deque plus a sorted overflow."""

    __slots__ = ("tail", "overflow")

    def __init__(self) -> None:
        self.tail: deque[Job] = deque()
        self.overflow: Any = None  # SortedKeyList (untyped) or None

    def __len__(self) -> int:
        return len(self.tail) + (len(self.overflow) if self.overflow else 0)

    def __bool__(self) -> bool:
        return bool(self.tail) or bool(self.overflow)

    def add(self, job: Job) -> None:
        tail = self.tail
        if not tail or job.ctime > tail[-1].ctime:
            tail.append(job)
            return
        if self.overflow is None:
            self.overflow = SortedKeyList(key=_by_ctime)
        job.flags |= F_OVERFLOW
        self.overflow.add(job)

    def remove(self, job: Job) -> None:
        if job.flags & F_OVERFLOW:
            job.flags &= ~F_OVERFLOW
            self.overflow.remove(job)
        else:
            self.tail.remove(job)  # by identity; queued jobs leave mostly near the head

    def pop(self) -> Job:
        ov = self.overflow
        tail = self.tail
        if ov and (not tail or ov[0].ctime < tail[0].ctime):
            job: Job = ov.pop(0)
            job.flags &= ~F_OVERFLOW
            return job
        return tail.popleft()

    def first(self, count: int) -> list[Job]:
        """The ``count`` oldest jobs, oldest first."""
        if not self.overflow:
            return list(islice(self.tail, count))
        return list(islice(heapq.merge(self.tail, self.overflow, key=_by_ctime), count))

    def last(self, count: int) -> list[Job]:
        """The ``count`` newest jobs, newest first."""
        if not self.overflow:
            return list(islice(reversed(self.tail), count))
        merged = heapq.merge(reversed(self.tail), reversed(self.overflow), key=_by_ctime,
                             reverse=True)
        return list(islice(merged, count))

    def __iter__(self) -> Iterator[Job]:
        if not self.overflow:
            return iter(self.tail)
        return heapq.merge(self.tail, self.overflow, key=_by_ctime)


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
        "needjobs_asked",
        "import_start",
        "import_count",
        "import_prev_start",
        "import_prev_count",
        "import_last",
    )

    def __init__(self, name: bytes, now: int) -> None:
        self.name = name
        self.jobs = JobQueue()
        self.ctime = now
        self.atime = now
        self.jobs_in = 0
        self.jobs_out = 0
        self.flags = 0
        self.waiters: deque[Client] = deque()  # blocked in GETJOB, served FIFO
        self.needjobs_bcast_time = -(1 << 40)  # when NEEDJOBS was last broadcast (ms)
        self.needjobs_adhoc_time = 0  # when it may next go to recent sources (ms)
        self.needjobs_bcast_attempt = 0
        self.needjobs_adhoc_attempt = 0
        self.needjobs_responders: dict[str, int] = {}  # node id -> when it sent jobs (ms)
        self.needjobs_asked = False  # peers may remember a NEEDJOBS of ours (to cancel)
        self.import_start = 0  # the current import window (ms) and its jobs
        self.import_count = 0
        self.import_prev_start = 0  # the window before it
        self.import_prev_count = 0
        self.import_last = 0  # when the last job was imported

    def note_import(self, now: int) -> None:
        """A job came in from another node (YOURJOBS)."""
        if now - self.import_start > IMPORT_WINDOW_MS:
            self.import_prev_start, self.import_prev_count = self.import_start, self.import_count
            self.import_start, self.import_count = now, 0
        self.import_count += 1
        self.import_last = now

    def import_rate(self, now: int) -> int:
        """Jobs imported per second (QSTAT import-rate, QSCAN IMPORTRATE), over the
        current and previous windows, rounded up; a burst reads high at once (its time
        counted as at least IMPORT_MIN_MS) and fades; 0 once nothing came for
        IMPORT_FORGET_MS."""
        if not self.import_count or now - self.import_last > IMPORT_FORGET_MS:
            return 0
        count, start = self.import_count, self.import_start
        if self.import_prev_count:
            count += self.import_prev_count
            start = self.import_prev_start
        return -(-count * 1000 // max(IMPORT_MIN_MS, now - start))

    def __len__(self) -> int:
        return len(self.jobs)

    def __repr__(self) -> str:
        return f"<Queue {self.name!r} len={len(self.jobs)}>"

    @property
    def pause_name(self) -> bytes:
        return PAUSE_NAMES[self.flags & PAUSED_ALL]

    def push(self, job: Job) -> None:
        self.jobs.add(job)
        self.jobs_in += 1

    def remove(self, job: Job) -> None:
        """Take a job out (DEQUEUE, ACK, delete): not counted as jobs-out."""
        self.jobs.remove(job)

    def pop(self) -> Job:
        """Remove and return the oldest job for delivery; the queue must not be empty."""
        self.jobs_out += 1
        return self.jobs.pop()

    def peek(self, count: int) -> list[Job]:
        """Oldest ``count`` jobs first, or for a negative count the newest first."""
        return self.jobs.first(count) if count >= 0 else self.jobs.last(-count)

    def removable(self) -> bool:
        """Empty, nobody blocked on it and not paused: may be evicted when idle."""
        return not self.jobs and not self.waiters and not self.flags
