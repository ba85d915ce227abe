"""Federation: jobs move to the nodes where consumers wait (NEEDJOBS/YOURJOBS).

A node whose consumers find a queue empty asks recent sources (fast back-off) and,
for discovery, every node (slow back-off); a node asked remembers the asker for a
while and pushes new jobs to it. ``watch`` holds the queues the cron must look at.
PAUSE propagation lives here too: it is the other queue-wide message.

The broadcast back-off is the queue's, as in Disque: 4 s after the first broadcast,
then 8, 16, up to 30 s between broadcasts, whoever waits, reset (to 2 s) only when
jobs arrive from a node that was not a recent source. So a consumer that polls with short
GETJOBs on a node does not pull every new job of the cluster to it: a job added with
REPLICATE 1 elsewhere stays where it was added until the back-off allows a broadcast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from . import messages as M
from .job import ACKED, ACTIVE, F_BCAST_WILLQUEUE, F_DELIVERED, QUEUED, WAIT_REPL, move
from .queue import PAUSED_OUT, Queue

if TYPE_CHECKING:
    from .membership import Peer
    from .node import Node

NEEDJOBS_BCAST_MIN_MS: Final = 2000  # discovery broadcast back-off (Disque: 2 s << attempts, to 30 s)
NEEDJOBS_BCAST_MAX_MS: Final = 30_000
NEEDJOBS_ADHOC_MIN_MS: Final = 25  # requests to recent sources (Disque: 25 ms .. 2 s)
NEEDJOBS_ADHOC_MAX_MS: Final = 2000
SOURCE_MEMORY_MS: Final = 5000  # a node that sent us jobs is a "recent source" this long
ASKER_MEMORY_MS: Final = 60_000  # we push new jobs to a node that asked, this long after


class Federation:
    def __init__(self, node: Node) -> None:
        self.node = node
        # queue -> {node id: [until ms, jobs wanted]} (jobs wanted counts down in place)
        self.askers: dict[bytes, dict[str, list[int]]] = {}
        # queues the cron must look at; a dict, not a set: iteration order must not
        # depend on the hash seed (runs replay exactly in the simulator)
        self.watch: dict[bytes, None] = {}

    def queues_drained(self, names: list[bytes], now: int, took: bool = False) -> None:
        """GETJOB found these queues empty (or, ``took``, emptied them): ask other
        nodes for jobs. After taking the last job we ask only recent sources, so a
        steady stream keeps flowing without waking the whole cluster."""
        if not self.node.clustered or self.node.leaving:
            return
        for name in names:
            q = self.node.queues.get(name)
            if q is None or q.jobs:
                continue
            if took and not self.recent_sources(q, now):
                continue
            self.watch[name] = None
            self._need_jobs(q, now, urgent=True)

    def recent_sources(self, q: Queue, now: int) -> list[str]:
        return [n for n, t in q.needjobs_responders.items()
                if now - t < SOURCE_MEMORY_MS and n in self.node.members.peers]

    def _need_jobs(self, q: Queue, now: int, urgent: bool = False) -> None:
        """NEEDJOBS: ad hoc to recent sources (fast back-off), broadcast for discovery.
        We ask for as many jobs as consumers wait here (one for a NOHANG probe)."""
        wanted = max(1, min(100, len(q.waiters)))
        sources = self.recent_sources(q, now)
        if sources and (urgent or now >= q.needjobs_adhoc_time):
            self.node.send(sources, M.NEEDJOBS, q.name, wanted)
            q.needjobs_adhoc_attempt += 1
            q.needjobs_adhoc_time = now + min(
                NEEDJOBS_ADHOC_MAX_MS, NEEDJOBS_ADHOC_MIN_MS << min(q.needjobs_adhoc_attempt, 10))
            q.needjobs_asked = True
        bcast_delay = min(NEEDJOBS_BCAST_MAX_MS,
                          NEEDJOBS_BCAST_MIN_MS << min(q.needjobs_bcast_attempt, 4))
        if now - q.needjobs_bcast_time >= bcast_delay:
            self.node.send(self.node.members.reachable_peers(), M.NEEDJOBS, q.name, wanted)
            q.needjobs_bcast_attempt += 1
            q.needjobs_bcast_time = now
            q.needjobs_asked = True

    def cron(self, now: int) -> None:
        """Only queues in ``watch`` need attention: consumers blocked or requests in
        flight. The rest cost nothing here."""
        if self.node.leaving:
            return
        for name in list(self.watch):
            q = self.node.queues.get(name)
            if q is None:
                self.watch.pop(name, None)
                continue
            if q.waiters and not q.jobs:
                self._need_jobs(q, now)
            elif not q.waiters:
                self.waiters_gone(q)  # (a fallback: unblock() tells us at once)
                self.watch.pop(name, None)
        for name, askers in list(self.askers.items()):
            for n, (until, _) in list(askers.items()):
                if until < now:
                    del askers[n]
            if not askers:
                del self.askers[name]

    def on_needjobs(self, p: Peer, fields: M.Fields, now: int) -> None:
        qname, count = fields[0], fields[1]
        askers = self.askers.setdefault(qname, {})
        if count <= 0:
            askers.pop(p.id, None)
            return
        sent = self._send_jobs(p.id, qname, count, now)
        if sent < count:  # remembered: we push the rest as soon as jobs arrive
            askers[p.id] = [now + ASKER_MEMORY_MS, count - sent]
        else:
            askers.pop(p.id, None)

    def _send_jobs(self, nid: str, qname: bytes, count: int, now: int,
                   exact: bool = False) -> int:
        """YOURJOBS: hand up to ``count`` queued jobs to ``nid``. Answering a request we
        keep half when short (Disque's rule); ``exact`` pushes to a remembered asker."""
        q = self.node.queues.get(qname)
        if q is None or not q.jobs or q.flags & PAUSED_OUT or q.waiters:
            return 0  # nothing, paused in output, or our own consumers come first
        if self.recent_sources(q, now):
            return 0  # we import this queue ourselves: exporting would ping-pong jobs
        n = len(q.jobs)
        give = min(count, n) if exact else (count if n >= count * 2 else max(1, n // 2))
        out: list[list[object]] = []  # the jobs' wire forms
        size = 0
        for _ in range(give):
            if size >= M.SOFT_BYTES:
                break  # the rest on a later request: one frame stays small
            job = q.jobs.pop()
            size += len(job.body)
            q.jobs_out += 1
            move(job, ACTIVE)
            delivered = job.delivered or (self.node.myid,)  # () means "only here"
            if nid not in delivered:
                delivered = (*delivered, nid)
            job.delivered = delivered
            out.append(M.job_to_wire(job, self.node.keys.of.get(job.id)))
            if job.retry == 0:
                self.node.store.unregister(job)  # at most once: the copy moves, none stays
            else:
                job.qtime = self.node.store.retry_at(now, job.retry)
                job.flags |= F_BCAST_WILLQUEUE
                self.node.store.schedule(job)
        if out:
            self.node.send([nid], M.YOURJOBS, out)
        return len(out)

    def pushed_to_askers(self, q: Queue, now: int) -> None:
        """Jobs arrived in a queue nobody here waits on: serve nodes that asked."""
        askers = self.askers.get(q.name)
        if not askers or q.waiters:
            return
        for nid, entry in list(askers.items()):
            if not q.jobs:
                break
            p = self.node.members.peers.get(nid)
            if p is None or not self.node.members.is_reachable(p):
                continue
            entry[1] -= self._send_jobs(nid, q.name, min(entry[1], len(q.jobs)), now,
                                        exact=True)
            if entry[1] <= 0:
                del askers[nid]

    def waiters_gone(self, q: Queue) -> None:
        """The last consumer waiting on ``q`` here left without a job (timed out,
        disconnected): nodes that remember our request must not push jobs here any
        more, where nobody would read them. Told at once, not at the next cron. The
        back-off stays (the queue's, see above): the next short GETJOB here does not
        broadcast again at once."""
        if q.needjobs_asked:
            self.node.send(self.node.members.reachable_peers(), M.NEEDJOBS, q.name, 0)
            q.needjobs_asked = False

    def on_yourjobs(self, p: Peer, fields: M.Fields, now: int) -> None:
        fits = self.node.mem.fits_job
        for j in fields[0]:  # JobFields, decoded and checked by messages.parse
            jid = j.id
            if not fits(len(j.body)) and jid not in self.node.jobs:
                continue  # over maxmemory: the sender re-queues its copy at its retry
            q = self.node.queues.create(j.queue, now)
            last = q.needjobs_responders.get(p.id)
            if last is None or now - last >= SOURCE_MEMORY_MS:
                q.needjobs_bcast_attempt = 0  # a new source: broadcasts may find more
            q.needjobs_responders[p.id] = now
            q.needjobs_adhoc_attempt = 0  # a source answered: ask it quickly again
            q.needjobs_adhoc_time = 0
            q.note_import(now)
            job = self.node.jobs.get(jid)
            if job is None:
                job = self.node.repl.adopt(j, q.name, 0, now)
                if job is None:
                    continue
            elif job.state == ACKED or job.state == WAIT_REPL:
                continue  # done, or ours and still waiting for copies
            if job.state != QUEUED:
                if job.retry == 0 and job.flags & F_DELIVERED:
                    continue
                if job.qtime == 0:
                    job.qtime = now
                self.node.store.enqueue(job, now)

    def import_sources(self, q: Queue, now: int) -> list[bytes]:
        return [n.encode() for n, t in q.needjobs_responders.items()
                if now - t < SOURCE_MEMORY_MS]

    def broadcast_pause(self, qname: bytes, flags: int) -> None:
        self.node.send(self.node.members.known_peers(), M.PAUSE, qname, flags)

    def on_pause(self, p: Peer, fields: M.Fields, now: int) -> None:
        qname, flags = fields[0], fields[1]
        q = self.node.queues.get(qname)
        if q is None and not flags:
            return
        self.node.queues.set_pause(q if q is not None else self.node.queues.create(qname, now), flags)
