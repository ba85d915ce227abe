"""The node's memory accounting and eviction (``maxmemory``).

``used`` is what the node counts for what it holds: each job, queue, client, request
buffer, idempotency key and delivery token adds a fixed overhead plus its variable
bytes when it is created and takes it back when it goes (the owners do the counting;
the simulator's memory checker recomputes the sum). Near the limit the node refuses
commands marked ``denyoom`` (ADDJOB, not ACKJOB: acks free memory) and places new
copies on other nodes; first it evicts what is safe to lose: acked jobs and delivered
at-most-once jobs (``evictable``, oldest first), then queues that hold nothing.

Pure: no clock, no OS figures (the shell adds RSS to INFO).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ..codec import resp
from . import errors
from .job import QUEUED, WAIT_REPL, Job

if TYPE_CHECKING:
    from .node import Node

# what one job or client costs this process, measured for CPython 3.11 with
# tracemalloc (see docs/PERFORMANCE.md); a job's body is added as is
JOB_OVERHEAD: Final = 400  # bytes counted per job (plus its body)
CLIENT_OVERHEAD: Final = 2000  # per connected client (plus its buffered request bytes)

# memory levels: what the node does (see level())
NORMAL: Final = 0
HIGH: Final = 1
CRITICAL: Final = 2
FULL: Final = 3


class Memory:
    def __init__(self, node: Node) -> None:
        self.node = node
        self.used = 0
        self.peak = 0  # highest ``used`` seen by INFO
        self.limit: float = float("inf")  # maxmemory, or infinity without one
        # jobs that may be evicted under memory pressure without breaking safety:
        # acked jobs and delivered at-most-once jobs, oldest first
        self.evictable: dict[bytes, Job] = {}
        self.bus_buffer = 0  # bytes of bus frames still arriving (Node.set_bus_buffer)

    def set_limit(self, maxmemory: int) -> None:
        self.limit = maxmemory or float("inf")

    def level(self) -> int:
        """NORMAL, HIGH above 75% of maxmemory, CRITICAL above 95%, FULL at 100%."""
        maxmem = self.node.config.maxmemory
        used = self.used
        if not maxmem or used * 100 <= maxmem * 75:
            return NORMAL
        if used * 100 <= maxmem * 95:
            return HIGH
        return CRITICAL if used < maxmem else FULL

    def refuse_oom(self, extra: int = 0) -> bytes | None:
        """The OOM reply if ``extra`` more bytes would not fit in maxmemory after
        evicting what is safe to evict, else None. ``extra``: what one request is
        about to allocate (e.g. GETJOB's new queues) counts before it is allocated."""
        if self.used + extra < self.limit:
            return None
        maxmem = self.node.config.maxmemory
        self.evict(max(0, maxmem * 95 // 100 - extra))
        if self.used + extra >= maxmem:
            self.node.stats.oom_refusals += 1
            return resp.error(errors.OOM)
        return None

    def fits_job(self, body_len: int, percent: int = 100) -> bool:
        """Whether a job with a body this long fits within ``percent`` % of maxmemory:
        copies from other nodes are refused past it (the sender asks another node).
        (``limit``, not the configuration: a compiled read of the interpreted Config is
        a dict lookup, and this runs for every copy received.)"""
        return self.used + JOB_OVERHEAD + body_len <= self.limit * percent / 100

    def evict(self, target: int) -> None:
        """Free what does not break safety, oldest first: acked jobs, delivered
        at-most-once jobs, then empty idle queues, until memory is under ``target``."""
        node = self.node
        ev = self.evictable
        while ev and self.used > target:
            job = next(iter(ev.values()))
            del ev[job.id]
            if job.state == QUEUED or job.state == WAIT_REPL:
                continue
            node.stats.jobs_evicted += 1
            node.store.unregister(job)
        if self.used > target:
            node.queues.drop_removable()

    def clear(self) -> None:
        """After FLUSHALL: only the clients (and bus frames arriving) are left."""
        self.evictable.clear()
        clients = self.node.clients.values()
        self.used = (CLIENT_OVERHEAD * len(clients) + sum(c.qbuf for c in clients)
                     + self.bus_buffer)
