"""disquepy's job outcome commands: JOBSTATUS, JOBOUTCOMES, CANCEL, FAILJOB.

A job's status while it lives comes from the job; after it ends, from the node's
outcome store (outcomes.py), kept ``job-outcome-retention`` seconds on every node that
held a copy. States: ``queued`` (in a queue here, or replicating), ``scheduled``
(ADDJOB DELAY not reached yet), ``in_progress`` (delivered here, not acknowledged),
``retrying`` (NACK ... DELAY pending), ``active`` (a copy: queued or worked on
elsewhere; ask the other nodes), then ``completed``, ``failed``, ``cancelled``,
``expired``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ...codec import resp
from .. import errors
from ..errors import ReplyError
from ..job import (
    ACKED,
    ACTIVE,
    F_DEFERRED,
    F_DELIVERED,
    F_ENQUEUED_ONCE,
    F_OUTCOME,
    QUEUED,
    WAIT_REPL,
    Job,
)
from ..jobmetrics import BOUNDS_MS, COUNTERS, DEFAULT_REASON, valid_reason
from ..outcomes import STATE_NAMES
from .args import job_ids, parse_scan

if TYPE_CHECKING:
    from ..client import Client
    from ..node import Node

MAX_ERROR: Final = 1024  # FAILJOB ERROR text kept (outcomes.py truncates details there too)

# JOBSTATUS's field names, encoded once
_ID: Final = resp.bulk(b"id")
_STATE: Final = resp.bulk(b"state")
_QUEUE: Final = resp.bulk(b"queue")
_ATTEMPTS: Final = resp.bulk(b"attempts")
_NACKS: Final = resp.bulk(b"nacks")
_ADELIV: Final = resp.bulk(b"additional-deliveries")
_CREATED: Final = resp.bulk(b"created")
_FINISHED: Final = resp.bulk(b"finished")
_REQUEUE: Final = resp.bulk(b"next-requeue-within")
_DETAIL: Final = resp.bulk(b"detail")
_STATES: Final = {k: resp.bulk(name.encode()) for k, name in STATE_NAMES.items()}


def live_state(job: Job) -> bytes:
    """What a live job's copy on this node says of it."""
    state, flags = job.state, job.flags
    if state in (QUEUED, WAIT_REPL):
        return b"queued"
    if state == ACKED:
        return b"completed"
    if flags & F_DEFERRED:
        return b"retrying"
    if flags & F_DELIVERED:
        return b"in_progress"
    if not flags & F_ENQUEUED_ONCE and job.delay:
        return b"scheduled"
    return b"active"


