"""Acknowledgements and their garbage collection across the cluster.

An acked job stays as a tombstone until every node that may hold a copy confirmed it
(SETACK/GOTACK, retried with back-off), then DELJOB frees it everywhere; FASTACK skips
the confirmation round. Without peers, an ack frees the job at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from . import messages as M
from .ids import id_is_at_most_once, id_ttl_minutes
from .job import ACKED, ACTIVE, F_DUMMY, F_OUTCOME, QUEUED, WAIT_REPL, Job, move
from .jobmetrics import CANCELLED as M_CANCELLED
from .jobmetrics import DEFAULT_REASON
from .outcomes import CANCELLED, COMPLETED, FAILED

if TYPE_CHECKING:
    from .membership import Peer
    from .node import Node

GC_MIN_MS: Final = 1000  # first ack GC retry, doubling up to GC_MAX_MS
GC_MAX_MS: Final = 180_000


class Acks:
    def __init__(self, node: Node) -> None:
        self.node = node

    def ack(self, job: Job, now: int, result: bytes = b"", failed: bool = False) -> None:
        """ACK-JOB(job): the job is done; it will never be queued again. A node with
        no peers holds the only copy, so garbage collection is immediate. ``result``
        (ACKJOB ... RESULT) is kept in the outcome here and on every copy; ``failed``:
        the ack of a FAILJOB (counted as dead-lettered, not acked)."""
        if job.state == ACKED:
            return
        node = self.node
        node.stats.jobs_acked += 1
        if not failed:
            node.metrics.acked(job, now)
        if node.events_on:
            node.events_out.append((now, "acked", job.id, job.queue, None))
        if result:
            self._completed_with(job, result, now)
        node.store.record_outcome(job, COMPLETED, now)
        if not node.clustered:
            node.store.unregister(job)
            return
        self.cluster_ack(job, now)

    def start_gc(self, job: Job, now: int) -> None:
        """Try to garbage collect an acked job (START-GC). Without peers nobody else
        can hold a copy, so the job is freed at once."""
        if job.state != ACKED:
            return
        if self.node.clustered:
            self.cluster_start_gc(job, now)
        else:
            self.node.store.unregister(job)

    def dummy_ack(self, jid: bytes, now: int) -> Job | None:
        """Hold an ACK for a job this node never saw; only useful with other nodes.
        None past maxmemory: the other copies then go on (at least once delivery)."""
        node = self.node
        if node.size <= 1 or node.leaving or id_is_at_most_once(jid):
            return None
        if not node.mem.fits_job(0):  # one ACKJOB of 1M unknown IDs must stay in maxmemory
            return None
        job = Job(jid, b"", b"", node.next_ctime(now), id_ttl_minutes(jid) * 60)
        move(job, ACKED)
        job.flags |= F_DUMMY
        job.confirmed = (node.myid,)
        node.store.register(job)
        node.mem.evictable[jid] = job
        self.schedule_gc(job, now)
        return job

    def cluster_ack(self, job: Job, now: int) -> None:
        """ACK-JOB with peers: mark acked; GC runs now and then with back-off."""
        if job.state == WAIT_REPL:
            # a copy was delivered and acked before all copies confirmed: the job
            # exists and is done, so the producer still waiting gets its ID
            waiting = self.node.repl.waiting.pop(job.id, None)
            if waiting is not None and not waiting[0].closed:
                waiting[0].blocked_add = None
                self.node.outbox.append((waiting[0], b"+" + job.id + b"\r\n"))
            move(job, ACTIVE)
        self.node.store.record_outcome(job, COMPLETED, now)  # (a copy told by SETACK/GOTACK)
        if job.state == QUEUED:
            self.node.store.dequeue(job)
        if not job.delivered and not job.flags & F_DUMMY:
            job.delivered = (self.node.myid,)  # () means "only here" for single-copy jobs
        move(job, ACKED)
        job.confirmed = (self.node.myid,)
        job.qtime = 0  # for acked jobs: the number of GC attempts so far
        if self.node.aof.on:  # an acked job must not come back after a restart
            self.node.aof.deleted(job)
        self.node.mem.evictable[job.id] = job
        self.schedule_gc(job, now)

    def peer_recovered(self, nid: str, now: int) -> None:
        """A node is reachable again: acked jobs it may hold get a GC attempt now,
        instead of after their back-off (which may have grown to minutes)."""
        for job in self.node.mem.evictable.values():
            if job.state == ACKED and (nid in job.delivered or not job.delivered):
                job.qtime = 0
                self.node.awake.schedule(job, now + 10 + int(self.node.random() * 100))

    def schedule_gc(self, job: Job, now: int) -> None:
        delay = min(GC_MAX_MS, GC_MIN_MS << min(job.qtime, 10))
        job.qtime += 1
        self.node.awake.schedule(job, now + delay + self.node.jitter())

    def cluster_start_gc(self, job: Job, now: int) -> None:
        """START-GC(job)."""
        delivered = job.delivered
        if delivered and all(n in job.confirmed for n in delivered):
            self._gc_done(job)
            return
        if not delivered:  # a dummy ack: ask everybody
            self.node.send(self.node.members.known_peers(), M.SETACK, job.id, 0)
        else:
            self.node.send([n for n in delivered if n not in job.confirmed and n != self.node.myid],
                      M.SETACK, job.id, len(delivered))

    def _gc_done(self, job: Job) -> None:
        self.node.send_to_copies(job, M.DELJOB, job.id)
        self.node.store.unregister(job)

    def on_setack(self, p: Peer, fields: M.Fields, now: int) -> None:
        jid, may_have = fields[0], fields[1]
        job = self.node.jobs.get(jid)
        if job is not None and job.state != ACKED:
            self.node.stats.jobs_acked += 1
            self.cluster_ack(job, now)
        if job is None or len(job.delivered) <= may_have:
            self.node.send([p.id], M.GOTACK, jid, job is not None)
        if job is not None and may_have == 0:  # a dummy ack asked: we know the job
            self.node.send([p.id], M.GOTACK, jid, True)
        if job is not None and (len(job.delivered) > may_have or may_have == 0):
            self.cluster_start_gc(job, now)

    def on_gotack(self, p: Peer, fields: M.Fields, now: int) -> None:
        job = self.node.jobs.get(fields[0])
        known = bool(fields[1])
        if job is None:
            return
        if job.state != ACKED:
            self.node.stats.jobs_acked += 1
            self.cluster_ack(job, now)
        if known and job.delivered and p.id not in job.delivered:
            job.delivered = (*job.delivered, p.id)
        # The README's rule would never confirm a node that does not know a dummy ack's
        # job, so "nobody knows it" could never be reached; as Disque's code does, every
        # answer confirms its sender (a node without the job has nothing to re-queue).
        if p.id not in job.confirmed:
            job.confirmed = (*job.confirmed, p.id)
        if job.delivered and all(n in job.confirmed for n in job.delivered):
            self._gc_done(job)
        elif not job.delivered and (known or len(job.confirmed) >= self.node.size):
            self.node.store.unregister(job)

    def on_deljob(self, p: Peer, fields: M.Fields, now: int) -> None:
        job = self.node.jobs.get(fields[0])
        if job is None:
            return
        if job.state == WAIT_REPL and job.id in self.node.repl.waiting:
            return  # our own job being replicated: a stale DELJOB
        if len(fields) > 1:
            # a FASTACK's DELJOB lists the nodes it was sent to; copies the acking
            # node did not know of (federation moved them) are told by us
            covered = fields[1]
            rest = [n for n in job.delivered if n != self.node.myid and n not in covered]
            if rest:
                self.node.send(rest, M.DELJOB, job.id, [*covered, *rest])
            self.node.store.record_outcome(job, COMPLETED, now)
        self.node.store.unregister(job)

    def _completed_with(self, job: Job, result: bytes, now: int) -> None:
        """Record a completion with the worker's result and send it to the copies
        before the ack's own messages (their outcome is then recorded with it)."""
        node = self.node
        if job.flags & F_OUTCOME or job.state == WAIT_REPL or not node.store.outcomes_on:
            return
        result = result[:node.outcomes.max_detail]
        node.store.record_outcome(job, COMPLETED, now, result)
        node.send_to_copies(job, M.OUTCOME, job.id, COMPLETED, result)

    def fast_ack(self, job: Job, now: int, result: bytes = b"") -> None:
        if job.state != ACKED:
            self.node.metrics.acked(job, now)
            if result:
                self._completed_with(job, result, now)
            self.node.store.record_outcome(job, COMPLETED, now)
        others = [n for n in job.delivered if n != self.node.myid]
        self.node.send(others, M.DELJOB, job.id, [self.node.myid, *others])
        self.node.store.unregister(job)

    def fail(self, job: Job, error: bytes, now: int, reason: bytes = DEFAULT_REASON) -> None:
        """FAILJOB: the job failed for good (the worker gave up): its outcome is FAILED
        with the error, on every copy, then it is acknowledged as any finished job."""
        node = self.node
        node.metrics.dead_lettered(job.queue, reason)
        node.store.record_outcome(job, FAILED, now, error)
        node.send_to_copies(job, M.OUTCOME, job.id, FAILED, error)
        self.ack(job, now, failed=True)
        if job.state == ACKED:
            self.start_gc(job, now)

    def cancel(self, job: Job, now: int) -> None:
        """CANCEL: a job nobody works on ends here and on every copy, as CANCELLED."""
        node = self.node
        node.metrics.count(job.queue, M_CANCELLED)
        node.store.record_outcome(job, CANCELLED, now)
        node.send_to_copies(job, M.OUTCOME, job.id, CANCELLED, b"")
        if node.events_on:
            node.events_out.append((now, "deleted", job.id, job.queue, None))
        node.store.unregister(job)

    def on_outcome(self, p: Peer, fields: M.Fields, now: int) -> None:
        """A copy's job completed with a result or failed (an ack follows), or was
        cancelled (gone everywhere)."""
        job = self.node.jobs.get(fields[0])
        if job is None:
            return
        state, detail = fields[1], fields[2]
        self.node.store.record_outcome(job, state, now, detail)
        if state == CANCELLED:
            self.node.store.unregister(job)

    def fast_ack_unknown(self, jid: bytes) -> None:
        self.node.send(self.node.members.known_peers(), M.DELJOB, jid)
