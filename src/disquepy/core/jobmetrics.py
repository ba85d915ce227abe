"""Per-queue job counters and time histograms, for ``JOBMETRICS`` (disque-web's /metrics).

What a node counts, for the queues of the jobs it acted on (so summing over the nodes
counts each event once):

* ``added`` (ADDJOB here), ``delivered`` (GETJOB here), ``acked`` (ACKJOB, FASTACK,
  ACKTOKEN here), ``nacked`` (NACK here), ``retried`` (NACK ... DELAY here: a back-off
  retry under the same ID), ``requeued`` (queued again here because its retry time came
  without an ack), ``expired`` (its TTL ended; counted by the node that created it),
  ``cancelled`` (CANCEL here), ``dead-lettered`` by reason (FAILJOB here; REASON given
  by the worker, ``failed`` without one).
* Two histograms: **wait** (queued -> delivered, at each delivery here) and
  **processing** (delivered -> acked, for jobs delivered and acked on this node), in
  the fixed buckets of ``BOUNDS_MS``.

A job's queueing time is its creation (plus DELAY) until it is queued again; then the
node notes when, on the job (``Job.mtime``, negated). A delivery here notes its time
there too (positive) until the job is acked, queued again or deferred: one field, as
a job is never both. (Two maps by job ID did this, and cost a dict insert and a
delete per consumed job.) At most ``MAX_QUEUES`` queues are tracked; later ones are counted
under ``OTHER``, and at most ``MAX_REASONS`` reasons per queue (later ones: ``other``).

Pure: time comes in as ``now`` (ms).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from .job import Job

BOUNDS_MS: Final[tuple[int, ...]] = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000,
                                     10_000, 30_000, 60_000, 300_000, 1_800_000)
_NBOUNDS: Final = len(BOUNDS_MS)
NB: Final = _NBOUNDS + 1  # the last bucket: above every bound (+Inf)
COUNTERS: Final[tuple[str, ...]] = ("added", "delivered", "acked", "nacked", "retried",
                                    "requeued", "expired", "cancelled")
ADDED: Final = 0  # the counters' indexes, in COUNTERS' order
DELIVERED: Final = 1
ACKED: Final = 2
NACKED: Final = 3
RETRIED: Final = 4
REQUEUED: Final = 5
EXPIRED: Final = 6
CANCELLED: Final = 7
MAX_QUEUES: Final = 4096
MAX_REASONS: Final = 16
MAX_REASON_LEN: Final = 32
OTHER: Final = b"(other)"
DEFAULT_REASON: Final = b"failed"


class Histogram:
    """Counts per bucket (not cumulative), the number of observations and their sum."""

    __slots__ = ("buckets", "count", "sum_ms")

    def __init__(self) -> None:
        self.buckets = [0] * NB
        self.count = 0
        self.sum_ms = 0

    def observe(self, ms: int) -> None:
        if ms < 0:
            ms = 0
        # bisect_left(BOUNDS_MS, ms), as a loop: most jobs land in the first buckets,
        # and compiled it is a few compares instead of a call into the bisect module
        i = 0
        while i < _NBOUNDS and BOUNDS_MS[i] < ms:
            i += 1
        self.buckets[i] += 1
        self.count += 1
        self.sum_ms += ms


class QueueMetrics:
    __slots__ = ("counts", "dead", "wait", "processing")

    def __init__(self) -> None:
        self.counts = [0] * len(COUNTERS)
        self.dead: dict[bytes, int] = {}
        self.wait = Histogram()
        self.processing = Histogram()


class JobMetrics:
    def __init__(self) -> None:
        self.queues: dict[bytes, QueueMetrics] = {}

    def of(self, queue: bytes) -> QueueMetrics:
        m = self.queues.get(queue)
        if m is None:
            if len(self.queues) >= MAX_QUEUES:
                queue = OTHER
                m = self.queues.get(queue)
            if m is None:
                m = self.queues[queue] = QueueMetrics()
        return m

    def count(self, queue: bytes, what: int) -> None:
        self.of(queue).counts[what] += 1

    def delivered(self, job: Job, queued_ms: int, now: int) -> None:
        """A delivery here: ``queued_ms`` is when the job was queued, unless it was
        queued again since (``requeued``)."""
        m = self.of(job.queue)
        m.counts[DELIVERED] += 1
        t = job.mtime
        m.wait.observe(now - (-t if t < 0 else queued_ms))
        job.mtime = now

    def requeued(self, job: Job, what: int, now: int) -> None:
        """Queued again (``what``: NACKED, REQUEUED, or -1 for a delayed retry whose
        NACK ... DELAY was counted already)."""
        if what >= 0:
            self.of(job.queue).counts[what] += 1
        job.mtime = -now

    @staticmethod
    def deferred(job: Job) -> None:
        """NACK ... DELAY: the delivery ended without an ack (no processing time)."""
        if job.mtime > 0:
            job.mtime = 0

    def acked(self, job: Job, now: int) -> None:
        m = self.of(job.queue)
        m.counts[ACKED] += 1
        t = job.mtime
        if t > 0:
            m.processing.observe(now - t)
            job.mtime = 0

    def dead_lettered(self, queue: bytes, reason: bytes) -> None:
        dead = self.of(queue).dead
        if reason not in dead and len(dead) >= MAX_REASONS:
            reason = b"other"
        dead[reason] = dead.get(reason, 0) + 1


def valid_reason(reason: bytes) -> bool:
    """A dead-letter reason label: 1..32 of ``[A-Za-z0-9_-]``."""
    return 0 < len(reason) <= MAX_REASON_LEN and all(
        c == 45 or c == 95 or 48 <= c <= 57 or 65 <= c <= 90 or 97 <= c <= 122
        for c in reason)


__all__ = ["BOUNDS_MS", "COUNTERS", "JobMetrics", "valid_reason"]
