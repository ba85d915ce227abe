"""The events a node holds (as jobstore.py is for jobs): by ID and by queue, in
arrival order, their expiry, the claims merged into them, QFLUSH's drop, and the scan
that finds the next event available to a group (with who decides for it: the
*authority*).

Pure: time comes in as ``now`` (ms).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..membership import P_FAIL, P_PFAIL
from .model import (
    AVAILABLE,
    CLAIM_OVERHEAD,
    GONE,
    HELD,
    LEASED,
    REDO,
    STATE_MASK,
    Cursor,
    EQueue,
    Event,
    claim_deadline,
    effective,
    merge,
)

if TYPE_CHECKING:
    from . import Groups

TAKEOVER_MS = 1000  # a holder whose link stayed down this long (at most half the node
#                    timeout) decides for nothing: a crashed node's events are served then
SCAN_BUDGET = 10_000  # events one QGET looks at, at most, past its group's cursor
TOMBSTONE_MS = 600_000  # a QFLUSH refuses copies of older events this long


class EventStore:
    """The node's events and queues of events."""

    def __init__(self, g: Groups) -> None:
        self.g = g
        self.node = g.node
        self.events: dict[bytes, Event] = {}
        self.queues: dict[bytes, EQueue] = {}
        self.flushed: dict[tuple[bytes, bytes], int] = {}  # (event, group) -> lease end
        self.tombs: dict[bytes, tuple[int, int]] = {}  # queue -> (flushed ctime ns, until)
        self.keys: dict[bytes, Event] = {}  # IDEMPOTENT key -> its event (held or ADDING)
        self.expired = 0

    # ------------------------------------------------------------------ names
    def intern(self, name: bytes) -> bytes:
        """One object per group name (events hold a claim per group)."""
        return self.node.shared(name)

    def holders(self, t: tuple[str, ...]) -> tuple[str, ...]:
        """One tuple per distinct list of holders."""
        return self.node.shared(t)

    # ------------------------------------------------------------------ events
    def queue_for(self, name: bytes, now: int) -> EQueue:
        q = self.queues.get(name)
        if q is None:
            q = self.queues[name] = EQueue(name, now)
        return q

    def put(self, e: Event, now: int) -> None:
        """Hold ``e`` (new here): in its queue's order, expiring at its etime."""
        q = self.queue_for(e.queue, now)
        e.queue = q.name
        e.stage = HELD
        self.events[e.id] = e
        q.order.append(e)
        q.live += 1
        self.node.mem.used += e.cost()
        if e.key is not None:
            self.keys[e.key] = e
        self.node.awake.schedule(e, e.etime)
        self.g.log.held(e)

    def remove(self, e: Event) -> None:
        if e.stage == GONE:
            return
        held = e.stage == HELD
        e.stage = GONE
        self.node.awake.cancel(e)
        if e.key is not None and self.keys.get(e.key) is e:
            del self.keys[e.key]
        if not held:
            return
        self.events.pop(e.id, None)
        self.node.mem.used -= e.cost()
        e.body = b""
        e.claims = {}
        q = self.queues.get(e.queue)
        if q is None:
            return
        q.live -= 1
        order = q.order
        k = 0
        while k < len(order) and order[k].stage == GONE:
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
            if e.stage != GONE:
                keep.append(e)
        newpos.append(len(keep))
        base = q.base
        for cur in q.cursors.values():
            i = cur.pos - base
            cur.pos = base + newpos[min(max(i, 0), len(order))]
            i = cur.mine_pos - base
            cur.mine_pos = base + newpos[min(max(i, 0), len(order))]
        q.order = keep

    def expire(self, e: Event, now: int) -> None:
        """``e``'s timer fired: it expired."""
        if e.stage == HELD and e.etime <= now:
            self.expired += 1
            self.remove(e)

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
        self.g.log.claim(e, group)
        if new & STATE_MASK == LEASED:
            self.g.leases.timer(e.id, group, claim_deadline(new))
        elif new & STATE_MASK == REDO:
            q = self.queues.get(e.queue)
            if q is not None:
                cur = q.cursors.get(group)
                if cur is not None:
                    cur.redo.append(e.id)
                self.g.notify.wake(q, group, now)

    # ------------------------------------------------------------------- flush
    def flush_local(self, qname: bytes, ctime: int, now: int) -> None:
        """Drop the events of ``qname``; leases held on them may still be acked (1)
        until they end, and are never given back."""
        old = self.tombs.get(qname)
        if old is None or old[0] < ctime:
            self.tombs[qname] = (ctime, now + TOMBSTONE_MS)
        self.g.log.flushed(qname, ctime)
        q = self.queues.get(qname)
        if q is None:
            return
        for e in list(q.order):
            if e.stage == GONE:
                continue
            for g, c in e.claims.items():
                if effective(c, now) == LEASED:
                    self.flushed[(e.id, g)] = claim_deadline(c)
            self.remove(e)
        q.cursors.clear()  # as if the queue never existed
        if not q.waiters and not q.watchers:
            del self.queues[qname]

    def flushed_lease(self, eid: bytes, group: bytes, extend_ms: int, now: int) -> bool:
        """A lease held across a QFLUSH: acked (forgotten) or extended, if still live."""
        key = (eid, group)
        until = self.flushed.get(key)
        if until is None or until <= now:
            return False
        if extend_ms:
            self.flushed[key] = until = max(until, now + extend_ms)
            self.g.leases.timer(eid, group, until)
        else:
            del self.flushed[key]
        return True

    def refused(self, qname: bytes, ctime: int) -> bool:
        """A copy of an event created before its queue was flushed: not held."""
        tomb = self.tombs.get(qname)
        return tomb is not None and ctime <= tomb[0]

    def cron(self, now: int) -> None:
        for name, (_, until) in list(self.tombs.items()):
            if until <= now:
                del self.tombs[name]

    def clear(self) -> None:
        for e in list(self.events.values()):
            self.remove(e)
        self.events.clear()
        self.queues.clear()
        self.flushed.clear()
        self.tombs.clear()
        self.keys.clear()

    # ---------------------------------------------------------------- authority
    def takeover_ms(self) -> int:
        return max(100, min(TAKEOVER_MS, self.node.config.cluster_node_timeout // 2))

    def authority(self, e: Event) -> str:
        """The holder that decides for ``e``: the first holder not failing, this node
        if all the others are. Failing: FAIL; or, if this node reaches a majority of
        the cluster, flagged PFAIL (its own suspicion) or our link to it broke and
        could not be made again for takeover_ms() (a process that died refuses
        connections at once; a live one is reconnected in a few ms). Taking over
        then, not at the majority's FAIL a node timeout or more later, serves a
        crashed node's events within a second. The price is for a node cut off but
        alive on the minority side: the majority leases its events while it may
        still lease them to its side (as with FAIL, sooner); the minority side never
        takes over early. In a healthy cluster no link stays down."""
        node = self.node
        myid = node.myid
        peers = node.members.peers
        # only a node that reaches a majority takes over before FAIL (which needs one):
        # the minority side of a partition leaves the majority's events alone
        quick = 2 * (node.reachable + 1) > node.size
        for h in e.delivered:
            if h == myid:
                return h
            p = peers.get(h)
            if p is None or p.flags & P_FAIL:
                continue
            if not quick or not p.flags & P_PFAIL and (
                    p.link or not p.pong_received
                    or node.now - p.link_down_since < self.takeover_ms()):
                return h
        return myid

    def mine(self, e: Event) -> bool:
        return self.authority(e) == self.node.myid

    def leasable(self, e: Event) -> bool:
        """Whether this node leases ``e`` now: its authority, caught up (sync.py)."""
        return self.authority(e) == self.node.myid and not self.g.sync.blocks(e)

    def rescan(self) -> None:
        """What this node may lease changed other than by reachability: every scan
        starts over."""
        for q in self.queues.values():
            for cur in q.cursors.values():
                cur.reach = None

    # ------------------------------------------------------------ availability
    def cursor(self, q: EQueue, group: bytes) -> Cursor:
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

    def find(self, q: EQueue, group: bytes, now: int, only_mine: bool) -> Event | None:
        """The next event available to ``group`` in ``q`` (leasable here when
        ``only_mine``), redo first, then in arrival order; advances the cursor past
        what no longer needs a look."""
        cur = self.cursor(q, group)
        redo = cur.redo
        k = 0
        while k < len(redo):
            e = self.events.get(redo[k])
            if e is None or e.queue != q.name or effective(e.claims.get(group),
                                                           now) not in (REDO, AVAILABLE):
                del redo[k]  # gone, leased again, done or dead: no longer to redo
                continue
            if not only_mine or self.leasable(e):
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
            if e.stage != GONE:
                st = effective(e.claims.get(group), now)
                if st in (AVAILABLE, REDO):
                    if not only_mine or self.leasable(e):
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
        return self.find(q, group, now, False) is not None
