"""Replication: copies of a job on other nodes, and who re-queues it.

REPLJOB/GOTJOB synchronous replication with one more node every 50 ms while short
(ADDJOB waits in ``waiting`` until enough copies are confirmed); ENQUEUE asks a copy
to queue a job this node does not keep; WILLQUEUE/QUEUED avoid double re-queues and
WORKING pushes a copy's re-queue time on (Disque's README, "Job replication").

The synchronous part is one mechanism for every :class:`~.record.Record`: a job, or a
consumer group's event (QADD; its copies go out as EVADD and are confirmed by the same
GOTJOB, see core/groups/replication.py, which supplies what differs: the copy sent,
what happens once replicated or failed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ..codec import resp
from . import messages as M
from .ids import JOB_ID_LEN
from .job import ACKED, ACTIVE, F_BCAST_WILLQUEUE, F_DEFERRED, QUEUED, WAIT_REPL, Job, move
from .jobcodec import COUNTER_TOP
from .queue import PAUSED_IN

if TYPE_CHECKING:
    from .client import Client
    from .jobcodec import JobFields
    from .membership import Peer
    from .node import Node
    from .record import Record

REPL_RETRY_MS: Final = 50  # add one more node this often while replication is short
_NOT_WAITING: Final[tuple[None, int, bool]] = (None, 0, False)  # waiting's entry for a job nobody waits for
WILLQUEUE_ADVANCE_MS: Final = 500  # WILLQUEUE goes out this long before a re-queue
# a node holds new copies for other nodes while they keep it within this % of
# maxmemory (checked per job: one REPLJOB of many jobs cannot overshoot it)
COPIES_UP_TO: Final = 75


def _xor_rank(node_id: str, jid: bytes) -> bytes:
    """Disque's QUEUED tie-break: node IDs XORed with the job's random bytes, so
    which copy wins differs from job to job."""
    rnd = jid[11:35]
    nb = node_id.encode()[:24]
    return bytes(a ^ b for a, b in zip(nb, rnd, strict=False))


class Replication:
    def __init__(self, node: Node) -> None:
        self.node = node
        # job id -> (client, deadline ms or 0, extrepl)
        self.waiting: dict[bytes, tuple[Client, int, bool]] = {}

    def choose(self, need: int) -> list[str]:
        """Where copies go: every reachable peer, or a random choice of ``need`` of them;
        sorted either way, so the copies of a burst for the same nodes share a message."""
        others = self.node.members.reach_ids
        return others if need >= len(others) else sorted(self.node.rng.sample(others, need))

    def start(self, job: Job, client: Client, now: int, timeout: int, is_async: bool,
              extrepl: bool) -> bytes | None:
        """ADDJOB with copies on other nodes (REPLJOB to repl-1 nodes, or repl nodes
        when this node keeps no copy). Returns the reply, or None while waiting."""
        targets = self.choose(job.repl if extrepl else job.repl - 1)
        job.delivered = self.node.shared(tuple(targets) if extrepl else (self.node.myid, *targets))
        job.confirmed = () if extrepl else (self.node.myid,)
        if targets:
            self.send_copies(job, targets)
        if is_async or not targets:
            move(job, ACTIVE)
            self.replicated(job, now, extrepl)
            return b"+" + job.id + b"\r\n"
        # the job stays in WAIT_REPL (as built) until its copies confirm
        self.wait(job, client, now + timeout if timeout else 0, extrepl, now)
        return None

    def wait(self, rec: Record, client: Client, deadline: int, extrepl: bool, now: int) -> None:
        """``client`` waits until ``rec.repl`` nodes confirmed a copy of ``rec`` (sent to
        ``rec.delivered``), or ``deadline`` (0: none): then NOREPL."""
        self.waiting[rec.id] = (client, deadline, extrepl)
        client.blocked_add = rec.id
        self.node.awake.schedule(rec, now + REPL_RETRY_MS)

    def send_copies(self, rec: Record, dsts: list[str]) -> None:
        """A copy of ``rec`` to each of ``dsts`` (sorted): REPLJOB, or EVADD for an event."""
        if isinstance(rec, Job):
            self.node.send_item(dsts, M.REPLJOB, M.job_to_wire(rec, self.node.keys.of.get(rec.id)),
                                len(rec.body))
        else:
            self.node.groups.repl.send_copy(rec, dsts)

    def replicated(self, job: Job, now: int, extrepl: bool) -> None:
        """Enough copies exist: queue the job here, or on a copy when we keep none."""
        if extrepl:
            if job.confirmed:
                self.node.send([self.node.rng.choice(job.confirmed)], M.ENQUEUE, job.id)
            elif job.delivered:
                self.node.send([self.node.rng.choice(job.delivered)], M.ENQUEUE, job.id)
            self.node.store.unregister(job)
            return
        job.confirmed = ()  # who confirmed a copy matters while replicating only (Disque's SHOW)
        # the record goes out with the job's queue time set, and before enqueueing,
        # which may move the job away at once (federation) and log its deletion
        if job.delay:
            job.qtime = now + job.delay * 1000
            if self.node.aof.on:
                self.node.aof.created(job)
            self.node.store.schedule(job)
        else:
            job.qtime = now + job.retry * 1000
            if self.node.aof.on:
                self.node.aof.created(job)
            self.node.store.enqueue(job, now)

    def tick(self, rec: Record, now: int) -> None:
        """A record still short of copies: give up at the deadline, else one more node."""
        client, deadline, extrepl = self.waiting.get(rec.id, _NOT_WAITING)
        if client is None:
            return
        if deadline and now >= deadline:
            self.failed(rec, "NOREPL Timeout reached before replicating to the "
                             "requested number of nodes")
            return
        spare = [n for n in self.node.members.reachable_peers() if n not in rec.delivered]
        if spare:
            rec.delivered = (*rec.delivered, self.node.rng.choice(spare))
        dsts = sorted(n for n in rec.delivered if n != self.node.myid and n not in rec.confirmed)
        if dsts:
            self.send_copies(rec, dsts)
        at = now + REPL_RETRY_MS
        if deadline and deadline < at:
            at = deadline
        self.node.awake.schedule(rec, min(at, rec.expiry()))

    def failed(self, rec: Record, error: str) -> None:
        client, _, _ = self.waiting.pop(rec.id, _NOT_WAITING)
        if isinstance(rec, Job):
            self.node.send_to_copies(rec, M.DELJOB, rec.id)
            self.node.store.unregister(rec)
        else:
            self.node.groups.repl.add_failed(rec)
        if client is not None and not client.closed:
            client.blocked_add = None
            self.node.outbox.append((client, resp.error(error)))

    def on_repljob(self, p: Peer, fields: M.Fields, now: int) -> None:
        """Copies of jobs to hold (one or more per message): GOTJOB for each we hold,
        all in one message."""
        fits = self.node.mem.fits_job
        jobs = self.node.jobs
        got: list[bytes] = []
        for j in fields:  # JobFields, decoded and checked by messages.parse
            jid = j.id
            job = jobs.get(jid)
            if job is not None:
                job.delivered = self.node.shared(tuple(dict.fromkeys((*job.delivered,
                                                                      *j.delivered))))
                if job.state != WAIT_REPL:
                    got.append(jid)
                continue
            if not fits(len(j.body), COPIES_UP_TO):  # the sender asks another node
                continue
            q = self.node.queues.get(j.queue)
            if q is None:
                queue = self.node.shared(j.queue)
            elif q.flags & PAUSED_IN:  # refuse new copies
                continue
            else:
                queue = q.name
            if self.adopt(j, queue, j.delay, now) is not None:
                got.append(jid)
        if got:
            self.node.send_items([p.id], M.GOTJOB, got)

    def adopt(self, j: JobFields, queue: bytes, delay: int, now: int) -> Job | None:
        """Hold a copy of a job another node sent (REPLJOB, YOURJOBS), in ``queue`` (a
        shared name object), active, re-queued after ``delay`` + its retry time; None
        (nothing held) for a job known or gone here."""
        jid, ttl, retry = j.id, j.ttl, j.retry
        if retry == 0 and jid in self.node.store.amo_done:
            return None  # an at-most-once job delivered here before: a stale copy
        if j.ctime // 1_000_000 + ttl * 1000 <= now:  # Job.etime
            return None
        job = Job(jid, queue, j.body, j.ctime, ttl, j.repl, delay, retry)
        if not self.node.store.register(job):
            return None
        job.nacks = j.nacks
        job.adeliv = j.adeliv
        delivered = j.delivered
        if self.node.myid not in delivered:  # (a list from the bus is shared already)
            delivered = self.node.shared((*delivered, self.node.myid))
        job.delivered = delivered
        move(job, ACTIVE)
        if retry:
            job.flags = F_BCAST_WILLQUEUE
            job.qtime = self.node.store.retry_at(now + delay * 1000, retry)
        if j.idem is not None:
            self.node.keys.bind(j.idem, job)
        self.node.store.schedule(job)
        if self.node.aof.on:
            self.node.aof.created(job)
        return job

    def on_gotjob(self, p: Peer, fields: M.Fields, now: int) -> None:
        """The sender holds copies of these jobs or events (one or more IDs per
        message)."""
        jobs = self.node.jobs
        adding = self.node.groups.repl.adding
        for rid in fields:
            if len(rid) != JOB_ID_LEN:  # an event's ID (checked by messages.parse)
                e = adding.get(rid)
                if e is not None:
                    self._got_copy(p, e, now)
                continue
            job = jobs.get(rid)
            if job is not None and job.state == WAIT_REPL:
                self._got_copy(p, job, now)

    def _got_copy(self, p: Peer, rec: Record, now: int) -> None:
        pid = p.id
        confirmed = rec.confirmed
        if pid not in confirmed:
            rec.confirmed = confirmed = (*confirmed, pid)
        if pid not in rec.delivered:
            rec.delivered = (*rec.delivered, pid)
        if len(confirmed) < rec.repl:
            return
        client, _, extrepl = self.waiting.pop(rec.id, _NOT_WAITING)
        self.node.awake.cancel_near(rec)  # its replication retry, due within REPL_RETRY_MS
        if client is not None:
            client.blocked_add = None
        if not isinstance(rec, Job):
            self.node.groups.repl.replicated(rec, client, now)
            return
        move(rec, ACTIVE)
        if client is not None and not client.closed:
            self.node.outbox.append((client, b"+" + rec.id + b"\r\n"))
        self.replicated(rec, now, extrepl)

    def on_enqueue(self, p: Peer, fields: M.Fields, now: int) -> None:
        job = self.node.jobs.get(fields[0])
        if job is None or job.state != ACTIVE:
            return
        q = self.node.queues.get(job.queue)
        if q is not None and q.flags & PAUSED_IN:
            return
        if job.qtime == 0 and job.retry == 0:
            job.qtime = now  # an at-most-once job's one and only enqueue
        self.node.store.enqueue(job, now)

    def has_peers(self, job: Job) -> bool:
        d = job.delivered  # distinct node IDs
        n = len(d)
        return n > 1 or (n == 1 and d[0] != self.node.myid)

    def send_willqueue(self, job: Job) -> None:
        self.node.send_to_copies(job, M.WILLQUEUE, job.id)

    def broadcast_queued(self, job: Job, incr: int) -> None:
        self.node.send_to_copies(job, M.QUEUED, job.id, incr)

    def broadcast_working(self, job: Job) -> None:
        self.node.send_to_copies(job, M.WORKING, job.id)

    def on_willqueue(self, p: Peer, fields: M.Fields, now: int) -> None:
        job = self.node.jobs.get(fields[0])
        if job is None:
            return
        if job.state == QUEUED:
            self.broadcast_queued(job, 0)
        elif job.state == ACTIVE and job.flags & F_DEFERRED and job.qtime > now:
            self.node.send([p.id], M.WORKING, job.id)  # a delayed NACK: hold off
        elif job.state == ACKED:
            self.node.send([p.id], M.SETACK, job.id, len(job.delivered))

    def on_queued(self, p: Peer, fields: M.Fields, now: int) -> None:
        job = self.node.jobs.get(fields[0])
        incr = fields[1]
        if job is None or job.state == ACKED:
            return
        if incr == M.QUEUED_INCR_NACKS:
            if job.nacks < COUNTER_TOP:
                job.nacks += 1
        elif incr == M.QUEUED_INCR_DELIV and job.adeliv < COUNTER_TOP:
            job.adeliv += 1
        if incr and self.node.aof.on and job.state != WAIT_REPL:
            self.node.aof.created(job)  # keep the counters across a reload
        if job.state == QUEUED and _xor_rank(p.id, job.id) > _xor_rank(self.node.myid, job.id):
            self.node.store.dequeue(job)
        if job.retry:
            job.qtime = self.node.store.retry_at(now, job.retry)
            job.flags |= F_BCAST_WILLQUEUE
        self.node.store.schedule(job)

    def on_working(self, p: Peer, fields: M.Fields, now: int) -> None:
        job = self.node.jobs.get(fields[0])
        if job is None or job.state == ACKED:
            return
        if job.state == QUEUED:
            self.node.store.dequeue(job)
        if job.retry and job.qtime:
            job.qtime = self.node.store.retry_at(now, job.retry)
            job.flags |= F_BCAST_WILLQUEUE
        self.node.store.schedule(job)