def jobstatus(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    """JOBSTATUS job-id: a job's state, attempts, times and error or result, live or
    finished (within the outcome retention); -NOJOB if this node knows nothing of it."""
    jid = job_ids(argv)[0]
    b, i = resp.bulk, resp.integer
    null = resp.null_bulk(client.proto)
    job = node.jobs.get(jid)
    # an acked copy may still be here (waiting for its GC): its outcome says more
    o = node.outcomes.get_raw(jid) if node.store.outcomes_on and (
        job is None or job.state == ACKED) else None
    if job is not None and o is None:
        delivered = 1 if job.flags & F_DELIVERED else 0
        return resp.array([
            _ID, b(jid),
            _STATE, b(live_state(job)),
            _QUEUE, b(job.queue),
            _ATTEMPTS, i(job.nacks + job.adeliv + delivered),
            _NACKS, i(job.nacks),
            _ADELIV, i(job.adeliv),
            _CREATED, i(job.ctime // 1_000_000),
            _FINISHED, null,
            _REQUEUE,
            i(max(0, job.qtime - now)) if job.qtime and job.state == ACTIVE else null,
            _DETAIL, null,
        ])
    if o is None:
        raise ReplyError(errors.NOJOB)
    return resp.array([
        _ID, b(jid),
        _STATE, _STATES[o.state],
        _QUEUE, b(o.queue.encode("latin-1")),
        _ATTEMPTS, i(o.attempts),
        _NACKS, null,
        _ADELIV, null,
        _CREATED, i(o.created_ms),
        _FINISHED, i(o.finished_ms),
        _REQUEUE, null,
        _DETAIL, b(o.detail) if o.detail else null,
    ])


OUTCOME_STATES: Final = {name.encode(): k for k, name in STATE_NAMES.items()}
BAD_OUTCOME_STATE: Final = "ERR STATUS must be completed, failed, cancelled or expired"
OUTCOMES_BUDGET: Final = 20_000  # records looked at per call (SCAN-like), unless BUSYLOOP
_CURSOR: Final = resp.bulk(b"cursor")


def joboutcomes(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    """JOBOUTCOMES [cursor] [COUNT n] [BUSYLOOP] [STATUS s ...] [QUEUE q ...]: this node's
    outcome store, the last finished first: ``[next-cursor, [outcome, ...]]``, each
    outcome as JOBSTATUS's fields plus ``cursor`` (where to go on from after it).
    STATUS (completed, failed, cancelled, expired) and QUEUE (a Disque queue) filter,
    each may repeat. Like SCAN, a call looks at a bounded number of outcomes (all of
    them with BUSYLOOP) and may return fewer than COUNT with a cursor to go on; the
    cursor is ``0`` when the store has no older outcome left."""
    states = 0
    queues: set[str] = set()

    def status_opt(v: bytes) -> None:
        nonlocal states
        st = OUTCOME_STATES.get(v.lower())
        if st is None:
            raise ReplyError(BAD_OUTCOME_STATE)
        states |= 1 << st

    def queue_opt(v: bytes) -> None:
        queues.add(v.decode("latin-1"))

    cursor, count, busyloop = parse_scan(argv, {b"status": status_opt, b"queue": queue_opt})
    if not node.store.outcomes_on:
        return resp.array([resp.bulk(b"0"), resp.array([])])
    nxt, found = node.outcomes.recent(cursor, count, states, frozenset(queues) or None,
                                      0 if busyloop else OUTCOMES_BUDGET)
    b, i = resp.bulk, resp.integer
    null = resp.null_bulk(client.proto)
    access = client.queues  # a user limited to some queues sees only their outcomes
    if access is not None:
        found = [(pos, o) for pos, o in found if access.allows(o.queue.encode("latin-1"))]
    items = [resp.array([
        _ID, b(o.job_id.encode("latin-1")),
        _STATE, _STATES[o.state],
        _QUEUE, b(o.queue.encode("latin-1")),
        _ATTEMPTS, i(o.attempts),
        _CREATED, i(o.created_ms),
        _FINISHED, i(o.finished_ms),
        _DETAIL, b(o.detail) if o.detail else null,
        _CURSOR, b(b"%d" % pos),
    ]) for pos, o in found]
    return resp.array([b(b"%d" % nxt), resp.array(items)])


def cancel(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    """CANCEL job-id: a job nobody works on (queued, scheduled or retrying here) ends
    as cancelled on every node that holds it. A job delivered and not acknowledged, or
    already finished, is not cancelled, and the error says why."""
    jid = job_ids(argv)[0]
    job = node.jobs.get(jid)
    if job is None:
        o = node.outcomes.get_raw(jid) if node.store.outcomes_on else None
        if o is not None:
            raise ReplyError(f"ERR job already {STATE_NAMES[o.state]}: nothing to cancel")
        raise ReplyError(errors.NOJOB)
    state = live_state(job)
    if state == b"completed" or job.flags & F_OUTCOME:
        raise ReplyError("ERR job already finished: nothing to cancel")
    if state == b"in_progress":
        raise ReplyError("BUSY job in progress (delivered, not acknowledged): a worker "
                         "has it, it cannot be cancelled")
    if state == b"active":
        raise ReplyError("TRYAGAIN job not queued on this node: cancel it on the node "
                         "that queues it (SHOW nodes-delivered)")
    if job.state == WAIT_REPL:
        raise ReplyError("TRYAGAIN job still being replicated")
    node.acks.cancel(job, now)
    return resp.OK


def failjob(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    """FAILJOB job-id [ERROR text] [REASON word]: the job failed for good (the worker
    gave up on it): its outcome is failed with the error, on every copy, and it is
    acknowledged. REASON (``[A-Za-z0-9_-]``, up to 32) labels it in JOBMETRICS'
    dead-lettered counts (default ``failed``)."""
    opts: dict[bytes, bytes] = {}
    if len(argv) % 2:
        raise ReplyError(errors.SYNTAX)
    for k in range(2, len(argv), 2):
        name = argv[k].upper()
        if name not in (b"ERROR", b"REASON") or name in opts:
            raise ReplyError(errors.SYNTAX)
        opts[name] = argv[k + 1]
    reason = opts.get(b"REASON", DEFAULT_REASON)
    if not valid_reason(reason):
        raise ReplyError("ERR REASON must be 1 to 32 letters, digits, '-' or '_'")
    jid = job_ids(argv[:2])[0]
    error = opts.get(b"ERROR", b"")[:MAX_ERROR]
    job = node.jobs.get(jid)
    if job is None:
        raise ReplyError(errors.NOJOB)
    if job.state == ACKED or job.flags & F_OUTCOME:
        return resp.integer(0)
    if job.state == WAIT_REPL:
        raise ReplyError("TRYAGAIN job still being replicated")
    node.acks.fail(job, error, now, reason)
    return resp.integer(1)


def jobmetrics(node: Node, client: Client, argv: list[bytes], now: int) -> bytes:
    """JOBMETRICS [queue ...]: this node's per-queue job counters and time histograms
    (see jobmetrics.py), every queue it counted (or those named):
    ``["buckets-ms", [bound, ...], "queues", [[name, [counter, n, ...], [reason, n,
    ...], [count, sum-ms, b0, ..., bN], [same for processing]], ...]]``; bucket counts
    are per bucket (not cumulative), the last one above every bound."""
    m = node.metrics
    names = argv[1:] if len(argv) > 1 else sorted(m.queues)
    out: list[list[object]] = []
    for name in names:
        q = m.queues.get(name)
        if q is None:
            continue
        counts: list[str | int] = []
        for k, n in zip(COUNTERS, q.counts, strict=True):
            counts += [k, n]
        dead: list[bytes | int] = []
        for reason, n in sorted(q.dead.items()):
            dead += [reason, n]
        out.append([name, counts, dead,
                    [q.wait.count, q.wait.sum_ms, *q.wait.buckets],
                    [q.processing.count, q.processing.sum_ms, *q.processing.buckets]])
    return resp.encode([b"buckets-ms", list(BOUNDS_MS), b"queues", out], client.proto)


__all__ = ["cancel", "failjob", "jobmetrics", "joboutcomes", "jobstatus", "live_state"]
