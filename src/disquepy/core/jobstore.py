"""The job store of one node: jobs created, registered, queued, delivered, deferred,
re-queued, expired and gone, and the timers that move them (Disque's job.c, beside
the cluster's modules). The registry itself is ``Node.jobs`` (jobtable.py) and the
queues ``Node.queues``; replication, acks and federation (their own modules) call in
here when a job changes hands. ``JobStore`` is composed by the node (``node.store``)
and reads the node's parts through ``self.node``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from ..codec import resp
from . import errors
from . import messages as M
from .errors import ReplyError
from .job import (
    ACKED,
    ACTIVE,
    F_BCAST_WILLQUEUE,
    F_DEFERRED,
    F_DELIVERED,
    F_DUMMY,
    F_ENQUEUED_ONCE,
    F_OUTCOME,
    QUEUED,
    WAIT_REPL,
    Job,
    move,
)
from .jobcodec import COUNTER_TOP
from .jobmetrics import ADDED, NACKED, REQUEUED, RETRIED
from .jobmetrics import EXPIRED as M_EXPIRED
from .memory import JOB_OVERHEAD
from .outcomes import COMPLETED, EXPIRED, FAILED, MAX_ATTEMPTS
from .queue import PAUSED_IN, PAUSED_OUT, Queue
from .replication import WILLQUEUE_ADVANCE_MS

if TYPE_CHECKING:
    from .client import Client
    from .node import Node

AMO_DONE_MAX: Final = 50_000  # at-most-once job IDs remembered after they are gone


class JobStore:
    def __init__(self, node: Node) -> None:
        self.node = node
        # IDs of at-most-once jobs delivered here and since forgotten (oldest first): a
        # late or duplicated YOURJOBS / REPLJOB must not bring one back
        self.amo_done: dict[bytes, None] = {}
        # plain completions gathered while a command acks a batch (outcomes_later)
        self.pending: list[Job] | None = None

    def create_job(self, qname: bytes, body: bytes, ttl: int, retry: int, delay: int,
                   repl: int, timeout: int, is_async: bool, maxlen: int, client: Client,
                   now: int, idem: bytes | None = None) -> bytes | None:
        """ADDJOB after its arguments were parsed: the checks that need node state,
        then a new job, queued at once unless delayed. Returns the reply (None while a
        synchronous replication is pending). ``idem``: the IDEMPOTENT key, if any."""
        node = self.node
        if len(body) > node.max_body:
            raise ReplyError(errors.body_too_big(len(body), node.config.job_max_body_size))
        # leaving, or over 75% of maxmemory: the job's copies go to other nodes only,
        # and a lone node has none to hold them (C Disque's NOREPL with the reason)
        mem = node.mem
        extrepl = node.leaving or mem.used * 100 > mem.limit * 75  # mem.level() >= HIGH
        if (repl if extrepl else repl - 1) > node.reachable:
            if extrepl and repl - 1 == node.reachable:
                why = "I'm leaving the cluster" if node.leaving else "I'm out of memory"
                raise ReplyError(f"{errors.NOREPL}, since I'm unable to hold a copy of the "
                                 f"message for the following reason: {why}")
            raise ReplyError(errors.NOREPL)
        q = node.queues.by_name.get(qname)
        if q is not None:
            if maxlen and len(q.jobs) >= maxlen:
                raise ReplyError(errors.MAXLEN)
            if q.flags & PAUSED_IN:
                raise ReplyError(errors.PAUSED)
            qname = q.name  # share the queue's name object instead of holding another
        jid = node.idgen.next_id(ttl, retry)
        ctime = now * 1_000_000
        if ctime <= node.last_ctime:
            ctime = node.last_ctime + 1
        node.last_ctime = ctime
        job = Job(jid, qname, body, ctime, ttl, repl, delay, retry)
        if not node.jobs.add(job):
            raise ReplyError("ERR Internal error creating the job, check server logs")
        node.mem.used += JOB_OVERHEAD + len(body)
        node.stats.jobs_added += 1
        node.metrics.count(qname, ADDED)
        if idem is not None:
            node.keys.bind(idem, job)
        if node.events_on:
            node.events_out.append((now, "added", jid, qname,
                                    (ttl, retry, delay, repl, len(body))))
        if node.clustered and (repl > 1 or extrepl):
            return node.repl.start(job, client, now, timeout, is_async, extrepl)
        # the record goes out with the job's queue time set, and before enqueueing,
        # which may move the job away at once (federation) and log its deletion
        if delay:
            move(job, ACTIVE)
            job.qtime = now + delay * 1000
            if node.aof.on:
                node.aof.created(job)
            self.schedule(job)
        elif q is None or node.clustered:
            move(job, ACTIVE)
            job.qtime = now + retry * 1000  # non-zero: the first enqueue may happen
            if node.aof.on:
                node.aof.created(job)
            self.enqueue(job, now)
        else:
            # the hot path, inlined: the first enqueue of a new job in an existing queue
            move(job, QUEUED)
            if retry:
                job.flags = F_ENQUEUED_ONCE | F_BCAST_WILLQUEUE
                job.qtime = qt = self.retry_at(now, retry)
                et = now + ttl * 1000
                node.awake.add_new(job, qt if qt < et else et)
            else:
                job.flags = F_ENQUEUED_ONCE
                node.awake.add_new(job, now + ttl * 1000)
            tail = q.jobs.tail
            if not tail or ctime > tail[-1].ctime:
                tail.append(job)
            else:
                q.jobs.add(job)
            q.jobs_in += 1
            q.atime = now
            if node.events_on:
                node.events_out.append((now, "queued", jid, qname, None))
            if q.waiters and not q.flags & PAUSED_OUT:
                node.queues.ready.append(q)
            if node.aof.on:
                node.aof.created(job)
        return b"+" + jid + b"\r\n"

    def register(self, job: Job) -> bool:
        """Add a job to the registry; False (nothing changed) if its ID is known."""
        node = self.node
        if not node.jobs.add(job):
            return False
        node.mem.used += JOB_OVERHEAD + len(job.body)
        return True

    def unregister(self, job: Job) -> None:
        node = self.node
        if node.aof.on:
            node.aof.deleted(job)
        if job.retry == 0 and (job.flags & F_DELIVERED or job.state == ACKED):
            # an at-most-once job delivered (or acked) here: a late or duplicated
            # YOURJOBS / REPLJOB must not bring it back to be delivered again
            amo = self.amo_done
            amo[job.id] = None
            if len(amo) > AMO_DONE_MAX:
                del amo[next(iter(amo))]
        if node.keys.of:
            node.keys.job_gone(job)
        if job.state == WAIT_REPL and job.id in node.repl.waiting:
            client = node.repl.waiting.pop(job.id)[0]
            if not client.closed:
                client.blocked_add = None
                node.outbox.append((client, resp.error(
                    "NOREPL job removed (expired?) before the requested replication level "
                    "was achieved")))
        if job.state == QUEUED:
            q = node.queues.by_name.get(job.queue)
            if q is not None:
                q.remove(job)
        node.awake.cancel(job)
        if job.flags & F_DELIVERED or job.state == ACKED:
            node.mem.evictable.pop(job.id, None)
        if node.jobs.remove(job):
            node.mem.used -= JOB_OVERHEAD + len(job.body)

    def retry_at(self, now: int, retry: int) -> int:
        """When a job whose delivery may have failed is queued again: ``retry`` seconds
        from ``now``, with jitter (the one formula of the job store and the cluster)."""
        node = self.node
        return now + retry * 1000 + node.jitter()

    def enqueue(self, job: Job, now: int, nack: bool = False) -> bool:
        """ENQUEUE(job): put an active job in its queue. False if it can't be queued:
        already queued, or an at-most-once job that was queued (or delivered) before."""
        node = self.node
        state = job.state
        flags = job.flags
        retry = job.retry
        if (state in (QUEUED, WAIT_REPL) or job.qtime == 0
                or (retry == 0 and flags & F_DELIVERED)):
            return False  # queued already, still being replicated, or at most once
        requeue = flags & F_ENQUEUED_ONCE
        deferred = flags & F_DEFERRED  # a NACK ... DELAY ending: counted at the NACK
        flags &= ~F_DEFERRED
        if (nack or requeue) and not deferred:
            # counters saturate below jobcodec's range, so a job stays writable and
            # loadable (AOF, replication) however often it is re-queued
            if nack:
                if job.nacks < COUNTER_TOP:
                    job.nacks += 1
            elif job.adeliv < COUNTER_TOP:
                job.adeliv += 1
            if node.aof.on:
                node.aof.created(job)  # the counters moved: a reload must not roll them back
            node.metrics.requeued(job, NACKED if nack else REQUEUED, now)
        elif deferred:
            node.metrics.requeued(job, -1, now)  # counted at the NACK
        if node.events_on:
            if nack:
                node.events_out.append((now, "nacked", job.id, job.queue, None))
            node.events_out.append((now, "queued", job.id, job.queue, None))
        move(job, QUEUED)
        if retry:
            job.flags = flags | F_ENQUEUED_ONCE | F_BCAST_WILLQUEUE
            job.qtime = self.retry_at(now, retry)
        else:
            job.flags = flags | F_ENQUEUED_ONCE
            job.qtime = 0  # at-most-once: never queued again
        q = node.queues.by_name.get(job.queue)
        if q is None:
            q = node.queues.create(job.queue, now)
        job.queue = q.name  # one name object per queue (jobs created before it existed)
        q.push(job)
        q.atime = now
        self.schedule(job)
        if node.clustered:
            if (requeue or nack) and node.repl.has_peers(job):
                node.repl.broadcast_queued(
                    job, M.QUEUED_INCR_NACKS if nack or deferred else M.QUEUED_INCR_DELIV)
            if not q.waiters and node.fed.askers and job.queue in node.fed.askers:
                node.fed.pushed_to_askers(q, now)
        if q.waiters and not q.flags & PAUSED_OUT:
            node.queues.ready.append(q)
        return True

    def defer(self, job: Job, now: int, delay: int) -> bool:
        """NACK ... DELAY (disquepy): a delivered job goes back to its queue ``delay``
        seconds from now, from this node. Other copies are told WORKING now, and again
        whenever they announce a re-queue (WILLQUEUE) before the delay ends; they learn
        of the nack when the job is queued (QUEUED). False, as for ENQUEUE, for a job
        that is not active or an at-most-once job delivered already."""
        node = self.node
        if job.state != ACTIVE or (job.retry == 0 and job.flags & F_DELIVERED):
            return False
        if job.nacks < COUNTER_TOP:
            job.nacks += 1
        job.flags |= F_DEFERRED | F_ENQUEUED_ONCE
        job.qtime = now + delay * 1000
        node.metrics.count(job.queue, RETRIED)
        node.metrics.deferred(job)
        if node.aof.on:
            node.aof.created(job)
        if node.events_on:
            node.events_out.append((now, "nacked", job.id, job.queue, None))
        if node.clustered and node.repl.has_peers(job):
            node.repl.broadcast_working(job)
        self.schedule(job)
        return True

    def dequeue(self, job: Job) -> bool:
        """DEQUEUE(job): take a queued job out of its queue, leaving it active."""
        node = self.node
        if job.state != QUEUED:
            return False
        q = node.queues.by_name.get(job.queue)
        if q is not None:
            q.remove(job)
        move(job, ACTIVE)
        self.schedule(job)
        return True

    def fetch(self, q: Queue, now: int) -> Job:
        """Pop the oldest job of a non-empty queue for delivery to a client. The
        re-queue time stays as set at enqueue time: retry counts from queueing."""
        node = self.node
        job = q.jobs.pop()
        q.jobs_out += 1
        move(job, ACTIVE)
        job.flags |= F_DELIVERED
        if job.retry == 0:
            node.mem.evictable[job.id] = job
        q.atime = now
        node.stats.jobs_delivered += 1
        node.metrics.delivered(job, job.ctime // 1_000_000 + job.delay * 1000, now)
        if node.events_on:
            node.events_out.append((now, "delivered", job.id, job.queue,
                                    (job.nacks, job.adeliv)))
        return job

    def schedule(self, job: Job) -> None:
        """Recompute when the job next needs attention: expiry, delay, retry, GC."""
        node = self.node
        state = job.state
        if state == WAIT_REPL:
            return  # its replication timer (Replication.tick) stays in charge
        at = job.ctime // 1_000_000 + job.ttl * 1000  # job.etime (on every job's path)
        q = job.qtime
        if q and state != ACKED:
            if job.flags & F_BCAST_WILLQUEUE:
                d = job.delivered  # node.repl.has_peers(job), inlined
                if len(d) > 1 or (d and d[0] != node.myid):
                    q -= WILLQUEUE_ADVANCE_MS
            if q < at:
                at = q
        node.awake.schedule(job, at)

    def process_job(self, job: Job, now: int) -> None:
        """A job's timer fired: expire it, queue it (delay / retry) or push qtime."""
        node = self.node
        if job.etime <= now:
            node.stats.jobs_expired += 1
            if node.events_on and not job.flags & F_DUMMY:
                node.events_out.append((now, "expired", job.id, job.queue, None))
            if job.state != ACKED:
                self.record_outcome(job, EXPIRED, now)
                if job.id[2:10] == node.myid[:8].encode():  # counted by its creator
                    node.metrics.count(job.queue, M_EXPIRED)
            self.unregister(job)
            return
        state = job.state
        if state == WAIT_REPL:
            node.repl.tick(job, now)
            return
        if state == ACKED:
            node.acks.start_gc(job, now)
            if node.jobs.get(job.id) is job:
                node.acks.schedule_gc(job, now)
            return
        if (job.flags & F_BCAST_WILLQUEUE and job.qtime - WILLQUEUE_ADVANCE_MS <= now
                and state != ACKED):
            job.flags &= ~F_BCAST_WILLQUEUE
            if state == ACTIVE:
                node.repl.send_willqueue(job)
        if state == ACTIVE and job.qtime and job.qtime <= now:
            q = node.queues.by_name.get(job.queue)
            if job.retry and q is not None and q.flags & PAUSED_IN:
                job.qtime = self.retry_at(now, job.retry)  # try again later
            else:
                self.enqueue(job, now)
        elif state == QUEUED and job.qtime and job.qtime <= now and job.retry:
            # still queued, never consumed: push the re-queue time one period on
            job.flags |= F_BCAST_WILLQUEUE
            job.qtime = self.retry_at(now, job.retry)
        self.schedule(job)

    def record_outcome(self, job: Job, state: int, now: int, detail: bytes = b"") -> None:
        """Remember how ``job`` ended (JOBSTATUS answers from it once the job is gone).
        Once per job: a failure recorded first is not overwritten by the ack that
        follows it; dummy acks and wait-repl jobs (never confirmed) leave nothing.
        Between ``outcomes_later`` and ``outcomes_now`` (an ACKJOB's IDs) plain
        completions are gathered and stored with one call for the batch."""
        flags = job.flags
        if flags & (F_OUTCOME | F_DUMMY) or job.state == WAIT_REPL or not self.outcomes_on:
            return
        job.flags = flags | F_OUTCOME
        pending = self.pending
        if pending is not None and state == COMPLETED and not detail:
            pending.append(job)
            return
        self._record_outcomes([job], state, now, detail)

    def outcomes_later(self) -> None:
        """Gather the plain completions recorded from now on (see record_outcome)."""
        self.pending = []

    def outcomes_now(self, now: int) -> None:
        """Store the completions gathered since ``outcomes_later``, in one call."""
        pending = self.pending
        self.pending = None
        if pending:
            self._record_outcomes(pending, COMPLETED, now, b"")

    def _record_outcomes(self, jobs: list[Job], state: int, now: int, detail: bytes) -> None:
        node = self.node
        raws: list[bytes] = []
        queues: list[bytes] = []
        attempts: list[int] = []
        created: list[int] = []
        done = state == COMPLETED or state == FAILED  # delivered at least once, somewhere
        for job in jobs:
            raws.append(job.id)
            queues.append(job.queue)
            tries = job.nacks + job.adeliv + (1 if done or job.flags & F_DELIVERED else 0)
            attempts.append(tries if tries <= MAX_ATTEMPTS else MAX_ATTEMPTS)
            created.append(job.ctime // 1_000_000)
        outcomes = node.outcomes
        outcomes.record_many(raws, state, queues, attempts, created, now, detail)
        if node.aof.on:
            detail = detail[:outcomes.max_detail]
            aof = node.aof
            for i in range(len(raws)):
                aof.outcome(raws[i], state, queues[i], attempts[i], created[i], now, detail)

    @property
    def outcomes_on(self) -> bool:
        return self.node.config.job_outcome_retention > 0

    def scan(self, cursor: int, count: int, busyloop: bool,
                  keep: Callable[[Job], bool]) -> tuple[int, list[Job]]:
        node = self.node
        return node.jobs.scan(cursor, count, busyloop, keep)


__all__ = ["JobStore"]
