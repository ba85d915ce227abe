"""Consumer groups across the cluster: bananaq's event queues (docs/GROUPS.md).

An *event* is pushed on a queue (QADD) and lives until it expires; every consumer
group gets each event, independently of the other groups, leased to one consumer of
the group at a time and given back to the group (redo) when the lease runs out
unacknowledged.

The scheme, in short (the reasoning and the partition cases are in docs/GROUPS.md):

- An event is replicated like a job: the node that creates it sends it to R-1 other
  reachable nodes (EVADD/EVGOT; R = min(3, cluster size), Disque's default rule) and
  QADD replies once they hold it (NOBLOCK: at once). Every holder keeps it until its
  expiry, or until QFLUSH (EVFLUSH) drops the queue.
- Each event carries, per group, a *claim*: a packed int of (state, deliveries, lease
  deadline). Absent means never delivered to the group.
- One holder decides for an event, for every group: its *authority*, the first of its
  holders (the creator first) that this node does not consider failed (FAIL). While
  the cluster is healthy that is the creator, on every node: no two consumers of one
  group can hold the event at once. The authority sends every claim change to the
  other holders (EVSTATE), which merge claims by a join (DONE wins; then more
  deliveries; then the later deadline), so copies converge whatever the order.
- A QGET leases an event this node is the authority for; failing that it asks peers
  one at a time to lease one of theirs (EVPULL/EVGRANT), as federation moves jobs to
  consumers. A QACK is decided by the event's authority (EVACK/EVACKED).
- QNOTIFY blocks on local arrivals and redo, and asks peers to tell it when events
  become available (EVWATCH/EVAVAIL): a QADD on any node wakes it.

Pure (sans-IO) like the rest of the core: time comes in as ``now`` (ms), effects go
out through the node (bus messages, replies in its outbox).
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import TYPE_CHECKING, TypeVar

from ..codec import resp
from . import errors
from . import messages as M
from .errors import ReplyError
from .ids import event_id
from .membership import P_FAIL
from .replication import COPIES_UP_TO

if TYPE_CHECKING:
    from .client import Client
    from .membership import Peer
    from .node import Node

# claim states (the low 2 bits of a claim); no claim at all: never delivered
DEAD = 0  # delivered the group's MAXDELIVERIES times without an ack: its dead letters
LEASED = 1
REDO = 2
DONE = 3
AVAILABLE = 4  # (effective() of no claim)
_RANK = (3, 0, 1, 2)  # merge order at equal deadlines: LEASED < REDO < DEAD
_STATE_BITS = 2
_DELIV_BITS = 16
_DELIV_MAX = (1 << _DELIV_BITS) - 1
_STATE_MASK = (1 << _STATE_BITS) - 1  # a claim's state: DEAD, LEASED, REDO or DONE
_DEADLINE_SHIFT = _STATE_BITS + _DELIV_BITS

EVENT_OVERHEAD = 300  # bytes an event costs besides its body (memory accounting)
CLAIM_OVERHEAD = 40  # bytes a group's claim on an event costs
QADD_TIMEOUT_MS = 5000  # a QADD waiting for its copies gives up (NOREPL) after this
PULL_STEP_MS = 500  # a peer asked to lease an event must answer within this
AUTOACK_LEASE_MS = 5000  # the lease of a QGET EX 0 served by a peer, until its ack comes
ACK_TIMEOUT_MS = 1000  # peers asked to decide a QACK must answer within this
SCAN_BUDGET = 10_000  # events one QGET looks at, at most, past its group's cursor
TOMBSTONE_MS = 600_000  # a QFLUSH refuses copies of older events this long
GRANTED_MAX = 100_000  # remembered "which peer leased this event to us" entries
CRON_MS = 1000
DEFAULT_LEASE_MS = 30_000
MAX_EXPIRE_MS = 10 * 365 * 86_400_000  # ten years
MAX_DELIVERIES = _DELIV_MAX


def pack(state: int, deliveries: int, deadline: int) -> int:
    if deliveries > _DELIV_MAX:
        deliveries = _DELIV_MAX
    return state | (deliveries << _STATE_BITS) | (deadline << _DEADLINE_SHIFT)


def claim_state(c: int) -> int:
    return c & _STATE_MASK


def claim_deliveries(c: int) -> int:
    return (c >> _STATE_BITS) & _DELIV_MAX


def claim_deadline(c: int) -> int:
    return c >> _DEADLINE_SHIFT


def effective(c: int | None, now: int) -> int:
    """What a claim means now: a lease whose deadline passed is a redo."""
    if c is None:
        return AVAILABLE
    s = c & _STATE_MASK
    if s == LEASED and c >> _DEADLINE_SHIFT <= now:
        return REDO
    return s


def merge(old: int | None, new: int) -> int:
    """The join of two claims on one event for one group: copies that saw the same
    changes in any order agree. DONE is final; otherwise the later deadline wins (a
    lease is granted only once the previous one ended, an extension moves it on, a
    dead-lettering or a requeue is stamped with its time), then the state that ends
    the other (REDO over the LEASED it ends, DEAD over the REDO it ends)."""
    if old is None:
        return new
    if old & _STATE_MASK == DONE:
        return old
    if new & _STATE_MASK == DONE:
        return new
    ko = (old >> _DEADLINE_SHIFT, _RANK[old & _STATE_MASK])
    kn = (new >> _DEADLINE_SHIFT, _RANK[new & _STATE_MASK])
    return new if kn > ko else old


class Event:
    __slots__ = ("id", "queue", "body", "ctime", "etime", "holders", "claims", "gone")

    def __init__(self, eid: bytes, queue: bytes, body: bytes, ctime: int, etime: int,
                 holders: tuple[str, ...]) -> None:
        self.id = eid
        self.queue = queue
        self.body = body
        self.ctime = ctime  # ns, the creating node's clock
        self.etime = etime  # ms: discarded then
        self.holders = holders  # node IDs holding a copy, the creator first
        self.claims: dict[bytes, int] = {}  # group -> packed claim
        self.gone = False


class Cursor:
    """Where a group's scan of a queue stands on this node: every event before
    ``pos`` is done, leased, gone, or listed in ``redo`` once its lease ran out; every
    event before ``mine_pos`` (>= pos) is that or decided by another node, so a node that
    creates none of a long queue's events does not rescan them on every QGET. Which
    node decides changes only with who is reachable (an event's holders grow at the
    end, after this node), and then both go back to the start (``reach``)."""

    __slots__ = ("pos", "mine_pos", "redo", "reach")

    def __init__(self, pos: int) -> None:
        self.pos = pos
        self.mine_pos = pos
        self.redo: deque[bytes] = deque()
        self.reach: object = None  # membership.reach_ids when the scan was last valid


class Waiter:
    """A client blocked in QNOTIFY."""

    __slots__ = ("client", "group", "queues", "deadline")

    def __init__(self, client: Client, group: bytes, queues: list[bytes],
                 deadline: int) -> None:
        self.client = client
        self.group = group
        self.queues = queues
        self.deadline = deadline  # 0: forever


class EQueue:
    __slots__ = ("name", "order", "base", "live", "cursors", "waiters", "watchers", "atime")

    def __init__(self, name: bytes, now: int) -> None:
        self.name = name
        self.order: list[Event] = []  # arrival order here; gone events until compacted
        self.base = 0  # absolute index of order[0]
        self.live = 0
        self.cursors: dict[bytes, Cursor] = {}
        self.waiters: list[Waiter] = []
        self.watchers: dict[str, tuple[bytes, int]] = {}  # peer -> (group, until ms)
        self.atime = now

    def end(self) -> int:
        return self.base + len(self.order)


class AddWait:
    __slots__ = ("client", "event", "need", "deadline")

    def __init__(self, client: Client, event: Event, need: set[str], deadline: int) -> None:
        self.client = client
        self.event = event
        self.need = need
        self.deadline = deadline


class PullWait:
    """A QGET asking peers, one at a time, to lease one of their events."""

    __slots__ = ("client", "queue", "group", "lease", "maxdeliv", "targets", "deadline",
                 "counters", "hint", "autoack")

    def __init__(self, client: Client, queue: bytes, group: bytes, lease: int, maxdeliv: int,
                 targets: list[str], counters: bool) -> None:
        self.client = client
        self.queue = queue
        self.group = group
        self.lease = lease
        self.maxdeliv = maxdeliv
        self.targets = targets  # still to ask, the one asked now first
        self.deadline = 0
        self.counters = counters
        self.hint: bytes | None = None  # an event we hold that targets[0] decides for
        self.autoack = False  # QGET EX 0: ack what the grant brings


class AckWait:
    """A QACK or QWORKING waiting for the event's authority to decide."""

    __slots__ = ("client", "waiting", "deadline", "eid", "extend")

    def __init__(self, client: Client, waiting: set[str], deadline: int, eid: bytes,
                 extend: int) -> None:
        self.client = client
        self.waiting = waiting
        self.deadline = deadline
        self.eid = eid
        self.extend = extend


