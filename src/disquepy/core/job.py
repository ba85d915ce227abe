"""The job model: one slotted object per job, and the job states of the spec.

A Job is the node's copy of a message. Times are integers: ``ctime`` in nanoseconds
(creation wall clock of the originating node, unique per node, and the queue order
key), ``qtime``/``awake`` in milliseconds, ``ttl`` in seconds; the expiry time
``etime`` (ms) is derived from ``ctime + ttl`` rather than stored, which saves an
integer object per job. ``delivered``/``confirmed`` are
tuples of node IDs (small and immutable: most jobs live on one to three nodes).
"""

from __future__ import annotations

from typing import Final

from mypy_extensions import mypyc_attr

from .record import Record

WAIT_REPL: Final = 0
ACTIVE: Final = 1
QUEUED: Final = 2
ACKED: Final = 3

STATE_NAMES: Final = (b"wait-repl", b"active", b"queued", b"acked")
STATE_BY_NAME: Final = {name: i for i, name in enumerate(STATE_NAMES)}

# Every change of a job's state, and what makes it (Disque's README, "Job states").
# A Job is built in WAIT_REPL; nothing leaves ACKED (an acked job is only ever freed).
TRANSITIONS: Final[dict[tuple[int, int], str]] = {
    (WAIT_REPL, ACTIVE): "enough copies confirmed, or a job built with none to wait for "
                         "(ADDJOB without sync copies, a copy from the bus, an AOF load)",
    (WAIT_REPL, QUEUED): "ADDJOB on a lone node: a new job queued at once",
    (WAIT_REPL, ACKED): "a dummy ack: an ACKJOB for a job this node never saw",
    (ACTIVE, QUEUED): "ENQUEUE: first queueing, a re-queue after retry, NACK, YOURJOBS",
    (QUEUED, ACTIVE): "DEQUEUE: delivered to a client, sent to another node, or "
                      "another copy was queued (QUEUED/WORKING)",
    (ACTIVE, ACKED): "ACKJOB, or SETACK/GOTACK from a node that saw the ack",
}
_ALLOWED: Final = frozenset(TRANSITIONS)


@mypyc_attr(native_class=False)  # mypyc compiles no AssertionError subclass
class IllegalTransition(AssertionError):
    """A state change TRANSITIONS does not allow: a bug of the core."""


def move(job: Job, to: int) -> None:
    """Set a job's state, refusing any change TRANSITIONS does not list."""
    if (job.state, to) not in _ALLOWED:
        raise IllegalTransition(f"job {job.id!r}: {STATE_NAMES[job.state].decode()} -> "
                                f"{STATE_NAMES[to].decode()}")
    job.state = to

# flags
F_DELIVERED: Final = 1  # handed to a client at least once (GETJOB / QPEEK do not count)
F_ENQUEUED_ONCE: Final = 2  # was queued at least once (RETRY 0 jobs are never queued again)
F_DUMMY: Final = 4  # a dummy ack: an acked job this node never had a copy of
F_BCAST_WILLQUEUE: Final = 8  # send WILLQUEUE before the coming re-queue
F_OVERFLOW: Final = 16  # queued out of creation order (in the queue's sorted overflow)
F_DEFERRED: Final = 32  # NACK ... DELAY: re-queued here at qtime; other copies hold off
F_OUTCOME: Final = 64  # its outcome is recorded (FAILJOB): the ack that follows keeps it

_EMPTY: Final[tuple[str, ...]] = ()


class Job(Record):
    # (id, ctime and awake are the Timer's, the awake index wakes jobs; repl, delivered
    # and confirmed the Record's, replication.py makes their copies)
    __slots__ = (
        "queue",
        "body",
        "state",
        "delay",
        "retry",
        "ttl",
        "qtime",
        "nacks",
        "adeliv",
        "flags",
        "mtime",
    )

    def __init__(
        self,
        jid: bytes,
        queue: bytes,
        body: bytes,
        ctime: int,
        ttl: int,
        repl: int = 1,
        delay: int = 0,
        retry: int = 0,
    ) -> None:
        self.id = jid
        self.queue = queue
        self.body = body
        self.state = WAIT_REPL
        self.repl = repl
        self.ctime = ctime
        self.delay = delay
        self.retry = retry
        self.ttl = ttl
        self.qtime = 0
        self.awake = 0
        self.nacks = 0
        self.adeliv = 0
        self.flags = 0
        self.mtime = 0  # JOBMETRICS' time of it here (ms): > 0 delivered, < 0 queued again
        self.delivered = _EMPTY
        self.confirmed = _EMPTY

    def __repr__(self) -> str:
        return f"<Job {self.id.decode()} {STATE_NAMES[self.state].decode()} q={self.queue!r}>"

    @property
    def etime(self) -> int:
        """Expiry time, ms."""
        return self.ctime // 1_000_000 + self.ttl * 1000

    def expiry(self) -> int:
        return self.etime

    @property
    def state_name(self) -> bytes:
        return STATE_NAMES[self.state]
