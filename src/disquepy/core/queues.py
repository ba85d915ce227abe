"""The node's queues by name, and the consumers blocked on them.

A queue exists while it holds jobs, has consumers waiting, is paused, or was used
recently (GETJOB on an unknown queue creates it, as in Disque); idle empty queues are
dropped by the node's cron, sooner under memory pressure. A GETJOB that finds nothing
blocks its client here: it waits on each queue it named (FIFO per queue) until a job
arrives (``ready`` lists queues to serve), its deadline passes (a heap of deadlines),
or it is unblocked by the node (client gone, FLUSHALL, LEAVING).

Pure: time comes in as ``now`` (ms); replies go to the node's outbox.
"""

from __future__ import annotations

import contextlib
import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING, Final
from zlib import crc32

from librt.strings import BytesWriter

from ..codec import resp
from .awake import NEVER
from .client import BlockedGet, Client
from .queue import PAUSED_OUT, Queue

if TYPE_CHECKING:
    from .job import Job
    from .node import Node

QUEUE_OVERHEAD: Final = 1200  # bytes counted in used memory per queue (plus its name)


_NACKS: Final = b"$5\r\nnacks\r\n"
_ADELIV: Final = b"$21\r\nadditional-deliveries\r\n"


def jobs_reply(jobs: list[Job], withcounters: bool) -> bytes:
    """GETJOB's reply for ``jobs`` (not empty): the array of job_reply's, written once
    for the batch into one buffer (no bytes object per job, one header per queue run)."""
    w = BytesWriter()
    w.write(b"*1\r\n" if len(jobs) == 1 else b"*%d\r\n" % len(jobs))
    last_q = b""
    head = b""
    for job in jobs:
        q = job.queue
        if q is not last_q:
            head = _job_head(q, withcounters)
            last_q = q
        _write_job(w, head, job, withcounters)
    return w.getvalue()


def job_reply(job: Job, withcounters: bool) -> bytes:
    """One job as GETJOB / QPEEK return it: [queue, id, body(, counters)]."""
    w = BytesWriter()
    _write_job(w, _job_head(job.queue, withcounters), job, withcounters)
    return w.getvalue()


def _job_head(q: bytes, withcounters: bool) -> bytes:
    """What a job's entry starts with, up to its ID: the array's length, its queue and
    the ID's length."""
    return (b"*7\r\n" if withcounters else b"*3\r\n") + resp.bulk(q) + b"$40\r\n"


def _write_job(w: BytesWriter, head: bytes, job: Job, withcounters: bool) -> None:
    w.write(head)
    w.write(job.id)
    body = job.body
    w.write(b"\r\n$")
    w.write(resp.length_text(len(body)))
    w.write(b"\r\n")
    w.write(body)
    w.write(b"\r\n")
    if withcounters:
        w.write(b"%b:%d\r\n%b:%d\r\n" % (_NACKS, job.nacks, _ADELIV, job.adeliv))


