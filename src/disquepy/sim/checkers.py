"""The guarantees, checked against what clients saw and what the nodes hold.

During the run (cheap checks on every event, state sweeps every few hundred ms):

* (b) a RETRY 0 job is delivered at most once, crashes and restarts included;
* (c) the counters (nacks, additional-deliveries) of a job copy never decrease;
* (f) no node raises: any exception in the core ends the run as a failure;
* every command is answered: a blocked GETJOB or ADDJOB by its own timeout;
* a delivered job is one a client added, under the ID its ADDJOB returned; it is
  not delivered before its DELAY nor after its TTL (clock skew allowed for);
* a synchronous ADDJOB replies with an ID only once REPLICATE copies exist: at that
  moment, the nodes holding a copy (plus copies since lost in crashes) number at least
  REPLICATE, unless the job was already delivered (a replica whose GOTJOB is slow
  re-queues the job after RETRY, and a consumer may ack it before the reply);
* memory accounting: ``used_memory`` equals what the node's jobs, queues and clients
  cost, and every evictable job is registered.

At the end, after the network healed, every node restarted and consumers kept asking
long enough for retries and garbage collection:

* (a) every at-least-once job whose ADDJOB got an ID, and whose TTL outlives the run,
  was delivered, and eventually acked by a consumer (it kept coming back until one
  did), unless REPLICATE or more of the nodes holding copies lost theirs for good (a
  crash with no durable AOF record of it);
* (d) no node holds an acked job (garbage collection finished; dummy acks too);
* (e) queues drained: no job is left queued, and no at-least-once job is left anywhere;
  no producer is left waiting; the whole run settles (nothing left to do) in time.
"""

from __future__ import annotations

import traceback
from typing import TYPE_CHECKING

from ..core.job import ACKED, F_DELIVERED, F_DUMMY, QUEUED, STATE_NAMES, WAIT_REPL
from ..core.memory import CLIENT_OVERHEAD, JOB_OVERHEAD
from ..core.queues import QUEUE_OVERHEAD
from .groups import events_memory

if TYPE_CHECKING:
    from ..core.job import Job
    from ..core.node import Node
    from .history import JobRecord
    from .world import World

MAX_KEPT = 50  # failures kept per kind and run (all are counted)
REPLY_SLACK_MS = 1000  # a blocked command must be answered by its timeout plus this


class Failure:
    __slots__ = ("kind", "message", "time")

    def __init__(self, kind: str, message: str, time: int) -> None:
        self.kind = kind
        self.message = message
        self.time = time

    def __repr__(self) -> str:
        return f"[{self.kind} @{self.time}ms] {self.message}"


class SimAbort(Exception):
    """The run cannot go on (an exception in the core, a limit hit)."""


