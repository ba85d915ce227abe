"""Seeded clients: producers and consumers attached to nodes, one command at a time.

Each agent has a home node and a connection per node (per node incarnation), and
issues one command at a time, as a client on one connection does: ADDJOB (unique
bodies, REPLICATE 1..min(N, cap), RETRY 0 with REPLICATE 1 or RETRY 1..5, DELAY, short
or long TTL, sometimes ASYNC), GETJOB (NOHANG, or blocking with a TIMEOUT; COUNT,
WITHCOUNTERS, several queues), and for every job it receives, after a processing
time: ACKJOB or FASTACK (on the delivering node or another one), NACK, WORKING then
ack, or nothing at all (the consumer "crashed": the job must come back after its
RETRY). Sometimes a queue is PAUSEd and un-paused later.

When the faulty phase ends, producers stop and consumers only fetch and ack, so the
cluster can drain. All randomness comes from the workload RNG, in event order.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .history import History, JobRecord
from .replies import ErrorReply, Reply, ReplyShapeError, array, bulk, decode

if TYPE_CHECKING:
    from ..core.client import Client
    from ..core.node import Node
    from .config import SimConfig
    from .world import World

INF = float("inf")
MEAN_THINK_MS = 150
MEAN_PROCESS_MS = 500

# what a consumer does with a job it got: (plan, cumulative probability)
PLANS = (("ack", 0.60), ("fastack", 0.72), ("nack", 0.80), ("working", 0.87), ("drop", 1.0))


def pick_node(nodes: Sequence[Node | None], rng: random.Random, prefer: int) -> int | None:
    """``prefer`` if it is up, else a random node that is up (None: all down)."""
    if nodes[prefer] is not None:
        return prefer
    alive = [i for i, n in enumerate(nodes) if n is not None]
    return rng.choice(alive) if alive else None


class Held:
    """A delivered job a consumer is processing."""

    __slots__ = ("rec", "jid", "node", "due", "plan")

    def __init__(self, rec: JobRecord, jid: bytes, node: int, due: int, plan: str) -> None:
        self.rec = rec
        self.jid = jid
        self.node = node
        self.due = due
        self.plan = plan


class Pending:
    """The command an agent waits a reply for, and when the reply is due at the latest
    (the command's own timeout: GETJOB TIMEOUT, ADDJOB ms-timeout; 0 for the others)."""

    __slots__ = ("kind", "node", "sent_at", "rec", "held", "due")

    def __init__(
        self,
        kind: str,
        node: int,
        sent_at: int,
        rec: JobRecord | None = None,
        held: Held | None = None,
        timeout: int = 0,
    ) -> None:
        self.kind = kind
        self.node = node
        self.sent_at = sent_at
        self.rec = rec
        self.held = held
        self.due = sent_at + timeout


class Agent:
    __slots__ = ("idx", "home", "conns", "pending", "next_at", "held", "p_add", "seq", "unpause")

    def __init__(self, idx: int, home: int, p_add: float) -> None:
        self.idx = idx
        self.home = home
        self.conns: dict[int, tuple[int, Client]] = {}  # node -> (incarnation, core Client)
        self.pending: Pending | None = None
        self.next_at: float = INF
        self.held: list[Held] = []
        self.p_add = p_add
        self.seq = 0
        self.unpause: list[tuple[int, bytes]] = []  # (time, queue) a PAUSE of ours to lift

    def on_reply(self, world: World, node: int, data: bytes) -> None:  # the Client's conn hook
        world.workload.reply(self, node, data)

    def __repr__(self) -> str:
        return f"<Agent {self.idx} home={self.home}>"


class Workload:
    __slots__ = ("world", "cfg", "rng", "agents", "queues", "ops", "history", "quiescing", "errors")

    def __init__(self, world: World, cfg: SimConfig, rng: random.Random) -> None:
        self.world = world
        self.cfg = cfg
        self.rng = rng
        self.history = History()
        self.queues = [b"q%d" % i for i in range(cfg.queues)]
        self.agents = [
            Agent(k, k % cfg.nodes, rng.uniform(0.25, 0.6))
            for k in range(cfg.nodes * cfg.agents_per_node)
        ]
        self.ops = 0
        self.quiescing = False
        self.errors: dict[str, int] = {}  # error replies to commands other than ADDJOB

    # ------------------------------------------------------------- schedule
    def start(self, now: int) -> None:
        for a in self.agents:
            a.next_at = now + int(self.rng.expovariate(1 / MEAN_THINK_MS))

    def next_agent(self) -> tuple[float, Agent | None]:
        best = None
        t = INF
        for a in self.agents:
            if a.next_at < t:
                t = a.next_at
                best = a
        return t, best

    def _think(self, a: Agent, mean: float = MEAN_THINK_MS) -> None:
        now = self.world.now
        t = now + 1 + int(self.rng.expovariate(1 / mean))
        for h in a.held:
            if h.due < t:
                t = h.due if h.due > now else now
        a.next_at = t

    def quiesce(self) -> None:
        """Faults are over: stop producing, ack everything that comes."""
        self.quiescing = True
        now = self.world.now
        for a in self.agents:
            a.unpause.clear()
            for h in a.held:
                h.plan = "ack" if self.rng.random() < 0.8 else "fastack"
                h.due = now + self.rng.randint(1, 50)
            if a.pending is None:
                self._think(a, 20)

    def idle(self) -> bool:
        return all(not a.held for a in self.agents)

    # --------------------------------------------------------------- acting
    def _pick(self, prefer: int) -> int | None:
        return pick_node(self.world.nodes, self.rng, prefer)

    def _send(self, a: Agent, node: int, argv: list[bytes], pending: Pending) -> bool:
        a.pending = pending
        a.next_at = INF
        if not self.world.execute(a, node, argv):
            a.pending = None
            return False
        return True

    def act(self, a: Agent) -> None:
        world = self.world
        now = world.now
        a.next_at = INF
        if a.held:
            h = min(a.held, key=lambda x: x.due)
            if h.due <= now:
                self._finish(a, h)
                return
        if self.quiescing:
            self._getjob(a, quiesce=True)
            return
        if self.ops >= self.cfg.steps:
            world.stop_flag = True
            self._think(a)
            return
        self.ops += 1
        rng = self.rng
        if a.unpause and a.unpause[0][0] <= now:
            _, q = a.unpause.pop(0)
            node = self._pick(rng.randrange(self.cfg.nodes))
            if node is None or not self._send(
                a, node, [b"PAUSE", q, b"none", b"BCAST"], Pending("pause", node, now)
            ):
                self._think(a)
            return
        r = rng.random()
        if r < 0.004:
            self._pause(a)
        elif r < a.p_add:
            self._addjob(a)
        else:
            self._getjob(a)

    def _pause(self, a: Agent) -> None:
        rng = self.rng
        q = rng.choice(self.queues)
        how = rng.choice((b"in", b"out", b"all"))
        node = self._pick(rng.randrange(self.cfg.nodes))
        if node is None or not self._send(
            a, node, [b"PAUSE", q, how, b"BCAST"], Pending("pause", node, self.world.now)
        ):
            self._think(a)
            return
        a.unpause.append((self.world.now + rng.randint(300, 4000), q))
        a.unpause.sort()

    def _addjob(self, a: Agent) -> None:
        rng = self.rng
        cfg = self.cfg
        now = self.world.now
        node = self._pick(a.home if rng.random() < 0.7 else rng.randrange(cfg.nodes))
        if node is None:
            self._think(a)
            return
        repl = rng.randint(1, max(1, min(cfg.nodes, cfg.max_replicate)))
        retry = 0 if repl == 1 and rng.random() < 0.25 else rng.randint(1, 5)
        ttl = rng.randint(8, 40) if rng.random() < 0.15 else 3600
        delay = rng.randint(1, 3) if rng.random() < 0.15 else 0
        is_async = repl > 1 and rng.random() < 0.1
        timeout = rng.randint(500, 5000)
        q = rng.choice(self.queues)
        a.seq += 1
        body = b"j%d.%d.%d" % (cfg.seed, a.idx, a.seq)
        argv = [
            b"ADDJOB",
            q,
            body,
            b"%d" % timeout,
            b"REPLICATE",
            b"%d" % repl,
            b"RETRY",
            b"%d" % retry,
            b"TTL",
            b"%d" % ttl,
        ]
        if delay:
            argv += [b"DELAY", b"%d" % delay]
        if is_async:
            argv.append(b"ASYNC")
        rec = JobRecord(body, q, repl, retry, delay, ttl, is_async, a.idx, node, now)
        self.history.sent(rec)
        pending = Pending("add", node, now, rec=rec, timeout=0 if is_async else timeout)
        if not self._send(a, node, argv, pending):
            self._think(a)

    def _getjob(self, a: Agent, quiesce: bool = False) -> None:
        rng = self.rng
        cfg = self.cfg
        node = self._pick(a.home if rng.random() < 0.6 else rng.randrange(cfg.nodes))
        if node is None:
            self._think(a)
            return
        qs = list(self.queues)
        rng.shuffle(qs)
        timeout = 0
        if quiesce:
            timeout = 500
            argv = [b"GETJOB", b"TIMEOUT", b"500", b"COUNT", b"10", b"FROM", *qs]
        else:
            argv = [b"GETJOB"]
            if rng.random() < 0.3:
                argv.append(b"NOHANG")
            else:
                timeout = rng.randint(100, 2000)
                argv += [b"TIMEOUT", b"%d" % timeout]
            if rng.random() < 0.5:
                argv.append(b"WITHCOUNTERS")
            argv += [
                b"COUNT",
                b"%d" % rng.choice((1, 1, 1, 2, 5)),
                b"FROM",
                *qs[: rng.randint(1, len(qs))],
            ]
        if not self._send(a, node, argv, Pending("get", node, self.world.now, timeout=timeout)):
            self._think(a)

    def _finish(self, a: Agent, h: Held) -> None:
        """The consumer is done processing a job: act on its plan."""
        rng = self.rng
        now = self.world.now
        if h.plan == "drop":
            a.held.remove(h)
            self.history.released(h.rec)
            self._think(a)
            return
        plan = h.plan
        if h.rec.retry == 0:
            # an at-most-once job has one copy: ack it where it was delivered (a dummy
            # ack elsewhere is not kept for such jobs), or FASTACK (broadcast) if gone
            node = h.node if self.world.nodes[h.node] is not None else None
            if node is None:
                node = self._pick(rng.randrange(self.cfg.nodes))
                if plan == "ack":
                    plan = "fastack"
        else:
            node = self._pick(h.node if rng.random() < 0.6 else rng.randrange(self.cfg.nodes))
        if node is None:
            h.due = now + 100
            self._think(a)
            return
        cmd = {"ack": b"ACKJOB", "fastack": b"FASTACK", "nack": b"NACK", "working": b"WORKING"}[
            plan
        ]
        if not self._send(a, node, [cmd, h.jid], Pending(plan, node, now, held=h)):
            h.due = now + 50
            self._think(a)

    # -------------------------------------------------------------- replies
    def reply(self, a: Agent, node: int, data: bytes) -> None:
        p = a.pending
        world = self.world
        if p is None or p.node != node:
            world.checker.fail(
                "protocol",
                f"agent {a.idx} got a reply it did not wait for from node {node}: {data[:80]!r}",
            )
            return
        a.pending = None
        try:
            value = decode(data)
        except ValueError as e:
            world.checker.fail("protocol", f"undecodable reply from node {node}: {e}")
            self._think(a)
            return
        try:
            getattr(self, "_on_" + p.kind)(a, p, value)
        except ReplyShapeError as e:
            world.checker.fail("protocol", f"odd {p.kind} reply from node {node}: {e}")
        if a.pending is None and a.next_at == INF:
            self._think(a, 20 if self.quiescing else MEAN_THINK_MS)

    def overdue(self, slack: int) -> list[Agent]:
        """Agents whose pending command is past its timeout by more than ``slack`` ms."""
        now = self.world.now
        return [a for a in self.agents if a.pending is not None and now > a.pending.due + slack]

    def connection_lost(self, a: Agent) -> None:
        """The node of the pending command crashed: no reply will ever come."""
        p = a.pending
        a.pending = None
        if p is not None and p.held is not None:
            p.held.due = self.world.now + 50  # try again elsewhere
        self._think(a)

    def _error(self, kind: str, value: Reply) -> None:
        key = f"{kind}: {str(value).split(' ', 1)[0]}"
        self.errors[key] = self.errors.get(key, 0) + 1

    def _on_add(self, a: Agent, p: Pending, value: Reply) -> None:
        world = self.world
        rec = p.rec
        assert rec is not None  # an ADDJOB's Pending has its record
        if isinstance(value, ErrorReply):
            self.history.add_failed(rec, str(value))
        elif isinstance(value, bytes) and value.startswith(b"D-"):
            self.history.added(rec, value, world.now)
            world.checker.on_added(rec, value, p.node)
        else:
            world.checker.fail("protocol", f"odd ADDJOB reply {value!r}")

    def _on_get(self, a: Agent, p: Pending, value: Reply) -> None:
        if value is None:
            return
        world = self.world
        if isinstance(value, ErrorReply):
            self._error("GETJOB", value)
            return
        now = world.now
        rng = self.rng
        for reply_item in array(value):
            item = array(reply_item)
            jid, body = bulk(item[1]), bulk(item[2])
            counters = (item[4], item[6]) if len(item) == 7 else None
            rec = self.history.by_body.get(body)
            if not world.checker.on_delivery(rec, jid, body, p.node, a.idx, counters) or rec is None:
                continue
            if self.quiescing:
                plan = "ack" if rng.random() < 0.8 else "fastack"
                due = now + rng.randint(1, 50)
            else:
                r = rng.random()
                plan = next(name for name, cum in PLANS if r < cum)
                due = now + min(6000, 1 + int(rng.expovariate(1 / MEAN_PROCESS_MS)))
            a.held.append(Held(rec, jid, p.node, due, plan))

    def _acked(self, a: Agent, p: Pending, value: Reply) -> None:
        h = p.held
        assert h is not None  # an ack's, NACK's or WORKING's Pending has its job
        if h in a.held:
            a.held.remove(h)
        if isinstance(value, ErrorReply):
            self._error(p.kind, value)
            self.history.released(h.rec)
        else:
            self.history.acked(h.rec, self.world.now)

    _on_ack = _acked
    _on_fastack = _acked

    def _on_nack(self, a: Agent, p: Pending, value: Reply) -> None:
        h = p.held
        assert h is not None  # an ack's, NACK's or WORKING's Pending has its job
        if h in a.held:
            a.held.remove(h)
        if isinstance(value, ErrorReply):
            self._error("NACK", value)
        self.history.released(h.rec)

    def _on_working(self, a: Agent, p: Pending, value: Reply) -> None:
        h = p.held
        assert h is not None  # an ack's, NACK's or WORKING's Pending has its job
        if isinstance(value, ErrorReply):
            self._error("WORKING", value)
        h.plan = "ack" if self.rng.random() < 0.8 else "fastack"
        h.due = self.world.now + 1 + int(self.rng.expovariate(1 / MEAN_PROCESS_MS))

    def _on_pause(self, a: Agent, p: Pending, value: Reply) -> None:
        if isinstance(value, ErrorReply):
            self._error("PAUSE", value)
