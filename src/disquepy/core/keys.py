"""Keys that outlive a request: ADDJOB IDEMPOTENT keys and GETJOB delivery tokens.

An idempotency key maps to the job it added for as long as that job could exist (its
TTL), even after the job is acked or deleted, so a producer retrying with the same key
gets the same ID instead of a second job. A delivery token remembers which jobs one
GETJOB TOKEN delivered, so a consumer retrying after a lost reply gets the same jobs.
Both are counted in the node's used memory and expire from heaps by time.

Pure: time comes in as ``now`` (ms).
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Final

from . import errors
from .errors import ReplyError
from .job import WAIT_REPL, Job

if TYPE_CHECKING:
    from .node import Node

IDEM_OVERHEAD: Final = 200  # an ADDJOB IDEMPOTENT key entry (plus the key's length)
TOKEN_OVERHEAD: Final = 200  # a GETJOB TOKEN entry (plus the token and 8 bytes per job)


class Keys:
    """The node's idempotency keys and delivery tokens."""

    def __init__(self, node: Node) -> None:
        self.node = node
        # key -> (job id, expiry ms); the key outlives its job (acked, deleted) until the
        # job's lifetime ends. ``of``: job id -> key, for live jobs only.
        self.idem: dict[bytes, tuple[bytes, int]] = {}
        self.of: dict[bytes, bytes] = {}
        self._idem_heap: list[tuple[int, bytes]] = []  # (expiry, key) of keys whose job is gone
        # token -> (expiry ms, ids of the jobs it delivered)
        self.tokens: dict[bytes, tuple[int, tuple[bytes, ...]]] = {}
        self._token_heap: list[tuple[int, bytes]] = []

    # --- idempotency keys -----------------------------------------------------------
    def lookup(self, key: bytes, now: int) -> bytes | None:
        """The ID of the job added with ``key`` while its lifetime lasts, else None.
        A job still waiting for its copies cannot be confirmed yet: TRYAGAIN."""
        e = self.idem.get(key)
        if e is None:
            return None
        if e[1] <= now:
            self.forget(key)
            return None
        job = self.node.jobs.get(e[0])
        if job is not None and job.state == WAIT_REPL:
            raise ReplyError(errors.IDEM_BUSY)
        return e[0]

    def bind(self, key: bytes, job: Job) -> None:
        """``key`` now names ``job`` (a new job, or one loaded or replicated here)."""
        if key in self.idem:
            self.forget(key)
        self.idem[key] = (job.id, job.etime)
        self.of[job.id] = key
        self.node.mem.used += IDEM_OVERHEAD + len(key)

    def restore(self, key: bytes, jid: bytes, etime: int) -> None:
        """A key whose job is gone but whose window is open (from the AOF)."""
        if key not in self.idem:
            self.idem[key] = (jid, etime)
            self.node.mem.used += IDEM_OVERHEAD + len(key)
            heapq.heappush(self._idem_heap, (etime, key))

    def forget(self, key: bytes) -> None:
        e = self.idem.pop(key, None)
        if e is None:
            return
        if self.of.get(e[0]) == key:
            del self.of[e[0]]
        self.node.mem.used -= IDEM_OVERHEAD + len(key)

    def job_gone(self, job: Job) -> None:
        """``job`` leaves the node: its key stays until the job's lifetime ends, unless
        the job was never confirmed to its producer (still waiting for its copies)."""
        key = self.of.pop(job.id, None)
        if key is not None:
            if job.state == WAIT_REPL:
                self.forget(key)
            else:
                heapq.heappush(self._idem_heap, (job.etime, key))

    def retained(self, now: int) -> list[tuple[bytes, bytes, int]]:
        """(key, job id, expiry ms) of the keys whose job is gone but whose window is
        still open for more than a second: what an AOF rewrite must keep."""
        return [(key, jid, etime) for key, (jid, etime) in self.idem.items()
                if jid not in self.of and etime > now + 1000]

    # --- delivery tokens ------------------------------------------------------------
    def token_get(self, token: bytes, now: int) -> tuple[bytes, ...] | None:
        """The job IDs a GETJOB TOKEN delivered, or None for a new (or expired) token."""
        e = self.tokens.get(token)
        if e is None or e[0] <= now:
            return None
        return e[1]

    def token_record(self, token: bytes, ids: tuple[bytes, ...], now: int) -> None:
        node = self.node
        old = self.tokens.get(token)
        if old is not None:
            node.mem.used -= 8 * len(old[1])
        else:
            node.mem.used += TOKEN_OVERHEAD + len(token)
        exp = now + node.config.delivery_token_ttl * 1000
        self.tokens[token] = (exp, ids)
        node.mem.used += 8 * len(ids)
        heapq.heappush(self._token_heap, (exp, token))

    # --- time -----------------------------------------------------------------------
    def pending(self) -> bool:
        return bool(self._idem_heap or self._token_heap)

    def expire(self, now: int) -> None:
        h = self._idem_heap
        while h and h[0][0] <= now:
            _, key = heapq.heappop(h)
            e = self.idem.get(key)
            if e is not None and e[1] <= now and e[0] not in self.of:
                self.forget(key)
        h = self._token_heap
        while h and h[0][0] <= now:
            exp, token = heapq.heappop(h)
            t = self.tokens.get(token)
            if t is not None and t[0] == exp:
                del self.tokens[token]
                self.node.mem.used -= TOKEN_OVERHEAD + len(token) + 8 * len(t[1])

    def clear(self) -> None:
        self.idem.clear()
        self.of.clear()
        self._idem_heap.clear()
        self.tokens.clear()
        self._token_heap.clear()
