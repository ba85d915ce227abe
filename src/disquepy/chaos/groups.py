"""Consumer groups under real faults: a QADD/QGET/QACK workload and its checker.

With ``--groups N`` a fault run also runs, beside the job workload:

producers
    QADD (never NOBLOCK) unique contents (``<seed>:e<producer>:<n>``) with an expiry of
    an hour (far longer than the run) to a random node, recording the send and reply
    times and the event ID.
consumers
    two per group (``cg0`` .. ``cg<N-1>``), each QGET-ting on a random node with a lease
    of 1 to 3 s, then QACK (on the delivering node or another), or nothing (a consumer
    that died: the lease runs out and the event is redone). Every choice comes from a
    per-client RNG drawn from the seed. Each delivery is recorded with the times the
    lease was surely held (from the QGET reply until its EX ran out, counted from the
    QGET's send, or the QACK was sent, whichever is first).

After the heal every consumer acknowledges what it gets (the final drain) until every
group has had every event that got an ID, or nothing new arrived for ``STABLE_S``.
The checker (:func:`check_groups`) then states the properties of docs/GROUPS.md on
real processes:

lost
    an event whose QADD returned its ID delivered to no group. The nodes run with
    ``appendonly yes`` and ``appendfsync always`` (cluster.py): events are on disk
    and no kill excuses a loss. (A checker for nodes without AOF passes
    ``durable=False``: a loss is then excused when R distinct nodes were killed from
    its QADD to the end of the run, R = min(3, nodes).)
group_missed
    the same for one group while others got the event (every group that keeps
    consuming gets every unexpired event).
unexpected
    a delivery of contents no producer sent, or under another ID than its QADD gave.
double_lease_healthy
    two leases of one event in one group surely held at the same time, both granted
    after the cluster re-formed at the heal (or in a run without faults). Under faults
    the same is counted (``double_leases_faults``), not failed.

Counted as well: deliveries to a group after that group's QACK got 1 (``after_ack``),
events excused by R kills, QADD errors and no replies, acks answered 0.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass, field

from .checker import ADD_ERROR, ADD_OK, ADD_UNKNOWN, Example
from .resp import ConnLost, Pool, ReplyError
from .workload import Clients, recorded_add

log = logging.getLogger("disquepy.chaos.groups")

GQUEUES = (b"gq0", b"gq1")
SABOTAGE_QUEUE = b"gqx"
EXPIRE_S = 3600
EX_RANGE = (1.0, 3.0)  # QGET lease seconds
DROP_P = 0.12  # a consumer that takes the event and never acks
CALL_TIMEOUT_S = 8.0
ACK_TRIES = 3
STABLE_S = 8.0  # a drain with nothing new for this long is over (leases are <= 3 s)
MARGIN_S = 0.05  # server time read before a request is handled vs our send time
GROUP_VIOLATIONS = ("lost", "group_missed", "unexpected", "double_lease_healthy")
EXAMPLES = 5


def group_names(n: int) -> list[bytes]:
    return [f"cg{i}".encode() for i in range(n)]


@dataclass(slots=True)
class EventAdd:
    contents: bytes
    queue: bytes
    node: int
    t_sent: float
    outcome: str = ""
    eid: bytes | None = None
    error: str = ""


@dataclass(slots=True)
class Lease:
    eid: bytes
    contents: bytes
    group: bytes
    consumer: str
    node: int
    t_sent: float  # QGET sent
    t_reply: float  # QGET reply received: held from here
    ex: float
    t_ack: float | None = None  # QACK sent: not held after this
    ack: int | None = None  # the QACK's reply (1 / 0), None: none sent or no reply

    @property
    def held_until(self) -> float:
        end = self.t_sent + self.ex - MARGIN_S
        return end if self.t_ack is None else min(end, self.t_ack)


@dataclass(slots=True)
class GroupHistory:
    adds: dict[bytes, EventAdd] = field(default_factory=dict)  # contents -> EventAdd
    leases: list[Lease] = field(default_factory=list)
    qget_calls: int = 0
    acks_one: int = 0
    acks_zero: int = 0

    def add_sent(self, contents: bytes, queue: bytes, node: int, t: float) -> EventAdd:
        rec = EventAdd(contents, queue, node, t)
        self.adds[contents] = rec
        return rec

    def coverage(self, groups: list[bytes]) -> tuple[int, int]:
        """(group-event pairs delivered, pairs wanted) over the events with an ID."""
        want = {r.eid for r in self.adds.values() if r.outcome == ADD_OK}
        got = {(ls.group, ls.eid) for ls in self.leases if ls.eid in want}
        return len(got), len(want) * len(groups)


class GroupWorkload(Clients[GroupHistory]):
    """The group clients of one run, recording into ``history`` (stop and error
    counting as the job workload's)."""

    def __init__(self, seed: int, ports: list[int], groups: int, producers: int = 2,
                 consumers_per_group: int = 2, think_s: float = 0.03) -> None:
        super().__init__(seed, ports, GroupHistory(), producers, think_s)
        self.groups = group_names(groups)
        self.per_group = consumers_per_group
        self.queues: tuple[bytes, ...] = GQUEUES

    def start(self) -> None:
        for k in range(self.n_producers):
            self.tasks.append(asyncio.create_task(self._producer(k)))
        for g in self.groups:
            for k in range(self.per_group):
                self.tasks.append(asyncio.create_task(self._consumer(g, k)))

    async def drain(self, limit_s: float) -> bool:
        """Consumers ack everything; True once every group had every event with an ID,
        False when nothing new came for STABLE_S or ``limit_s`` ran out."""
        self.draining = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit_s
        last, since = -1, loop.time()
        while loop.time() < deadline:
            got, want = self.history.coverage(self.groups)
            if got >= want:
                return True
            if got != last:
                last, since = got, loop.time()
            elif loop.time() - since >= STABLE_S:
                return False
            await asyncio.sleep(0.25)
        return False

    async def _producer(self, k: int) -> None:
        rng = random.Random(f"{self.seed}:gproducer:{k}")
        loop = asyncio.get_running_loop()
        pool = Pool()
        n = 0
        try:
            while self.producing:
                node = rng.randrange(len(self.ports))
                queue = rng.choice(GQUEUES)
                think = rng.expovariate(1 / self.think_s)
                contents = f"{self.seed}:e{k}:{n}".encode()
                n += 1
                rec = self.history.add_sent(contents, queue, node, loop.time())
                rec.eid = await recorded_add(pool, self.ports[node], rec, self._err,
                                             "QADD", queue, EXPIRE_S, contents)
                await asyncio.sleep(think)
        finally:
            pool.close()

    async def _consumer(self, group: bytes, k: int) -> None:
        name = f"{group.decode()}/{k}"
        rng = random.Random(f"{self.seed}:gconsumer:{name}")
        loop = asyncio.get_running_loop()
        pool = Pool()
        hist = self.history
        try:
            while self.consuming:
                node = rng.randrange(len(self.ports))
                queue = rng.choice(self.queues if self.draining else GQUEUES)
                ex = round(rng.uniform(*EX_RANGE), 2)
                drop = rng.random() < DROP_P
                ack_node = node if rng.random() < 0.5 else rng.randrange(len(self.ports))
                t_sent = loop.time()
                hist.qget_calls += 1
                try:
                    got = await pool.call(self.ports[node], "QGET", queue, group, "EX", f"{ex:g}",
                                          timeout=CALL_TIMEOUT_S)
                except ReplyError as e:
                    self._err("QGET " + str(e).split(" ", 1)[0])
                    await asyncio.sleep(0.05)
                    continue
                except ConnLost:
                    self._err("QGET no reply")
                    await asyncio.sleep(0.05)
                    continue
                if got is None:
                    await asyncio.sleep(0.05)
                    continue
                lease = Lease(got[0], got[1], group, name, node, t_sent, loop.time(), ex)
                hist.leases.append(lease)
                if drop and not self.draining:
                    continue
                await self._ack(pool, queue, lease, ack_node)
        finally:
            pool.close()

    async def _ack(self, pool: Pool, queue: bytes, lease: Lease, node: int) -> None:
        loop = asyncio.get_running_loop()
        for attempt in range(ACK_TRIES):
            port = self.ports[(node + attempt) % len(self.ports)]
            if lease.t_ack is None:
                lease.t_ack = loop.time()
            try:
                r = await pool.call(port, "QACK", queue, lease.group, lease.eid,
                                    timeout=CALL_TIMEOUT_S)
            except ReplyError as e:
                self._err("QACK " + str(e).split(" ", 1)[0])
                return
            except ConnLost:
                self._err("QACK no reply")
                await asyncio.sleep(0.1)
                continue
            lease.ack = int(r)
            if r:
                self.history.acks_one += 1
            else:
                self.history.acks_zero += 1
            return


@dataclass(slots=True)
class GroupReport:
    counts: dict[str, int]
    examples: dict[str, list[Example]]

    @property
    def violations(self) -> dict[str, int]:
        return {k: self.counts[k] for k in GROUP_VIOLATIONS if self.counts.get(k)}

    @property
    def ok(self) -> bool:
        return not self.violations


def check_groups(h: GroupHistory, groups: list[bytes], repl: int,
                 kills: list[tuple[float, int]], healthy_from: float,
                 durable: bool = False) -> GroupReport:
    """The verdict on ``h``: ``kills`` is [(time, node)] of every kill -9, ``repl`` the
    replication level R, ``healthy_from`` the time from which the network stayed
    healthy (leases both granted after it must never overlap); ``durable``: the nodes
    keep their events on disk (AOF), so kills excuse no loss."""
    ex: dict[str, list[Example]] = {k: [] for k in (*GROUP_VIOLATIONS, "double_leases_faults")}

    def note(kind: str, what: Example) -> None:
        if len(ex[kind]) < EXAMPLES:
            ex[kind].append(what)

    def excused(rec: EventAdd) -> bool:
        return not durable and len({node for t, node in kills if t >= rec.t_sent}) >= repl

    by_eid: dict[bytes, dict[bytes, list[Lease]]] = {}  # eid -> {group: [leases]}
    unexpected = 0
    for ls in h.leases:
        rec = h.adds.get(ls.contents)
        if rec is None or (rec.eid is not None and rec.eid != ls.eid):
            unexpected += 1
            note("unexpected", (ls.contents, ls.eid, ls.group))
            continue
        by_eid.setdefault(ls.eid, {}).setdefault(ls.group, []).append(ls)
    lost = lost_excused = missed = missed_excused = 0
    ok_events = [r for r in h.adds.values() if r.outcome == ADD_OK]
    for rec in ok_events:
        # an event with an ID has an eid (recorded_add's reply, sabotage's QADD)
        per_group = by_eid.get(rec.eid, {}) if rec.eid is not None else {}
        absent = [g for g in groups if g not in per_group]
        if not absent:
            continue
        if len(absent) == len(groups):
            if excused(rec):
                lost_excused += 1
            else:
                lost += 1
                note("lost", (rec.contents, rec.eid, f"QADD on node {rec.node}"))
        elif excused(rec):
            missed_excused += len(absent)
        else:
            missed += len(absent)
            note("group_missed", (rec.contents, rec.eid, absent))
    double_healthy = double_faults = after_ack = redeliveries = 0
    for eid, per_group in by_eid.items():
        for g, leases in per_group.items():
            leases.sort(key=lambda ls: ls.t_reply)
            redeliveries += len(leases) - 1
            acked_at = None
            for i, a in enumerate(leases):
                if acked_at is not None and a.t_sent > acked_at:
                    after_ack += 1
                if a.ack == 1 and acked_at is None:
                    acked_at = a.t_ack
                for b in leases[i + 1:]:
                    if b.t_reply >= a.held_until:
                        break  # sorted by t_reply: no later one overlaps a either
                    if a.t_reply < b.held_until:
                        if a.t_sent >= healthy_from and b.t_sent >= healthy_from:
                            double_healthy += 1
                            note("double_lease_healthy", (eid, g, a.consumer, b.consumer))
                        else:
                            double_faults += 1
                            note("double_leases_faults", (eid, g, a.consumer, b.consumer))
    adds = h.adds.values()
    counts = {
        "events_sent": len(h.adds),
        "events_added": len(ok_events),
        "qadd_errors": sum(1 for r in adds if r.outcome == ADD_ERROR),
        "qadd_unknown": sum(1 for r in adds if r.outcome == ADD_UNKNOWN),
        "groups": len(groups),
        "qget_calls": h.qget_calls,
        "deliveries": len(h.leases),
        "redeliveries": redeliveries,
        "acks_one": h.acks_one,
        "acks_zero": h.acks_zero,
        "after_ack": after_ack,
        "double_leases_faults": double_faults,
        "events_after_r_kills": sum(1 for r in ok_events if excused(r)),
        "lost_excused": lost_excused,
        "group_missed_excused": missed_excused,
        "lost": lost,
        "group_missed": missed,
        "unexpected": unexpected,
        "double_lease_healthy": double_healthy,
    }
    return GroupReport(counts, {k: v for k, v in ex.items() if v})
