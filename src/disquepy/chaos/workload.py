"""Producers and consumers talking to the nodes' client ports directly.

Producers ADDJOB unique bodies (``<seed>:<producer>:<n>``) to a random node:
REPLICATE 1..3 with RETRY 2..5 s (at least once), or RETRY 0 with REPLICATE 1 (at
most once, as Disque requires), TTL an hour, a synchronous replication timeout.
Consumers GETJOB (blocking briefly, up to 4 jobs, every queue) on a random node and
for each job: ACKJOB (on the delivering node or another one; RETRY 0 jobs on the
delivering node, their only copy), FASTACK, NACK, or
nothing (a consumer that dies: the job must come back after its RETRY). Every choice
comes from a per-client RNG seeded from the run's seed, drawn before the call.

In the drain (``draining``) consumers acknowledge everything they get.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from ..core.ids import id_is_at_most_once
from .checker import ADD_ERROR, ADD_OK, ADD_UNKNOWN, History
from .resp import Arg, ConnLost, Pool, Reply, ReplyError

log = logging.getLogger("disquepy.chaos.workload")

QUEUES = (b"cq0", b"cq1", b"cq2")
ADD_TIMEOUT_MS = 4000  # ADDJOB's replication timeout
CALL_TIMEOUT_S = 8.0  # a reply later than this counts as no reply
TTL_S = 3600
RETRY0_P = 0.15
MAX_RETRY_S = 5
ACK_TRIES = 4
# consumer plans: (name, cumulative probability)
PLANS = (("ack", 0.78), ("fastack", 0.86), ("nack", 0.92), ("drop", 1.0))


class Recorded(Protocol):
    """The record of one add (``checker.AddRecord``, ``groups.EventAdd``)."""

    outcome: str
    error: str


async def recorded_add(pool: Pool, port: int, rec: Recorded, err: Callable[[str], None],
                       command: str, *args: Arg) -> Reply:
    """Send an ADDJOB / QADD, setting ``rec``'s outcome and error; the reply, or None
    (an error, or no reply: then the add may or may not have happened)."""
    try:
        reply = await pool.call(port, command, *args, timeout=CALL_TIMEOUT_S)
    except ReplyError as e:
        rec.outcome, rec.error = ADD_ERROR, str(e)[:80]
        err(f"{command} " + str(e).split(" ", 1)[0])
        return None
    except ConnLost as e:
        # refused (node down): surely not added; otherwise we cannot know
        rec.outcome, rec.error = ADD_UNKNOWN, str(e)[:80]
        err(f"{command} no reply")
        await asyncio.sleep(0.05)
        return None
    rec.outcome = ADD_OK
    return reply


H = TypeVar("H")


class Clients(Generic[H]):
    """Clients of one run, recording into ``history`` (of type H): what the job
    workload and the groups' (``groups.GroupWorkload``) share."""

    def __init__(self, seed: int, ports: list[int], history: H, producers: int,
                 think_s: float) -> None:
        self.seed = seed
        self.ports = ports
        self.history = history
        self.n_producers = producers
        self.think_s = think_s
        self.producing = True
        self.consuming = True
        self.draining = False
        self.errors: dict[str, int] = {}
        self.tasks: list[asyncio.Task[None]] = []

    async def stop(self) -> None:
        self.producing = self.consuming = False
        done, pending = await asyncio.wait(self.tasks, timeout=CALL_TIMEOUT_S + 2)
        for t in pending:
            t.cancel()
        for t in done:
            exc = None if t.cancelled() else t.exception()
            if exc is not None:
                raise exc

    def _err(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


class Workload(Clients[History]):
    """The job clients of one run, recording into ``history``."""

    def __init__(self, seed: int, ports: list[int], producers: int = 3, consumers: int = 4,
                 think_s: float = 0.02) -> None:
        super().__init__(seed, ports, History(), producers, think_s)
        self.n_consumers = consumers

    def start(self) -> None:
        for k in range(self.n_producers):
            self.tasks.append(asyncio.create_task(self._producer(k)))
        for k in range(self.n_consumers):
            self.tasks.append(asyncio.create_task(self._consumer(k)))

    # --------------------------------------------------------------- producers
    async def _producer(self, k: int) -> None:
        rng = random.Random(f"{self.seed}:producer:{k}")
        pool = Pool()
        n = 0
        hist = self.history
        try:
            while self.producing:
                node = rng.randrange(len(self.ports))
                queue = rng.choice(QUEUES)
                amo = rng.random() < RETRY0_P
                repl = 1 if amo else rng.randint(1, 3)
                retry = 0 if amo else rng.randint(2, MAX_RETRY_S)
                think = rng.expovariate(1 / self.think_s)
                body = f"{self.seed}:{k}:{n}".encode()
                n += 1
                rec = hist.add_sent(body, queue, repl, retry, node)
                rec.jid = await recorded_add(
                    pool, self.ports[node], rec, self._err, "ADDJOB", queue, body,
                    ADD_TIMEOUT_MS, "REPLICATE", repl, "RETRY", retry, "TTL", TTL_S)
                await asyncio.sleep(think)
        finally:
            pool.close()

    # --------------------------------------------------------------- consumers
    async def _consumer(self, k: int) -> None:
        rng = random.Random(f"{self.seed}:consumer:{k}")
        pool = Pool()
        hist = self.history
        try:
            while self.consuming:
                node = rng.randrange(len(self.ports))
                port = self.ports[node]
                try:
                    jobs = await pool.call(
                        port, "GETJOB", "TIMEOUT", 200, "COUNT", 4, "FROM", *QUEUES,
                        timeout=CALL_TIMEOUT_S,
                    )
                    hist.getjob_calls += 1
                except ReplyError as e:
                    self._err("GETJOB " + str(e).split(" ", 1)[0])
                    await asyncio.sleep(0.05)
                    continue
                except ConnLost:
                    self._err("GETJOB no reply")
                    await asyncio.sleep(0.05)
                    continue
                for _queue, jid, body in jobs or ():
                    hist.delivered(body, jid, node)
                for _queue, jid, body in jobs or ():
                    r = rng.random()
                    plan = next(name for name, p in PLANS if r < p)
                    other = rng.randrange(len(self.ports))
                    ack_node = node if rng.random() < 0.7 else other
                    if id_is_at_most_once(jid):
                        # its only copy is where it was delivered: an ACKJOB elsewhere
                        # is a no-op by design (no dummy ack for RETRY 0 jobs)
                        ack_node = node
                    if self.draining:
                        plan = "ack" if plan != "fastack" else plan
                    await self._finish(pool, plan, body, jid, ack_node)
        finally:
            pool.close()

    async def _finish(self, pool: Pool, plan: str, body: bytes, jid: bytes, node: int) -> None:
        hist = self.history
        if plan == "drop":
            hist.request_redelivery(body)
            return
        cmd = {"ack": "ACKJOB", "fastack": "FASTACK", "nack": "NACK"}[plan]
        if plan == "nack":
            hist.request_redelivery(body)
        # acks are idempotent: on no reply, try again (elsewhere after the first retry)
        for attempt in range(ACK_TRIES):
            port = self.ports[node if attempt < 2 else (node + attempt) % len(self.ports)]
            try:
                known = await pool.call(port, cmd, jid, timeout=CALL_TIMEOUT_S)
            except ReplyError:
                self._err(cmd + " error")
                break
            except ConnLost:
                self._err(cmd + " no reply")
                if plan != "nack":
                    hist.ack_maybe.add(jid)  # the lost attempt may have been applied
                await asyncio.sleep(0.1)
                continue
            if plan != "nack" and (known or not id_is_at_most_once(jid)):
                hist.ack_ok(jid)  # (a RETRY 0 job the node did not know stays unacked)
            return
        hist.ack_errors += 1