class Queues:
    """Queues by name, readiness, and blocked GETJOB consumers with their deadlines."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.by_name: dict[bytes, Queue] = {}
        self.ready: list[Queue] = []  # queues that got jobs while consumers wait
        self._blocked_heap: list[tuple[int, int, Client]] = []  # (deadline, client id, client)
        self.block_hint: float = NEVER  # earliest deadline added since the last wake hint
        self._idle_cursor: list[bytes] = []  # snapshot for incremental idle-queue eviction

    def get(self, name: bytes) -> Queue | None:
        return self.by_name.get(name)

    def create(self, name: bytes, now: int) -> Queue:
        """The queue called ``name``, created if new."""
        q = self.by_name.get(name)
        if q is None:
            q = Queue(name, now)
            self.by_name[name] = q
            self.node.mem.used += QUEUE_OVERHEAD + len(name)
        return q

    def drop(self, q: Queue) -> None:
        del self.by_name[q.name]
        node = self.node
        node.mem.used -= QUEUE_OVERHEAD + len(q.name)
        node.stats.queues_evicted += 1

    def drop_removable(self) -> None:
        """Drop every queue that holds nothing and nobody waits on (memory pressure)."""
        for q in [q for q in self.by_name.values() if q.removable()]:
            self.drop(q)

    def evict_idle(self, now: int, max_idle: int, budget: int = 100) -> None:
        """Drop up to ``budget`` queues idle for ``max_idle`` ms, resuming where the
        previous call stopped (a snapshot of the names, taken when it runs out)."""
        if not self._idle_cursor:
            self._idle_cursor = list(self.by_name)
        cursor = self._idle_cursor
        while cursor and budget:
            budget -= 1
            q = self.by_name.get(cursor.pop())
            if q is not None and q.removable() and now - q.atime >= max_idle:
                self.drop(q)

    def clear(self) -> None:
        self.by_name.clear()
        self.block_hint = NEVER

    def scan(self, cursor: int, count: int, busyloop: bool,
             keep: Callable[[Queue], bool]) -> tuple[int, list[Queue]]:
        """QSCAN: queues in order of a stable hash of their name; the cursor is the
        next hash. Queues sharing a hash come in one call."""
        order = sorted((crc32(name), name) for name in self.by_name)
        out: list[Queue] = []
        i = 0
        n = len(order)
        while i < n and order[i][0] < cursor:
            i += 1
        steps = count * 10
        while i < n:
            h = order[i][0]
            while i < n and order[i][0] == h:
                q = self.by_name[order[i][1]]
                if keep(q):
                    out.append(q)
                i += 1
            steps -= 1
            if not busyloop and (len(out) >= count or steps <= 0):
                break
        return (order[i][0] if i < n else 0), out

    def set_pause(self, q: Queue, flags: int) -> None:
        """Replace a queue's pause flags; clearing OUT serves waiting consumers."""
        was_out = q.flags & PAUSED_OUT
        q.flags = flags
        if was_out and not flags & PAUSED_OUT and q.jobs and q.waiters:
            self.ready.append(q)

    # --- blocked consumers ------------------------------------------------------
    def block(self, client: Client, blocked: BlockedGet, now: int) -> None:
        """``client`` waits on every queue of ``blocked`` (each created if new)."""
        client.blocked = blocked
        node = self.node
        for name in blocked.queues:
            self.create(name, now).waiters.append(client)
            if node.clustered:
                node.fed.watch[name] = None
        if blocked.deadline:
            heapq.heappush(self._blocked_heap, (blocked.deadline, client.id, client))
            if blocked.deadline < self.block_hint:
                self.block_hint = float(blocked.deadline)

    def unblock(self, client: Client, served: bool = False) -> None:
        """The client no longer waits (served a job, timed out, gone). A queue whose
        last waiter left unserved withdraws its federation request at once."""
        b = client.blocked
        client.blocked = None
        if b is None:
            return
        node = self.node
        for name in b.queues:
            q = self.by_name.get(name)
            if q is not None:
                with contextlib.suppress(ValueError):
                    q.waiters.remove(client)
                if not q.waiters and not served and node.clustered:
                    node.fed.waiters_gone(q)

    def serve_ready(self, now: int) -> None:
        """Serve clients blocked on queues that received jobs, one job each, FIFO."""
        node = self.node
        ready, self.ready = self.ready, []
        for q in ready:
            while q.waiters and q.jobs and not q.flags & PAUSED_OUT:
                c = q.waiters[0]
                b = c.blocked
                assert b is not None  # a waiter is blocked until unblocked here
                self.unblock(c, served=True)
                job = node.store.fetch(q, now)
                if b.token is not None:
                    node.keys.token_record(b.token, (job.id,), now)
                node.outbox.append((c, jobs_reply([job], b.withcounters)))

    def reply_blocked(self, reply: bytes | None = None) -> None:
        """Unblock every blocked client with ``reply`` (e.g. -LEAVING), or with a
        null array in its protocol when None (FLUSHALL)."""
        node = self.node
        for c in list(node.clients.values()):
            if c.blocked is not None:
                self.unblock(c)
                node.outbox.append((c, resp.null_array(c.proto) if reply is None else reply))

    def next_deadline(self) -> int | None:
        """The earliest deadline of a client still blocked (stale entries dropped)."""
        h = self._blocked_heap
        while h and (h[0][2].blocked is None or h[0][2].blocked.deadline != h[0][0]):
            heapq.heappop(h)
        return h[0][0] if h else None

    def expire_blocked(self, now: int) -> None:
        """Clients whose GETJOB TIMEOUT passed get a null array."""
        h = self._blocked_heap
        node = self.node
        while h and h[0][0] <= now:
            deadline, _, c = heapq.heappop(h)
            b = c.blocked
            if b is not None and b.deadline == deadline:
                self.unblock(c)
                node.outbox.append((c, resp.null_array(c.proto)))