class Checker:
    __slots__ = ("world", "failures", "counts", "lost_on", "seen", "stats")

    def __init__(self, world: World) -> None:
        self.world = world
        self.failures: list[Failure] = []
        self.counts: dict[str, int] = {}
        self.lost_on: dict[bytes, list[int]] = {}  # job id -> nodes that lost a copy for good
        # (c): last counters, job id -> (the copy, nacks, additional deliveries)
        self.seen: list[dict[bytes, tuple[Job, int, int]]] = [{} for _ in range(world.cfg.nodes)]  # (c): last counters
        self.stats = {
            "lost": 0,
            "excused_lost": 0,
            "excused_unfinished": 0,
            "amo_undelivered": 0,
            "amo_lingering": 0,
            "copies_lost": 0,
            "sweeps": 0,
        }

    # ------------------------------------------------------------- reports
    def fail(self, kind: str, message: str) -> None:
        n = self.counts[kind] = self.counts.get(kind, 0) + 1
        if n <= MAX_KEPT:
            self.failures.append(Failure(kind, message, self.world.elapsed()))

    def exception(self, node: int, exc: BaseException) -> None:
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-6))
        self.fail("exception", f"node {node} raised {type(exc).__name__}: {exc}\n{tb}")

    @property
    def ok(self) -> bool:
        return not self.counts

    # -------------------------------------------------------------- copies
    def _holds(self, node: Node, jid: bytes) -> bool:
        job = node.jobs.get(jid)
        return job is not None and not job.flags & F_DUMMY and job.state != ACKED

    def holders(self, jid: bytes) -> int:
        """Nodes holding a copy: in memory, or durable on the disk of a node that is
        down (it comes back on restart)."""
        w = self.world
        n = 0
        for i, node in enumerate(w.nodes):
            if node is None:
                n += jid in w.down_live[i]
            elif self._holds(node, jid):
                n += 1
        return n

    def excused(self, rec: JobRecord, jid: bytes) -> bool:
        """Lost for good on REPLICATE or more nodes (for an ASYNC job, on as many nodes
        as held a copy when the ID was returned, at least one)."""
        need = rec.repl
        if rec.is_async:
            need = max(1, min(rec.repl, rec.holders_at_reply))
        return len(self.lost_on.get(jid, ())) >= need

    # ------------------------------------------------------------- events
    def on_added(self, rec: JobRecord, jid: bytes, node: int) -> None:
        rec.holders_at_reply = h = self.holders(jid)
        if rec.is_async or rec.repl == 1 or rec.deliveries:
            return  # (a replica may re-queue it, and a consumer ack it, before the reply)
        lost = len(self.lost_on.get(jid, ()))
        if h + lost < rec.repl:
            self.fail(
                "replication",
                f"ADDJOB replied {jid.decode()} with REPLICATE "
                f"{rec.repl} but {h} node(s) hold a copy ({lost} lost "
                f"in crashes): {rec}",
            )

    def on_delivery(
        self,
        rec: JobRecord | None,
        jid: bytes,
        body: bytes,
        node: int,
        agent: int,
        counters: object,
    ) -> bool:
        """A consumer got a job. False if it is not a job anyone added."""
        w = self.world
        t = w.now
        if rec is None:
            self.fail(
                "bad-delivery",
                f"node {node} delivered {jid!r} with body {body!r} that no client added",
            )
            return False
        if rec.jid is not None and rec.jid != jid:
            self.fail(
                "bad-delivery",
                f"node {node} delivered body {body!r} as {jid!r}, but ADDJOB returned {rec.jid!r}",
            )
            return False
        if rec.retry == 0 and rec.deliveries:
            first = rec.deliveries[0]
            self.fail(
                "at-most-once",
                f"RETRY 0 job {jid.decode()} delivered again by node "
                f"{node} (first by node {first[1]} at "
                f"{w.elapsed(first[0])}ms): {rec}",
            )
        tol = w.skew_tolerance()
        if t > rec.sent_at + rec.ttl * 1000 + tol:
            self.fail(
                "ttl",
                f"node {node} delivered {jid.decode()} "
                f"{t - rec.sent_at - rec.ttl * 1000} ms after its TTL: {rec}",
            )
        if not rec.deliveries and t < rec.sent_at + rec.delay * 1000 - 10:
            self.fail(
                "delay",
                f"node {node} delivered {jid.decode()} "
                f"{t - rec.sent_at} ms after ADDJOB, DELAY {rec.delay}: {rec}",
            )
        w.history.delivered(rec, t, node, agent)
        w.trace.note(b"D", t, node, agent, jid)
        return True

    def on_crash(self, i: int, node: Node, live: set[bytes]) -> None:
        """Node i is gone: its copies without a durable AOF record are lost for good."""
        for job in node.jobs.values():
            if (
                job.flags & F_DUMMY
                or job.state == ACKED
                or job.state == WAIT_REPL
                or job.id in live
            ):
                continue  # (a copy still being replicated was promised to nobody yet)
            lst = self.lost_on.setdefault(job.id, [])
            if i not in lst:
                lst.append(i)
            self.stats["copies_lost"] += 1
        self.seen[i] = {}

    # -------------------------------------------------------------- sweeps
    def sweep(self) -> None:
        self.stats["sweeps"] += 1
        w = self.world
        for i, node in enumerate(w.nodes):
            if node is not None:
                self._sweep_node(i, node)
        for a in w.workload.overdue(REPLY_SLACK_MS + w.skew_tolerance()):
            p = a.pending
            if p is None:
                continue
            what = repr(p.rec) if p.rec is not None else (p.held.jid.decode() if p.held else "")
            self.fail(
                "no-reply",
                f"node {p.node} never answered agent {a.idx}'s {p.kind} "
                f"sent at {w.elapsed(p.sent_at)}ms (timeout "
                f"{p.due - p.sent_at} ms) {what}",
            )
            w.abandon(a)

    def _sweep_node(self, i: int, node: Node) -> None:
        prev = self.seen[i]
        cur: dict[bytes, tuple[Job, int, int]] = {}
        mem = 0
        for job in node.jobs.values():
            jid = job.id
            mem += JOB_OVERHEAD + len(job.body)
            p = prev.get(jid)
            if p is not None and p[0] is job and (job.nacks < p[1] or job.adeliv < p[2]):
                self.fail(
                    "counters",
                    f"node {i}: job {jid.decode()} counters went from "
                    f"nacks={p[1]} adeliv={p[2]} to nacks={job.nacks} "
                    f"adeliv={job.adeliv}",
                )
            cur[jid] = (job, job.nacks, job.adeliv)
        self.seen[i] = cur
        for q in node.queues.by_name.values():
            mem += QUEUE_OVERHEAD + len(q.name)
        for c in node.clients.values():
            mem += CLIENT_OVERHEAD + c.qbuf
        mem += events_memory(node)
        if mem != node.mem.used:
            self.fail(
                "memory",
                f"node {i}: used_memory {node.mem.used} but its jobs, "
                f"queues, clients and events cost {mem}",
            )
        for jid, job in node.mem.evictable.items():
            if node.jobs.get(jid) is not job:
                self.fail(
                    "memory", f"node {i}: evictable job {jid.decode()} is not registered (leaked)"
                )
                break

    # --------------------------------------------------------------- final
    def final(self) -> None:
        w = self.world
        end = w.now
        tol = w.skew_tolerance() + 1000
        no_faults = not w.cfg.faults
        st = self.stats
        for rec in w.history.by_body.values():
            jid = rec.jid
            if jid is None or rec.sent_at + rec.ttl * 1000 <= end + tol:
                continue  # no ID (no promise), or expired by now: only safety applies
            if not rec.at_least_once:
                if not rec.deliveries:
                    st["amo_undelivered"] += 1
                    if no_faults:
                        self.fail(
                            "lost", f"at-most-once job never delivered without any fault: {rec}"
                        )
                continue
            if not rec.deliveries:
                if self.excused(rec, jid):
                    st["excused_lost"] += 1
                else:
                    st["lost"] += 1
                    self.fail("lost", f"never delivered: {rec} {self._whereabouts(jid)}")
            elif rec.acked_at is None:
                if self.excused(rec, jid):
                    st["excused_unfinished"] += 1
                else:
                    self.fail(
                        "unfinished",
                        f"delivered {len(rec.deliveries)} time(s) but "
                        f"never came back to be acked: {rec} "
                        f"{self._whereabouts(jid)}",
                    )
        for i, node in enumerate(w.nodes):
            if node is None:
                self.fail("stuck", f"node {i} is still down at the end")
                continue
            self._final_node(i, node)
            self._sweep_node(i, node)
        if w.settled_after_ms is None:
            held = sum(len(a.held) for a in w.workload.agents)
            left = [len(n.jobs) for n in w.nodes if n is not None]
            self.fail(
                "not-settled",
                f"still busy after {w.cfg.quiesce_max_s} s without "
                f"faults: consumers hold {held} job(s), nodes hold "
                f"{left} job(s)",
            )

    def _whereabouts(self, jid: bytes) -> str:
        lost = self.lost_on.get(jid, [])
        where = []
        for i, node in enumerate(self.world.nodes):
            job = node.jobs.get(jid) if node is not None else None
            if job is not None:
                where.append(f"node {i}: {STATE_NAMES[job.state].decode()}")
        return (
            f"[copies lost in crashes on nodes {lost}; held at the end by "
            f"{', '.join(where) or 'no node'}]"
        )

    def _final_node(self, i: int, node: Node) -> None:
        w = self.world
        reloaded = w.reloaded[i]
        for job in node.jobs.values():
            jid = job.id.decode()
            if job.state == ACKED:
                what = "dummy ack" if job.flags & F_DUMMY else "acked job"
                self.fail("not-collected", f"node {i} still holds {what} {jid}")
            elif job.state == QUEUED:
                self.fail(
                    "stuck",
                    f"node {i}: job {jid} still queued in {job.queue!r} while consumers ask for it",
                )
            elif job.state == WAIT_REPL:
                self.fail("stuck", f"node {i}: job {jid} still waiting for replication")
            elif job.retry:
                rec = w.history.by_body.get(job.body)
                self.fail(
                    "stuck",
                    f"node {i}: at-least-once job {jid} still active "
                    f"(never re-queued or never collected): {rec}",
                )
            elif job.flags & F_DELIVERED or job.id in reloaded:
                self.stats["amo_lingering"] += 1  # at most once: stays until its TTL
            else:
                self.stats["amo_lingering"] += 1
                if not w.cfg.faults:
                    self.fail(
                        "stuck",
                        f"node {i}: at-most-once job {jid} never delivered "
                        f"nor queued, without any fault",
                    )
        for q in node.queues.by_name.values():
            if q.flags:
                self.fail("stuck", f"node {i}: queue {q.name!r} still paused")
        for waiting in node.repl.waiting:
            self.fail(
                "stuck",
                f"node {i}: a producer still waits for copies of "
                f"{waiting.decode()} (repl_waiting entry left)",
            )
