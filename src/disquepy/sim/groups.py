"""The consumer-group workload and its checker (``--groups N``; docs/GROUPS.md).

Producers QADD events (unique contents; long or short expiry; sometimes NOBLOCK) to a
few event queues; each of N groups has consumers on several nodes that QGET (EX 0..4
s, WITHCOUNTERS), sometimes after a QNOTIFY, and for each event they get, after a
processing time: QACK (on the node that delivered it or another one), QWORKING then
QACK, or nothing (the consumer "crashed": the lease must run out and the event come
back). Half the events to ack are kept a while (up to 600 ms: the lease may run out
meanwhile) and acked with the others of their queue the consumer kept, in one QACK of
several IDs (sometimes one given twice, sometimes an unknown ID among them). At the
heal a late group starts consuming: it must get every unexpired event.

The checker judges what clients saw against the four properties of docs/GROUPS.md:

* durability and at-least-once: every event whose QADD returned an ID and that
  outlives the run is delivered to every group and acknowledged by every group,
  unless every node that held a copy lost it in a crash (events live in memory);
* at most one consumer of a group holds an event at a time, and an event acked by a
  group is not delivered to it again: failures in a run without faults, counted under
  faults (``double_leases``, ``after_ack``), as docs/GROUPS.md says they can happen;
* a delivered event is one a client added, under the ID its QADD returned, never
  after it expired (clock skew allowed for);
* groups never affect each other: each group is checked on its own;
* a QACK of several IDs answers how many leases it ended: never more than the
  distinct events it names that the client was given (an ID twice counts once, an
  unknown one not at all);
* IDs in order: a QADD returns an ID above every event its node held when the QADD
  was sent (the node's ID clock is raised by every event it sees);
* safe retries: a third of the QADDs carry IDEMPOTENT <contents>, and one that got an
  error or no reply is sent again to the same node (not restarted since): a retry
  answers the first try's event ID, never a second event (a body delivered under two
  IDs fails ``group-bad-delivery``, a retry's other ID ``group-idempotent``);
* memory accounting covers the events (the job checker's sweep counts them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.groups.leases import PULL_STEP_MS
from ..core.groups.model import DONE
from ..core.groups.replication import QADD_TIMEOUT_MS
from .config import split_rng
from .replies import ErrorReply, Reply, ReplyShapeError, array, bulk, decode
from .workload import pick_node

if TYPE_CHECKING:
    from ..core.client import Client
    from ..core.node import Node
    from .config import SimConfig
    from .world import World

INF = float("inf")
MEAN_THINK_MS = 200
MEAN_PROCESS_MS = 400
SLACK_MS = 1500  # a command must be answered within its own bound plus this
LATE_GROUP = b"late"


class GroupState:
    """What clients saw of one event in one group."""

    __slots__ = ("deliveries", "acked_at", "holder", "lease_until")

    def __init__(self) -> None:
        self.deliveries = 0
        self.acked_at: int | None = None
        self.holder: int | None = None  # the agent holding the lease
        self.lease_until = 0


class EventRecord:
    __slots__ = ("body", "queue", "expire_ms", "sent_at", "noblock", "eid", "promised", "lost_on",
                 "holders_at_reply", "groups", "floor", "keyed", "tries", "node", "inc")

    def __init__(self, body: bytes, queue: bytes, expire_ms: int, sent_at: int,
                 noblock: bool) -> None:
        self.body = body
        self.queue = queue
        self.expire_ms = expire_ms
        self.sent_at = sent_at
        self.noblock = noblock
        self.eid: bytes | None = None
        self.promised = False  # QADD replied with the ID: the properties apply
        self.lost_on: set[int] = set()  # nodes that lost their copy in a crash
        self.holders_at_reply = 0
        self.floor = b""  # the largest event ID its node held when the QADD was sent
        self.keyed = False  # QADD ... IDEMPOTENT <body>: retried after an error
        self.tries = 0
        self.node = -1  # where the first QADD went (retries go there too)
        self.inc = 0  # that node's incarnation then
        self.groups: dict[bytes, GroupState] = {}

    def __repr__(self) -> str:
        return (f"<Event {self.eid.decode() if self.eid else '-'} body={self.body.decode()} "
                f"q={self.queue.decode()} expire={self.expire_ms}ms"
                f"{' noblock' if self.noblock else ''}>")


class Held:
    __slots__ = ("rec", "eid", "node", "due", "plan", "group")

    def __init__(self, rec: EventRecord, eid: bytes, node: int, due: int, plan: str,
                 group: bytes) -> None:
        self.rec = rec
        self.eid = eid
        self.node = node
        self.due = due
        self.plan = plan
        self.group = group


class Pending:
    __slots__ = ("kind", "node", "sent_at", "due", "rec", "held", "lease", "queue", "batch")

    def __init__(self, kind: str, node: int, sent_at: int, bound: int,
                 rec: EventRecord | None = None, held: Held | None = None,
                 lease: int = 0, queue: bytes = b"", batch: list[Held] | None = None) -> None:
        self.kind = kind
        self.node = node
        self.sent_at = sent_at
        self.due = sent_at + bound
        self.rec = rec
        self.held = held
        self.lease = lease
        self.queue = queue
        self.batch = batch  # a QACK of several IDs: the events it acks


class GroupAgent:
    __slots__ = ("idx", "home", "group", "conns", "pending", "next_at", "held", "seq",
                 "notified", "sim", "retry", "batch")

    def __init__(self, sim: GroupSim, idx: int, home: int, group: bytes | None) -> None:
        self.sim = sim
        self.idx = idx
        self.home = home
        self.group = group  # None: a producer
        self.conns: dict[int, tuple[int, Client]] = {}  # node -> (incarnation, core Client)
        self.pending: Pending | None = None
        self.next_at: float = INF
        self.held: Held | None = None
        self.seq = 0
        self.notified: bytes | None = None  # the queue a QNOTIFY named
        self.retry: EventRecord | None = None  # a keyed QADD to send again
        self.batch: list[Held] = []  # events to ack in one QACK, each by its due time

    def on_reply(self, world: World, node: int, data: bytes) -> None:
        self.sim.reply(self, node, data)


class GroupSim:
    def __init__(self, world: World, cfg: SimConfig) -> None:
        self.world = world
        self.cfg = cfg
        self.rng = split_rng(cfg.seed, "groups")
        self.queues = [b"e%d" % i for i in range(2)]
        self.groups = [b"g%d" % i for i in range(cfg.groups)]
        n = cfg.nodes
        # indexes from 1000: the trace tells group agents from the job workload's
        self.agents: list[GroupAgent] = [GroupAgent(self, 1000 + k, k % n, None)
                                         for k in range(n)]
        for g in self.groups:
            for k in range(2):
                self.agents.append(GroupAgent(self, 1000 + len(self.agents),
                                              (k + len(self.agents)) % n, g))
        self.by_body: dict[bytes, EventRecord] = {}
        self.by_id: dict[bytes, EventRecord] = {}
        self.quiescing = False
        self.ops = 0
        self.errors: dict[str, int] = {}
        self.stats = {"events_added": 0, "events_noblock": 0, "event_add_errors": 0,
                      "event_deliveries": 0, "event_acks": 0, "double_leases": 0,
                      "after_ack": 0, "events_excused": 0, "events_lost": 0,
                      "event_copies_lost": 0, "acks_unconfirmed": 0, "ids_ordered": 0,
                      "idempotent_retries": 0, "multi_acks": 0}
        self.repl = min(3, n)

    # ------------------------------------------------------------ schedule
    def start(self, now: int) -> None:
        for a in self.agents:
            a.next_at = now + int(self.rng.expovariate(1 / MEAN_THINK_MS))

    def next_agent(self) -> tuple[float, GroupAgent | None]:
        best: GroupAgent | None = None
        t = INF
        for a in self.agents:
            if a.next_at < t:
                t, best = a.next_at, a
        return t, best

    def _think(self, a: GroupAgent, mean: float = MEAN_THINK_MS) -> None:
        now = self.world.now
        t = now + 1 + int(self.rng.expovariate(1 / mean))
        if a.held is not None and a.held.due < t:
            t = max(now, a.held.due)
        for h in a.batch:
            if h.due < t:
                t = max(now, h.due)
        a.next_at = t

    def quiesce(self) -> None:
        """Faults are over: producers stop, consumers ack what they get, and a group
        that never consumed starts."""
        self.quiescing = True
        now = self.world.now
        for a in self.agents:
            if a.group is None:
                a.next_at = INF
                continue
            if a.held is not None:
                a.held.plan = "ack"
                a.held.due = now + self.rng.randint(1, 50)
            for h in a.batch:
                h.due = now + self.rng.randint(1, 50)
            if a.pending is None:
                self._think(a, 20)
        for k in range(2):
            late = GroupAgent(self, 1000 + len(self.agents), k % self.cfg.nodes, LATE_GROUP)
            late.next_at = now + 1 + k
            self.agents.append(late)

    def idle(self) -> bool:
        """Every consumer is idle and every promised event done by every group."""
        if any(a.held is not None or a.batch for a in self.agents):
            return False
        if not self.quiescing:
            return True
        end = self.world.now
        for rec in self.by_id.values():
            if not rec.promised or rec.sent_at + rec.expire_ms <= end + self._tol():
                continue
            if self._excused(rec):
                continue
            for g in [*self.groups, LATE_GROUP]:
                if not self._done(rec, g):
                    return False
        return True

    def _done(self, rec: EventRecord, g: bytes) -> bool:
        """Group ``g`` got ``rec`` and is done with it: a client's QACK (or QGET EX 0)
        said so, or (the reply was lost) a live holder has it DONE for the group."""
        st = rec.groups.get(g)
        if st is None:
            return False
        if st.acked_at is not None:
            return True
        for n in self.world.nodes:
            e = n.groups.store.peek(rec.eid) if n is not None and rec.eid else None
            c = e.claims.get(g) if e is not None else None
            if c is not None and c & 3 == DONE:
                self.stats["acks_unconfirmed"] += 1
                return True
        return False

    def _tol(self) -> int:
        return self.world.skew_tolerance() + 1000

    # ------------------------------------------------------------- acting
    def _pick(self, prefer: int) -> int | None:
        return pick_node(self.world.nodes, self.rng, prefer)

    def _send(self, a: GroupAgent, node: int, argv: list[bytes], p: Pending) -> None:
        a.pending = p
        a.next_at = INF
        if not self.world.execute(a, node, argv):
            a.pending = None
            self._think(a)

    def act(self, a: GroupAgent) -> None:
        now = self.world.now
        a.next_at = INF
        rng = self.rng
        if a.held is not None and a.held.due <= now:
            self._finish(a, a.held)
            return
        if a.batch and min(h.due for h in a.batch) <= now:
            self._ack_batch(a)
            return
        if a.group is None:
            if a.retry is not None:
                self._qadd_again(a)
                return
            if self.quiescing or self.ops >= self.cfg.steps:
                return
            self.ops += 1
            self._qadd(a)
            return
        node = self._pick(a.home if rng.random() < 0.6 else rng.randrange(self.cfg.nodes))
        if node is None:
            self._think(a)
            return
        if a.held is not None:
            self._think(a)
            return
        q = a.notified or rng.choice(self.queues)
        a.notified = None
        if not self.quiescing and rng.random() < 0.25:
            timeout = rng.randint(100, 2000)
            argv = [b"QNOTIFY", a.group, b"%.3f" % (timeout / 1000), *self.queues]
            self._send(a, node, argv, Pending("notify", node, now, timeout))
            return
        lease = 0 if rng.random() < 0.05 else rng.randint(1000, 4000)
        argv = [b"QGET", q, a.group, b"EX", b"%.3f" % (lease / 1000), b"WITHCOUNTERS"]
        bound = PULL_STEP_MS * self.cfg.nodes
        self._send(a, node, argv, Pending("get", node, now, bound, lease=lease, queue=q))

    def _qadd(self, a: GroupAgent) -> None:
        rng = self.rng
        now = self.world.now
        node = self._pick(a.home if rng.random() < 0.7 else rng.randrange(self.cfg.nodes))
        if node is None:
            self._think(a)
            return
        a.seq += 1
        body = b"v%d.%d.%d" % (self.cfg.seed, a.idx, a.seq)
        expire = rng.randint(5000, 30_000) if rng.random() < 0.1 else 3_600_000
        noblock = rng.random() < 0.1
        q = rng.choice(self.queues)
        rec = EventRecord(body, q, expire, now, noblock)
        rec.keyed = rng.random() < 0.3
        rec.node, rec.inc = node, self.world.incarnation[node]
        self.by_body[body] = rec
        self._send_add(a, rec, node)

    def _send_add(self, a: GroupAgent, rec: EventRecord, node: int) -> None:
        n = self.world.nodes[node]
        assert n is not None  # (a live node: _pick's, or checked by _qadd_again)
        rec.floor = n.groups.store.max_id()
        argv = [b"QADD", rec.queue, b"%.3f" % (rec.expire_ms / 1000), rec.body]
        if rec.noblock:
            argv.append(b"NOBLOCK")
        if rec.keyed:
            argv += [b"IDEMPOTENT", rec.body]
        self._send(a, node, argv, Pending("add", node, self.world.now, QADD_TIMEOUT_MS,
                                          rec=rec))

    def _maybe_retry(self, a: GroupAgent, rec: EventRecord | None) -> None:
        """A keyed QADD that got an error or no reply: sent again (up to 3 times) to
        the same node, unless it restarted since (a crash may lose what it had not
        synced; docs/GROUPS.md: retry on the node that added it)."""
        if rec is not None and rec.keyed and rec.tries < 3 and not self.quiescing:
            a.retry = rec

    def _qadd_again(self, a: GroupAgent) -> None:
        rec = a.retry
        a.retry = None
        assert rec is not None
        node = rec.node
        if self.world.nodes[node] is None or self.world.incarnation[node] != rec.inc \
                or self.world.now >= rec.sent_at + rec.expire_ms:
            self._think(a)
            return
        rec.tries += 1
        self.stats["idempotent_retries"] += 1
        self._send_add(a, rec, node)

    def _finish(self, a: GroupAgent, h: Held) -> None:
        rng = self.rng
        now = self.world.now
        if h.plan == "drop":
            a.held = None
            self._think(a)
            return
        if h.plan == "ack" and not self.quiescing and len(a.batch) < 6 and rng.random() < 0.5:
            h.due = now + rng.randint(1, 600)  # acked later, with others
            a.batch.append(h)
            a.held = None
            self._think(a)
            return
        node = self._pick(h.node if rng.random() < 0.7 else rng.randrange(self.cfg.nodes))
        if node is None:
            h.due = now + 100
            self._think(a)
            return
        if h.plan == "working":
            argv = [b"QWORKING", h.rec.queue, h.group, h.eid, b"EX", b"3"]
        else:
            argv = [b"QACK", h.rec.queue, h.group, h.eid]
        self._send(a, node, argv, Pending(h.plan, node, now, 1000, held=h))

    def _ack_batch(self, a: GroupAgent) -> None:
        """One QACK of the events kept to ack of the queue of the first due: sometimes
        one of them twice, sometimes with an ID no node knows."""
        rng = self.rng
        now = self.world.now
        first = min(a.batch, key=lambda h: h.due)
        hs = [h for h in a.batch if h.rec.queue == first.rec.queue]
        node = self._pick(first.node if rng.random() < 0.7 else rng.randrange(self.cfg.nodes))
        if node is None:
            for h in hs:
                h.due = now + 100
            self._think(a)
            return
        ids = [h.eid for h in hs]
        if rng.random() < 0.2:
            ids.append(rng.choice(ids))
        if rng.random() < 0.1:
            ids.insert(rng.randrange(len(ids) + 1),
                       b"%016x-%08x" % (rng.getrandbits(64), rng.getrandbits(32)))
        if len(ids) > 1:
            self.stats["multi_acks"] += 1
        self._send(a, node, [b"QACK", first.rec.queue, first.group, *ids],
                   Pending("acks", node, now, 1000, batch=hs))

    # ------------------------------------------------------------ replies
    def reply(self, a: GroupAgent, node: int, data: bytes) -> None:
        world = self.world
        p = a.pending
        if p is None or p.node != node:
            world.checker.fail("protocol", f"group agent {a.idx} got an unexpected reply "
                                           f"from node {node}: {data[:80]!r}")
            return
        a.pending = None
        for h in p.batch or ():
            if h in a.batch:
                a.batch.remove(h)
        try:
            value = decode(data)
        except ValueError as e:
            world.checker.fail("protocol", f"undecodable reply from node {node}: {e}")
            self._think(a)
            return
        if isinstance(value, ErrorReply):
            key = f"{p.kind.upper()}: {str(value).split(' ', 1)[0]}"
            self.errors[key] = self.errors.get(key, 0) + 1
            if p.kind == "add":
                self.stats["event_add_errors"] += 1
                self._maybe_retry(a, p.rec)
            elif p.held is not None:
                a.held = None
        else:
            try:
                getattr(self, "_on_" + p.kind)(a, p, value)
            except ReplyShapeError as e:
                world.checker.fail("protocol", f"odd {p.kind} reply from node {node}: {e}")
        if a.pending is None and a.next_at == INF:
            self._think(a, 20 if self.quiescing or a.notified else MEAN_THINK_MS)

    def _on_add(self, a: GroupAgent, p: Pending, value: Reply) -> None:
        rec = p.rec
        assert rec is not None  # a QADD's Pending has its record
        if rec.noblock:
            if value != b"OK":
                self.world.checker.fail("protocol", f"QADD NOBLOCK replied {value!r}")
            self.stats["events_noblock"] += 1
            return
        if not isinstance(value, bytes) or len(value) != 25:
            self.world.checker.fail("protocol", f"odd QADD reply {value!r}")
            return
        if rec.eid is not None and rec.eid != value:
            self.world.checker.fail(
                "group-idempotent", f"QADD IDEMPOTENT retry returned {value.decode()}, "
                f"but the first try's event {rec.eid.decode()} exists: {rec}")
            return
        rec.eid = value
        rec.promised = True
        self.by_id[value] = rec
        # (a retry answers the first try's ID, checked above: no new ID to order)
        if not rec.tries:
            self.stats["ids_ordered"] += 1
        if not rec.tries and value <= rec.floor:
            self.world.checker.fail(
                "group-order", f"QADD returned {value.decode()}, not above "
                f"{rec.floor.decode()} which its node held when it was sent (docs/GROUPS.md: "
                "an event added after another reached a node gets a larger ID)")
        self.stats["events_added"] += 1
        rec.holders_at_reply = h = self._holders(value)
        if h + len(rec.lost_on) < self.repl and not rec.groups:
            self.world.checker.fail(
                "group-replication", f"QADD replied {value.decode()} but {h} node(s) hold "
                f"a copy ({len(rec.lost_on)} lost in crashes), R={self.repl}: {rec}")

    def _on_notify(self, a: GroupAgent, p: Pending, value: Reply) -> None:
        if value is not None:
            a.notified = bulk(value)

    def _on_get(self, a: GroupAgent, p: Pending, value: Reply) -> None:
        if value is None:
            return
        group = a.group
        assert group is not None  # a consumer's QGET
        world = self.world
        ck = world.checker
        now = world.now
        eid_r, body_r, _ = array(value)
        eid, body = bulk(eid_r), bulk(body_r)
        rec = self.by_body.get(body)
        if rec is None or rec.queue != p.queue:
            ck.fail("group-bad-delivery", f"node {p.node} delivered {eid!r} {body!r} from "
                                          f"{p.queue!r}, which no client added there")
            return
        if rec.eid is not None and rec.eid != eid:
            ck.fail("group-bad-delivery", f"node {p.node} delivered {body!r} as {eid!r} but "
                                          f"QADD returned {rec.eid!r}")
            return
        if rec.eid is None:
            rec.eid = eid  # NOBLOCK, or a QADD that failed: no ID was returned
            self.by_id.setdefault(eid, rec)
        if now > rec.sent_at + rec.expire_ms + self._tol():
            ck.fail("group-expiry", f"node {p.node} delivered {rec} "
                                    f"{now - rec.sent_at - rec.expire_ms} ms after it expired")
        self.stats["event_deliveries"] += 1
        st = rec.groups.get(group)
        if st is None:
            st = rec.groups[group] = GroupState()
        faulty = bool(world.cfg.faults)
        if st.acked_at is not None and st.acked_at < p.sent_at:
            self.stats["after_ack"] += 1
            if not faulty:
                ck.fail("group-after-ack", f"{rec} delivered to group {group!r} again "
                                           f"after it acked it")
        elif st.holder is not None and st.holder != a.idx and p.sent_at < st.lease_until - self._tol():
            self.stats["double_leases"] += 1
            if not faulty:
                ck.fail("group-double-lease", f"{rec} leased to agents {st.holder} and {a.idx} "
                                              f"of group {group!r} at once")
        st.deliveries += 1
        if p.lease == 0:  # EX 0: acknowledged at once
            if st.acked_at is None:
                st.acked_at = now
            st.holder = None
            return
        st.holder = a.idx
        st.lease_until = p.sent_at + p.lease
        r = self.rng.random()
        if self.quiescing or group == LATE_GROUP:
            plan, due = "ack", now + self.rng.randint(1, 50)
        else:
            plan = "ack" if r < 0.75 else "working" if r < 0.85 else "drop"
            due = now + min(3000, 1 + int(self.rng.expovariate(1 / MEAN_PROCESS_MS)))
        a.held = Held(rec, eid, p.node, due, plan, group)

    def _on_ack(self, a: GroupAgent, p: Pending, value: Reply) -> None:
        h = p.held
        assert h is not None  # a QACK's or QWORKING's Pending has its event
        a.held = None
        if value == 1:
            self.stats["event_acks"] += 1
            self._acked(a, h)

    def _acked(self, a: GroupAgent, h: Held) -> None:
        """The node said ``a``'s lease on ``h`` ended with its ack."""
        st = h.rec.groups.get(h.group)
        if st is not None:
            if st.acked_at is None:
                st.acked_at = self.world.now
            if st.holder == a.idx:
                st.holder = None

    def _on_acks(self, a: GroupAgent, p: Pending, value: Reply) -> None:
        hs = p.batch
        assert hs is not None  # a multi-ID QACK's Pending has its events
        n = len({h.eid for h in hs})
        if not isinstance(value, int) or not 0 <= value <= n:
            self.world.checker.fail(
                "group-ack-count", f"a QACK naming {n} distinct events the client was "
                f"given (and maybe an ID twice, or an unknown ID) replied {value!r}")
            return
        self.stats["event_acks"] += value
        if value < n:
            return  # which leases had run out is not told: left to the final check
        for h in hs:
            self._acked(a, h)

    def _on_working(self, a: GroupAgent, p: Pending, value: Reply) -> None:
        h = p.held
        assert h is not None  # a QACK's or QWORKING's Pending has its event
        st = h.rec.groups.get(h.group)
        if value == 1 and st is not None and st.holder == a.idx:
            st.lease_until = max(st.lease_until, p.sent_at + 3000)
        h.plan = "ack"
        h.due = self.world.now + 1 + int(self.rng.expovariate(1 / MEAN_PROCESS_MS))
        if value != 1:
            a.held = None  # the lease ran out: the event is someone else's now

    # ------------------------------------------------------------- faults
    def connection_lost(self, a: GroupAgent) -> None:
        p = a.pending
        a.pending = None
        if p is not None and p.kind == "add":
            self._maybe_retry(a, p.rec)
        if p is not None and p.held is not None and a.held is p.held:
            p.held.due = self.world.now + 50
        if p is not None and p.batch is not None:
            for h in p.batch:
                h.due = self.world.now + 50  # (still in a.batch: sent again)
        self._think(a)

    def on_crash(self, i: int, node: Node) -> None:
        """Node i is gone with every event it held (events live in memory)."""
        g = node.groups
        held = [g.store.peek(eid) for eid in g.store.ids()]
        for e in [*(e for e in held if e is not None), *g.repl.adding.values()]:
            rec = self.by_body.get(e.body)
            if rec is not None:
                rec.lost_on.add(i)
            self.stats["event_copies_lost"] += 1
        for a in self.agents:
            if a.pending is not None and a.pending.node == i:
                self.connection_lost(a)

    def _holders(self, eid: bytes) -> int:
        return sum(1 for n in self.world.nodes if n is not None and n.groups.store.has(eid))

    def _excused(self, rec: EventRecord) -> bool:
        return len(rec.lost_on) >= max(1, rec.holders_at_reply)

    def sweep(self) -> None:
        """Answer-in-time check: a command past its bound is a failure; the client gives
        up on the connection and goes on."""
        world = self.world
        now = world.now
        slack = SLACK_MS + world.skew_tolerance()
        for a in self.agents:
            p = a.pending
            if p is None or now <= p.due + slack:
                continue
            world.checker.fail("no-reply", f"node {p.node} never answered group agent "
                                           f"{a.idx}'s {p.kind} sent at "
                                           f"{world.elapsed(p.sent_at)}ms")
            conn = a.conns.pop(p.node, None)
            node = world.nodes[p.node]
            if conn is not None and node is not None and conn[0] == world.incarnation[p.node]:
                world._call(p.node, node.client_closed, conn[1])
                world._after(p.node)
            self.connection_lost(a)

    # --------------------------------------------------------------- final
    def final(self) -> None:
        world = self.world
        ck = world.checker
        end = world.now
        tol = self._tol()
        for rec in self.by_id.values():
            if not rec.promised or rec.sent_at + rec.expire_ms <= end + tol:
                continue
            for g in [*self.groups, LATE_GROUP]:
                if self._done(rec, g):
                    continue
                st = rec.groups.get(g)
                if self._excused(rec):
                    self.stats["events_excused"] += 1
                    break
                self.stats["events_lost"] += 1
                what = "never delivered to" if st is None else "never acked by"
                where = [i for i, n in enumerate(world.nodes)
                         if n is not None and rec.eid and n.groups.store.has(rec.eid)]
                ck.fail("group-lost", f"{rec} {what} group {g.decode()} (held by nodes "
                                      f"{where}, lost in crashes on {sorted(rec.lost_on)})")
                break
        for i, node in enumerate(world.nodes):
            if node is not None and node.groups.repl.adding:
                ck.fail("stuck", f"node {i}: QADDs still wait for copies")


def events_memory(node: Node) -> int:
    """What a node's events cost in its used_memory (groups.py's accounting)."""
    return node.groups.store.memory()