class GroupStats:
    """QSTATUS for one queue and group: bananaq's fields, then ours (dead letters and
    ``oldest``, the creation time in ms of the oldest event the group has not done)."""

    __slots__ = ("total", "inprogress", "redo", "done", "available", "consumers", "dead",
                 "oldest")

    def __init__(self) -> None:
        self.total = 0
        self.inprogress = 0
        self.redo = 0
        self.done = 0
        self.available = 0
        self.consumers = 0
        self.dead = 0
        self.oldest = 0

    def fields(self, now: int) -> list[tuple[bytes, int]]:
        """Every field in QSTATUS order: bananaq's, then dead, lag (events waiting to
        be delivered: available + redo), pending (delivered, not acknowledged yet) and
        oldest-pending-ms (the age of the oldest event not done, 0 if none)."""
        return [(b"total", self.total), (b"inprogress", self.inprogress),
                (b"redo", self.redo), (b"done", self.done), (b"available", self.available),
                (b"consumers", self.consumers), (b"dead", self.dead),
                (b"lag", self.available + self.redo), (b"pending", self.inprogress),
                (b"oldest-pending-ms", max(0, now - self.oldest) if self.oldest else 0)]


_K = TypeVar("_K")
_SHARED_MAX = 4096  # values kept per table of shared values (it starts over when full)


def _shared(table: dict[_K, _K], value: _K) -> _K:
    """The one object kept in ``table`` equal to ``value`` (``value`` itself the first
    time), so that many events share it."""
    v = table.get(value)
    if v is None:
        if len(table) >= _SHARED_MAX:
            table.clear()
        v = table[value] = value
    return v


def event_reply(eid: bytes, body: bytes, deliveries: int, counters: bool) -> bytes:
    """QGET's reply: [id, contents], and the delivery count WITHCOUNTERS."""
    if counters:
        return b"*3\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n:%d\r\n" % (
            len(eid), eid, len(body), body, deliveries)
    return b"*2\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n" % (len(eid), eid, len(body), body)


class Groups:
    """The node's events, their groups' claims, and the clients waiting on them."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.events: dict[bytes, Event] = {}
        self.queues: dict[bytes, EQueue] = {}
        self.adding: dict[bytes, AddWait] = {}  # QADDs waiting for their copies
        self.pending: dict[int, PullWait | AckWait] = {}  # requests to peers, by number
        self._next_req = 0
        self.waiters: dict[int, Waiter] = {}  # QNOTIFY clients, by client id
        self.flushed: dict[tuple[bytes, bytes], int] = {}  # (event, group) -> lease end
        self.tombs: dict[bytes, tuple[int, int]] = {}  # queue -> (flushed ctime ns, until)
        self.granted_by: dict[bytes, str] = {}  # event -> peer that leased it to us
        self._exp: list[tuple[int, bytes]] = []  # (etime, event id)
        self._leases: list[tuple[int, bytes, bytes]] = []  # (deadline, event id, group)
        self._timeouts: list[tuple[int, int]] = []  # (deadline, request or client id)
        self._next_cron = 0
        self._names: dict[bytes, bytes] = {}
        self._holders: dict[tuple[str, ...], tuple[str, ...]] = {}
        # counters (INFO)
        self.added = 0
        self.delivered = 0
        self.acked = 0
        self.expired = 0
        self.redone = 0
        self.dead = 0
        self.repairs = 0

    # ------------------------------------------------------------------ timers
    def _timer(self, at: int) -> None:
        node = self.node
        if at < node.queues.block_hint:
            node.queues.block_hint = float(at)

    def next_due(self) -> int | None:
        t: int | None = None
        for h in (self._exp, self._leases, self._timeouts):
            if h and (t is None or h[0][0] < t):
                t = h[0][0]
        if (self.events or self.queues) and (t is None or self._next_cron < t):
            t = self._next_cron
        return t

    def tick(self, now: int) -> None:
        exp = self._exp
        while exp and exp[0][0] <= now:
            etime, eid = heapq.heappop(exp)
            e = self.events.get(eid)
            if e is not None and e.etime == etime:
                self.expired += 1
                self._remove(e)
        leases = self._leases
        while leases and leases[0][0] <= now:
            deadline, eid, group = heapq.heappop(leases)
            self._lease_ended(eid, group, deadline, now)
        tos = self._timeouts
        while tos and tos[0][0] <= now:
            deadline, key = heapq.heappop(tos)
            self._timed_out(key, deadline, now)
        if now >= self._next_cron:
            self._next_cron = now + CRON_MS
            self._cron(now)

    def _cron(self, now: int) -> None:
        for name, (_, until) in list(self.tombs.items()):
            if until <= now:
                del self.tombs[name]
        peers = self.node.members.peers
        for q in list(self.queues.values()):
            for pid, (_, wuntil) in list(q.watchers.items()):
                if wuntil <= now or pid not in peers:  # (a forgotten node never cancels)
                    del q.watchers[pid]
            if not q.live and not q.waiters and not q.watchers:
                del self.queues[q.name]

    # ------------------------------------------------------------------ store
    def queue_for(self, name: bytes, now: int) -> EQueue:
        q = self.queues.get(name)
        if q is None:
            q = self.queues[name] = EQueue(name, now)
        return q

    def _store(self, e: Event, now: int) -> None:
        """Hold ``e`` (new here): in its queue's order, expiring at its etime."""
        q = self.queue_for(e.queue, now)
        e.queue = q.name
        self.events[e.id] = e
        q.order.append(e)
        q.live += 1
        self.node.mem.used += EVENT_OVERHEAD + len(e.body) + CLAIM_OVERHEAD * len(e.claims)
        heapq.heappush(self._exp, (e.etime, e.id))
        self._timer(e.etime)

    def _remove(self, e: Event) -> None:
        if e.gone:
            return
        e.gone = True
        self.events.pop(e.id, None)
        self.node.mem.used -= EVENT_OVERHEAD + len(e.body) + CLAIM_OVERHEAD * len(e.claims)
        e.body = b""
        e.claims = {}
        q = self.queues.get(e.queue)
        if q is None:
            return
        q.live -= 1
        order = q.order
        k = 0
        while k < len(order) and order[k].gone:
            k += 1
        if k:
            del order[:k]
            q.base += k
        if len(order) > 64 and q.live * 2 < len(order):
            self._compact(q)

    def _compact(self, q: EQueue) -> None:
        """Drop the gone events from the middle of a queue's order (some expire before
        older ones): cursors move to the same place among the live events."""
        order = q.order
        keep: list[Event] = []
        newpos: list[int] = []  # newpos[i]: live events before order[i]
        for e in order:
            newpos.append(len(keep))
            if not e.gone:
                keep.append(e)
        newpos.append(len(keep))
        base = q.base
        for cur in q.cursors.values():
            i = cur.pos - base
            cur.pos = base + newpos[min(max(i, 0), len(order))]
            i = cur.mine_pos - base
            cur.mine_pos = base + newpos[min(max(i, 0), len(order))]
        q.order = keep

    def set_claim(self, e: Event, group: bytes, claim: int, now: int) -> None:
        """Merge ``claim`` (from a peer) into ``e``'s claim for ``group``, memory
        accounted: a lease gets its timer here too (every LEASED claim held has one,
        so a scan may pass it), a redo wakes this node's consumers."""
        old = e.claims.get(group)
        if old is None:
            self.node.mem.used += CLAIM_OVERHEAD
        new = e.claims[group] = merge(old, claim)
        if new == old:
            return
        if new & _STATE_MASK == LEASED:
            self._lease_timer(e.id, group, claim_deadline(new))
        elif new & _STATE_MASK == REDO:
            q = self.queues.get(e.queue)
            if q is not None:
                cur = q.cursors.get(group)
                if cur is not None:
                    cur.redo.append(e.id)
                self._wake(q, group, now)

    def _lease_timer(self, eid: bytes, group: bytes, deadline: int) -> None:
        heapq.heappush(self._leases, (deadline, eid, group))
        self._timer(deadline)

    # ---------------------------------------------------------------- authority
    def authority(self, e: Event) -> str:
        """The holder that decides for ``e``: the first holder not known to have
        failed (this node, if all the others did)."""
        myid = self.node.myid
        peers = self.node.members.peers
        for h in e.holders:
            if h == myid:
                return h
            p = peers.get(h)
            if p is not None and not p.flags & P_FAIL:
                return h
        return myid

    def mine(self, e: Event) -> bool:
        return self.authority(e) == self.node.myid

    def _replicate_claim(self, e: Event, group: bytes) -> None:
        myid = self.node.myid
        dsts = sorted(h for h in e.holders if h != myid)
        if dsts:
            self.node.send_item(dsts, M.EVSTATE, [e.id, group, e.claims[group]])

    # --------------------------------------------------------------------- QADD
    def qadd(self, client: Client, qname: bytes, expire_ms: int, body: bytes, noblock: bool,
             now: int) -> bytes | None:
        node = self.node
        repl = node.default_replicate if node.clustered else 1
        peers = node.members.reach_ids
        need = repl - 1
        if need > len(peers) and not noblock:
            raise ReplyError(errors.NOREPL)
        targets = list(peers) if need >= len(peers) else sorted(node.rng.sample(peers, need))
        ctime = node.next_ctime(now)
        eid = event_id(ctime, node.myid)
        e = Event(eid, qname, body, ctime, now + expire_ms, self._nodes((node.myid, *targets)))
        self.added += 1
        if targets:
            node.send_item(targets, M.EVADD, self._wire(e), len(e.body))
        if noblock or not targets:
            self._store(e, now)
            self._arrived(e, now)
            return resp.OK if noblock else resp.bulk(eid)
        deadline = now + min(QADD_TIMEOUT_MS, expire_ms)
        self.adding[eid] = AddWait(client, e, set(targets), deadline)
        client.blocked_add = eid
        heapq.heappush(self._timeouts, (deadline, -client.id))
        self._timer(deadline)
        return None

    def _wire(self, e: Event) -> list[object]:
        return [e.id, e.queue, e.body, e.ctime, e.etime, list(e.holders),
                [[g, c] for g, c in e.claims.items()]]

    def on_evgot(self, p: Peer, fields: list[bytes], now: int) -> None:
        for eid in fields:
            w = self.adding.get(eid)
            if w is None:
                continue
            w.need.discard(p.id)
            if w.need:
                continue
            del self.adding[eid]
            c = w.client
            if c.blocked_add == eid:
                c.blocked_add = None
            e = w.event
            if e.etime > now and eid not in self.events:
                self._store(e, now)
                self._arrived(e, now)
            if not c.closed:
                self.node.outbox.append((c, resp.bulk(eid)))

    def _add_timed_out(self, client_id: int, now: int) -> None:
        for eid, w in list(self.adding.items()):
            if w.client.id == client_id and w.deadline <= now:
                del self.adding[eid]
                e = w.event
                self.node.send(sorted(h for h in e.holders if h != self.node.myid),
                               M.EVDEL, eid)
                if w.client.blocked_add == eid:
                    w.client.blocked_add = None
                if not w.client.closed:
                    self.node.outbox.append((w.client, resp.error(
                        "NOREPL Timeout reached before replicating to the requested "
                        "number of nodes")))

    def on_evadd(self, p: Peer, fields: list[list[object]], now: int) -> None:
        got: list[bytes] = []
        for w in fields:  # checked by messages.parse
            eid = w[0]
            assert type(eid) is bytes
            got.append(eid)
            known = self.events.get(eid)
            holders = w[5]
            assert type(holders) is list
            stored = known is not None
            if known is None and eid in self.adding:
                known = self.adding[eid].event  # ours, a copy sent back before confirmed
            if known is not None:
                known.holders = self._nodes(tuple(dict.fromkeys(
                    [*known.holders, *[str(h) for h in holders]])))
                claims = w[6]
                assert type(claims) is list
                theirs = {self._gname(g): c for g, c in claims}
                for g, c in theirs.items():
                    if stored:
                        self.set_claim(known, g, c, now)
                    else:
                        known.claims[g] = merge(known.claims.get(g), c)
                # anti-entropy: a copy sent to us (a repair) tells us the sender's
                # claims; what we know better goes back (a lost EVSTATE heals here)
                for g, c in known.claims.items():
                    if theirs.get(g) != c:
                        self.node.send_item([p.id], M.EVSTATE, [eid, g, c])
                continue
            qname, body, ctime, etime, claims = w[1], w[2], w[3], w[4], w[6]
            assert type(qname) is bytes and type(body) is bytes
            assert type(ctime) is int and type(etime) is int and type(claims) is list
            if etime <= now:
                continue
            tomb = self.tombs.get(qname)
            if tomb is not None and ctime <= tomb[0]:
                continue
            if not self.node.mem.fits_job(len(body), COPIES_UP_TO):
                got.pop()  # not held (as a job copy past 75% of maxmemory): not counted
                continue
            hs = [str(h) for h in holders]
            if self.node.myid not in hs:
                hs.append(self.node.myid)
            e = Event(eid, qname, body, ctime, etime, self._nodes(tuple(hs)))
            for g, c in claims:
                e.claims[self._gname(g)] = c
                if c & _STATE_MASK == LEASED:  # (every LEASED claim held has its timer)
                    self._lease_timer(eid, self._gname(g), claim_deadline(c))
            self._store(e, now)
            self._arrived(e, now)
        if got:
            self.node.send_items([p.id], M.EVGOT, got)

    def on_evdel(self, p: Peer, fields: list[bytes], now: int) -> None:
        e = self.events.get(fields[0])
        if e is not None:
            self._remove(e)

    def _gname(self, g: object) -> bytes:
        assert type(g) is bytes
        return self.intern(g)

    def intern(self, name: bytes) -> bytes:
        """One object per group name (events hold a claim per group)."""
        return _shared(self._names, name)

    def _nodes(self, t: tuple[str, ...]) -> tuple[str, ...]:
        """One tuple per distinct list of holders."""
        return _shared(self._holders, t)

    # ------------------------------------------------------------ availability
    def _cursor(self, q: EQueue, group: bytes) -> Cursor:
        cur = q.cursors.get(group)
        reach = self.node.members.reach_ids
        if cur is None:
            cur = q.cursors[group] = Cursor(q.base)
            cur.reach = reach
        elif cur.reach is not reach:
            # who is alive changed: events may have become ours to lease; rescan
            cur.reach = reach
            cur.pos = cur.mine_pos = q.base
            cur.redo.clear()
        if cur.pos < q.base:
            cur.pos = q.base
        if cur.mine_pos < cur.pos:
            cur.mine_pos = cur.pos
        return cur

    def _find(self, q: EQueue, group: bytes, now: int, only_mine: bool) -> Event | None:
        """The next event available to ``group`` in ``q`` (leasable here when
        ``only_mine``), redo first, then in arrival order; advances the cursor past
        what no longer needs a look."""
        cur = self._cursor(q, group)
        redo = cur.redo
        k = 0
        while k < len(redo):
            e = self.events.get(redo[k])
            if e is None or e.queue != q.name or effective(e.claims.get(group),
                                                           now) not in (REDO, AVAILABLE):
                del redo[k]  # gone, leased again, done or dead: no longer to redo
                continue
            if not only_mine or self.mine(e):
                return e
            k += 1  # another node redoes it (or should: a repair may be due); kept in view
        order, base = q.order, q.base
        # a scan for this node's own events starts past those another node decides
        i = cur.mine_pos if only_mine else cur.pos
        end = base + len(order)
        advance = i == cur.pos
        budget = SCAN_BUDGET
        while i < end and budget:
            budget -= 1
            e = order[i - base]
            if not e.gone:
                st = effective(e.claims.get(group), now)
                if st in (AVAILABLE, REDO):
                    if not only_mine or self.mine(e):
                        if advance:
                            cur.pos = i  # passed once leased (a look leases nothing)
                        if only_mine:
                            cur.mine_pos = i
                        return e
                    advance = False  # another node leases it: keep it in view
            i += 1
            if advance:
                cur.pos = i
            if only_mine:
                cur.mine_pos = i
        return None

    def available(self, q: EQueue, group: bytes, now: int) -> bool:
        return self._find(q, group, now, False) is not None

    # ---------------------------------------------------------------- leasing
    def lease_local(self, qname: bytes, group: bytes, lease_ms: int, maxdeliv: int,
                    now: int) -> tuple[Event, int] | None:
        """Lease the next event of ``qname`` this node decides for to ``group``:
        (event, deliveries) or None. ``lease_ms`` 0 acknowledges it at once. An event
        delivered ``maxdeliv`` times already (0: no limit) goes to the group's dead
        letters instead."""
        q = self.queues.get(qname)
        if q is None:
            return None
        q.atime = now
        for _ in range(SCAN_BUDGET):
            e = self._find(q, group, now, True)
            if e is None:
                return None
            cur = q.cursors[group]
            if cur.redo and cur.redo[0] == e.id:
                cur.redo.popleft()
            old = e.claims.get(group)
            deliv = (claim_deliveries(old) if old is not None else 0) + 1
            if not maxdeliv or deliv <= maxdeliv or old is None:
                break
            e.claims[group] = pack(DEAD, deliv - 1, now)
            self.dead += 1
            self._replicate_claim(e, group)
        else:
            return None
        if lease_ms:
            deadline = now + lease_ms
            c = pack(LEASED, deliv, deadline)
            self._lease_timer(e.id, group, deadline)
        else:
            c = pack(DONE, deliv, 0)
            self.acked += 1
        if old is None:
            self.node.mem.used += CLAIM_OVERHEAD
        e.claims[group] = c
        self.delivered += 1
        self._replicate_claim(e, group)
        return e, deliv

    def qget(self, client: Client, qname: bytes, group: bytes, lease_ms: int, maxdeliv: int,
             counters: bool, now: int) -> bytes | None:
        group = self.intern(group)
        got = self.lease_local(qname, group, lease_ms, maxdeliv, now)
        if got is not None:
            return event_reply(got[0].id, got[0].body, got[1], counters)
        targets, hint = self._pull_targets(qname, group, now)
        if not targets:
            return resp.null_array(client.proto)
        # EX 0 from a peer: leased briefly, acked once the grant reached us (an ack at
        # the grant would lose the event for the group if the EVGRANT were lost)
        w = PullWait(client, qname, group, lease_ms or AUTOACK_LEASE_MS, maxdeliv, targets,
                     counters)
        w.hint = hint
        w.autoack = not lease_ms
        self._pull_next(w, now)
        return None

    def _pull_targets(self, qname: bytes, group: bytes,
                      now: int) -> tuple[list[str], bytes | None]:
        """Peers to ask for a lease: first the authority of an event this node knows is
        available to the group (its ID returned too), then every other reachable peer."""
        node = self.node
        if not node.clustered:
            return [], None
        reach = node.members.reach_ids
        q = self.queues.get(qname)
        if q is not None:
            e = self._find(q, group, now, False)
            if e is not None:
                a = self.authority(e)
                if a != node.myid and a in reach:
                    return [a, *(p for p in reach if p != a)], e.id
        return list(reach), None

    def _pull_next(self, w: PullWait, now: int) -> None:
        if not w.targets or w.client.closed:
            if not w.client.closed:
                self.node.outbox.append((w.client, resp.null_array(w.client.proto)))
            return
        self._next_req += 1
        req = self._next_req
        self.pending[req] = w
        w.deadline = now + PULL_STEP_MS
        heapq.heappush(self._timeouts, (w.deadline, req))
        self._timer(w.deadline)
        self.node.send([w.targets[0]], M.EVPULL, req, w.queue, w.group, w.lease, w.maxdeliv)

    def _repair(self, eid: bytes, nid: str) -> None:
        """``nid`` decides for an event we know is available, yet leased us nothing: it
        may have lost its copy (a restart: events live in memory). Send it ours, with
        the claims we know; a node that holds it merges them (a join: no harm)."""
        e = self.events.get(eid)
        if e is not None and self.authority(e) == nid:
            self.repairs += 1
            self.node.send([nid], M.EVADD, self._wire(e))

    def on_evpull(self, p: Peer, fields: list[object], now: int) -> None:
        req, qname, group, lease, maxdeliv = fields
        assert type(qname) is bytes and type(lease) is int and type(maxdeliv) is int
        got = self.lease_local(qname, self._gname(group), lease, maxdeliv, now)
        self.node.send([p.id], M.EVGRANT, req,
                       None if got is None else [got[0].id, got[0].body, got[1]])

    def on_evgrant(self, p: Peer, fields: list[object], now: int) -> None:
        req, grant = fields
        assert type(req) is int
        w = self.pending.get(req)
        if not isinstance(w, PullWait) or not w.targets or w.targets[0] != p.id:
            return  # late: the lease runs out unused and the event is redone
        del self.pending[req]
        if grant is None:
            w.targets.pop(0)
            if w.hint is not None:
                self._repair(w.hint, p.id)
                w.hint = None
            self._pull_next(w, now)
            return
        assert type(grant) is list
        eid, body, deliv = grant
        assert type(eid) is bytes and type(body) is bytes and type(deliv) is int
        gb = self.granted_by
        gb[eid] = p.id
        if len(gb) > GRANTED_MAX:
            del gb[next(iter(gb))]
        if not w.client.closed:
            self.node.outbox.append((w.client, event_reply(eid, body, deliv, w.counters)))
            if w.autoack:
                self.node.send([p.id], M.EVACK, 0, w.queue, w.group, eid, 0)

    def _lease_ended(self, eid: bytes, group: bytes, deadline: int, now: int) -> None:
        if self.flushed.get((eid, group)) == deadline:
            del self.flushed[(eid, group)]  # a lease held across a QFLUSH ended
        e = self.events.get(eid)
        if e is None:
            return
        c = e.claims.get(group)
        if c is None or c & _STATE_MASK != LEASED or claim_deadline(c) != deadline:
            return
        q = self.queues.get(e.queue)
        if self.mine(e):
            self.redone += 1
            e.claims[group] = pack(REDO, claim_deliveries(c), deadline)
            self._replicate_claim(e, group)
        if q is not None:
            cur = q.cursors.get(group)
            if cur is not None:
                cur.redo.append(eid)
            self._wake(q, group, now)
            self._tell_watchers(q, group)

    # --------------------------------------------------------------------- ack
    def decide(self, e: Event, group: bytes, extend_ms: int, now: int) -> int:
        """As the authority: acknowledge ``group``'s live lease on ``e`` (extend_ms 0),
        or extend it to ``extend_ms`` from now (never shortened). 1 done, 0 no live
        lease (ran out, acked, never leased)."""
        c = e.claims.get(group)
        if c is None or effective(c, now) != LEASED:
            return 0
        if extend_ms:
            deadline = max(claim_deadline(c), now + extend_ms)
            e.claims[group] = pack(LEASED, claim_deliveries(c), deadline)
            self._lease_timer(e.id, group, deadline)
        else:
            e.claims[group] = pack(DONE, claim_deliveries(c), 0)
            self.acked += 1
        self._replicate_claim(e, group)
        return 1

    def _flushed(self, eid: bytes, group: bytes, extend_ms: int, now: int) -> bool:
        """A lease held across a QFLUSH: acked (forgotten) or extended, if still live."""
        key = (eid, group)
        until = self.flushed.get(key)
        if until is None or until <= now:
            return False
        if extend_ms:
            self.flushed[key] = until = max(until, now + extend_ms)
            self._lease_timer(eid, group, until)
        else:
            del self.flushed[key]
        return True

    def qack(self, client: Client, qname: bytes, group: bytes, eid: bytes, extend_ms: int,
             now: int) -> bytes | None:
        """QACK (``extend_ms`` 0) and QWORKING: decided by the event's authority, here
        or asked over the bus."""
        if self._flushed(eid, group, extend_ms, now):
            return resp.ONE
        e = self.events.get(eid)
        if e is not None and e.queue != qname:
            return resp.ZERO
        if e is not None:
            a = self.authority(e)
            if a == self.node.myid:
                return resp.ONE if self.decide(e, group, extend_ms, now) else resp.ZERO
            targets = [a]
        elif eid in self.granted_by:
            targets = [self.granted_by[eid]]
        else:
            targets = list(self.node.members.reach_ids)
        targets = [t for t in targets if t in self.node.members.peers]
        if not targets:
            return resp.ZERO
        self._next_req += 1
        req = self._next_req
        deadline = now + ACK_TIMEOUT_MS
        self.pending[req] = AckWait(client, set(targets), deadline, eid, extend_ms)
        heapq.heappush(self._timeouts, (deadline, req))
        self._timer(deadline)
        self.node.send(targets, M.EVACK, req, qname, group, eid, extend_ms)
        return None

    def on_evack(self, p: Peer, fields: list[object], now: int) -> None:
        req, qname, group, eid, extend_ms = fields
        assert type(eid) is bytes and type(group) is bytes and type(extend_ms) is int
        verdict = 2
        if self._flushed(eid, group, extend_ms, now):
            verdict = 1
        else:
            e = self.events.get(eid)
            if e is not None and e.queue == qname and self.mine(e):
                verdict = self.decide(e, self._gname(group), extend_ms, now)
        self.node.send([p.id], M.EVACKED, req, verdict)

    def on_evacked(self, p: Peer, fields: list[object], now: int) -> None:
        req, verdict = fields
        assert type(req) is int
        w = self.pending.get(req)
        if not isinstance(w, AckWait):
            return
        w.waiting.discard(p.id)
        if verdict == 1 or not w.waiting:
            del self.pending[req]
            if not w.extend:
                self.granted_by.pop(w.eid, None)
            if not w.client.closed:
                self.node.outbox.append((w.client, resp.ONE if verdict == 1 else resp.ZERO))

    def _timed_out(self, key: int, deadline: int, now: int) -> None:
        if key < 0:  # a QADD's or a QNOTIFY's client id
            w = self.waiters.get(-key)
            if w is not None and w.deadline and w.deadline <= now:
                self._unblock(w)
                if not w.client.closed:
                    self.node.outbox.append((w.client, resp.null_bulk(w.client.proto)))
            self._add_timed_out(-key, now)
            return
        p = self.pending.get(key)
        if p is None or p.deadline != deadline:
            return
        del self.pending[key]
        if isinstance(p, PullWait):
            p.targets.pop(0)
            self._pull_next(p, now)
        elif not p.client.closed:
            self.node.outbox.append((p.client, resp.ZERO))

    # ------------------------------------------------------------------ claims
    def on_evstate(self, p: Peer, fields: list[list[object]], now: int) -> None:
        for eid, group, claim in fields:
            assert type(eid) is bytes and type(claim) is int
            e = self.events.get(eid)
            if e is None:
                continue
            self.set_claim(e, self._gname(group), claim, now)

    # ------------------------------------------------------------------ notify
    def qnotify(self, client: Client, group: bytes, timeout_ms: int, names: list[bytes],
                now: int) -> bytes | None:
        group = self.intern(group)
        for name in names:
            q = self.queues.get(name)
            if q is not None and self.available(q, group, now):
                return resp.bulk(name)
        if self.node.leaving:
            return resp.error(errors.LEAVING)
        deadline = now + timeout_ms if timeout_ms else 0
        w = Waiter(client, group, names, deadline)
        self.waiters[client.id] = w
        reach = self.node.members.reach_ids
        for name in names:
            q = self.queue_for(name, now)
            q.waiters.append(w)
            if reach:
                self.node.send(reach, M.EVWATCH, name, group,
                               timeout_ms + 1000 if timeout_ms else M.MAX_LEASE_MS)
        if deadline:
            heapq.heappush(self._timeouts, (deadline, -client.id))
            self._timer(deadline)
        return None

    def _unblock(self, w: Waiter) -> None:
        self.waiters.pop(w.client.id, None)
        reach = self.node.members.reach_ids
        for name in w.queues:
            q = self.queues.get(name)
            if q is None:
                continue
            if w in q.waiters:
                q.waiters.remove(w)
            if reach and not any(o.group == w.group for o in q.waiters):
                self.node.send(reach, M.EVWATCH, name, w.group, 0)

    def _wake(self, q: EQueue, group: bytes | None, now: int) -> None:
        """Serve the QNOTIFY clients of ``q`` (of ``group`` only, unless None) that
        have an event available."""
        if not q.waiters:
            return
        ok: dict[bytes, bool] = {}
        for w in list(q.waiters):
            if group is not None and w.group != group:
                continue
            a = ok.get(w.group)
            if a is None:
                a = ok[w.group] = self.available(q, w.group, now)
            if a:
                self._unblock(w)
                if not w.client.closed:
                    self.node.outbox.append((w.client, resp.bulk(q.name)))

    def _wake_remote(self, q: EQueue, group: bytes) -> None:
        """A peer says events of ``q`` are available to ``group`` there."""
        for w in list(q.waiters):
            if w.group == group:
                self._unblock(w)
                if not w.client.closed:
                    self.node.outbox.append((w.client, resp.bulk(q.name)))

    def _arrived(self, e: Event, now: int) -> None:
        q = self.queues.get(e.queue)
        if q is None:
            return
        if q.waiters:
            self._wake(q, None, now)
        self._tell_watchers(q, None)

    def _tell_watchers(self, q: EQueue, group: bytes | None) -> None:
        if not q.watchers:
            return
        for pid, (g, _) in q.watchers.items():
            if group is None or g == group:
                self.node.send([pid], M.EVAVAIL, q.name, g)

    def on_evwatch(self, p: Peer, fields: list[object], now: int) -> None:
        qname, group, ms = fields
        assert type(qname) is bytes and type(ms) is int
        g = self._gname(group)
        if not ms:
            q = self.queues.get(qname)
            if q is not None:
                w = q.watchers.get(p.id)
                if w is not None and w[0] == g:
                    del q.watchers[p.id]
            return
        q = self.queue_for(qname, now)
        q.watchers[p.id] = (g, now + ms)
        if self.available(q, g, now):
            self.node.send([p.id], M.EVAVAIL, qname, g)

    def on_evavail(self, p: Peer, fields: list[object], now: int) -> None:
        qname, group = fields
        assert type(qname) is bytes and type(group) is bytes
        q = self.queues.get(qname)
        if q is not None and q.waiters:
            self._wake_remote(q, group)

    def client_closed(self, client: Client) -> None:
        w = self.waiters.get(client.id)
        if w is not None:
            self._unblock(w)

    # ------------------------------------------------------------------- flush
    def qflush(self, qname: bytes, now: int) -> bytes:
        ctime = self.node.next_ctime(now)
        self.flush_local(qname, ctime, now)
        peers = self.node.members.known_peers()
        if peers:
            self.node.send(peers, M.EVFLUSH, qname, ctime)
        return resp.OK

    def flush_local(self, qname: bytes, ctime: int, now: int) -> None:
        """Drop the events of ``qname``; leases held on them may still be acked (1)
        until they end, and are never given back."""
        old = self.tombs.get(qname)
        if old is None or old[0] < ctime:
            self.tombs[qname] = (ctime, now + TOMBSTONE_MS)
        q = self.queues.get(qname)
        if q is None:
            return
        for e in list(q.order):
            if e.gone:
                continue
            for g, c in e.claims.items():
                if effective(c, now) == LEASED:
                    self.flushed[(e.id, g)] = claim_deadline(c)
            self._remove(e)
        q.cursors.clear()  # as if the queue never existed
        if not q.waiters and not q.watchers:
            del self.queues[qname]

    def on_evflush(self, p: Peer, fields: list[object], now: int) -> None:
        qname, ctime = fields
        assert type(qname) is bytes and type(ctime) is int
        self.flush_local(qname, ctime, now)

    def flushall(self) -> None:
        for w in list(self.waiters.values()):
            self._unblock(w)
            if not w.client.closed:
                self.node.outbox.append((w.client, resp.null_bulk(w.client.proto)))
        for e in list(self.events.values()):
            self._remove(e)
        self.events.clear()
        self.queues.clear()
        self.flushed.clear()
        self.tombs.clear()
        self.granted_by.clear()
        self._exp.clear()
        self._leases.clear()

    # ------------------------------------------------------------------ status
    def group_names(self, q: EQueue) -> list[bytes]:
        names: dict[bytes, None] = dict.fromkeys(q.cursors)
        for w in q.waiters:
            names[w.group] = None
        for e in q.order:
            if not e.gone:
                for g in e.claims:
                    names[g] = None
        return sorted(names)

    def stats(self, q: EQueue, groups: list[bytes], now: int) -> dict[bytes, GroupStats]:
        out = {g: GroupStats() for g in groups}
        for e in q.order:
            if e.gone:
                continue
            claims = e.claims
            for g, st in out.items():
                st.total += 1
                s = effective(claims.get(g), now)
                if s == DONE:
                    st.done += 1
                    continue
                if s == AVAILABLE:
                    st.available += 1
                elif s == LEASED:
                    st.inprogress += 1
                elif s == REDO:
                    st.redo += 1
                else:
                    st.dead += 1
                    continue
                ms = e.ctime // 1_000_000
                if not st.oldest or ms < st.oldest:
                    st.oldest = ms
        for w in q.waiters:
            st2 = out.get(w.group)
            if st2 is not None:
                st2.consumers += 1
        return out

    def status(self, names: list[bytes], groups: list[bytes],
               now: int) -> list[tuple[bytes, list[tuple[bytes, GroupStats]]]]:
        if not names:
            names = sorted(n for n, q in self.queues.items() if q.live or q.waiters)
        out: list[tuple[bytes, list[tuple[bytes, GroupStats]]]] = []
        for name in names:
            q = self.queues.get(name)
            if q is None:
                q = EQueue(name, now)  # not kept: a queue nobody uses does not exist
            gs = groups if groups else self.group_names(q)
            st = self.stats(q, gs, now)
            out.append((name, [(g, st[g]) for g in gs]))
        return out

    def info(self) -> list[tuple[str, object]]:
        leases = sum(1 for e in self.events.values() for c in e.claims.values()
                     if c & _STATE_MASK == LEASED)
        return [
            ("events", len(self.events)),
            ("event_queues", len(self.queues)),
            ("events_added", self.added),
            ("events_delivered", self.delivered),
            ("events_acked", self.acked),
            ("events_redone", self.redone),
            ("events_dead_lettered", self.dead),
            ("events_expired", self.expired),
            ("events_repaired", self.repairs),
            ("event_leases", leases),
            ("qnotify_clients", len(self.waiters)),
        ]

    # ---------------------------------------------------------- dead letters
    def dead_letters(self, qname: bytes, group: bytes) -> list[tuple[Event, int]]:
        """The events of ``qname`` held here that ``group`` dead-lettered, oldest first,
        with their delivery counts."""
        q = self.queues.get(qname)
        out: list[tuple[Event, int]] = []
        if q is None:
            return out
        for e in q.order:
            c = e.claims.get(group)
            if not e.gone and c is not None and c & _STATE_MASK == DEAD:
                out.append((e, claim_deliveries(c)))
        return out

    def requeue(self, qname: bytes, group: bytes, ids: list[bytes], now: int) -> int:
        """Give dead-lettered events back to ``group`` (their delivery count starts
        over); on every holder, by EVSTATE. How many were dead letters here."""
        n = 0
        q = self.queues.get(qname)
        for eid in ids:
            e = self.events.get(eid)
            if e is None or q is None or e.queue != qname:
                continue
            c = e.claims.get(group)
            if c is None or c & _STATE_MASK != DEAD:
                continue
            e.claims[group] = pack(REDO, 0, max(now, claim_deadline(c) + 1))
            self._replicate_claim(e, group)
            cur = q.cursors.get(group)
            if cur is not None:
                cur.redo.append(eid)
            n += 1
        if n and q is not None:
            self._wake(q, group, now)
            self._tell_watchers(q, group)
        return n
