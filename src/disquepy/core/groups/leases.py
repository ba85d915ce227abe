"""Leases: QGET, served by an event this node decides for, or asked of peers one at a
time (EVPULL/EVGRANT, as federation moves jobs to consumers); and what happens when a
lease runs out unacknowledged (the event is redone: available to the group again).

Pure: time comes in as ``now`` (ms).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from librt.strings import BytesWriter

from ...codec import resp
from ...codec.resp import length_text
from .. import messages as M
from .model import (
    DONE,
    LEASED,
    REDO,
    STATE_MASK,
    EQueue,
    Lease,
    PullWait,
    claim_deadline,
    claim_deliveries,
    event_reply,
    pack,
)

if TYPE_CHECKING:
    from ..client import Client
    from ..membership import Peer
    from . import Groups

PULL_STEP_MS: Final = 500  # a peer asked to lease an event must answer within this
AUTOACK_LEASE_MS: Final = 5000  # the lease of a QGET EX 0 served by a peer, until its ack comes
GRANTED_MAX: Final = 100_000  # remembered "which peer leased this event to us" entries
SCAN_LIMIT: Final = 10_000  # events one lease looks at, at most (dead letters skipped)
MAX_COUNT: Final = 10_000  # QGET ... COUNT n: events one QGET leases, at most
LEASES_PER_TIMER: Final = 1024  # leases that share one timer, at most (its firing's work)


class Leases:
    def __init__(self, g: Groups) -> None:
        self.g = g
        self.node = g.node
        self.granted_by: dict[bytes, str] = {}  # event -> peer that leased it to us
        self.delivered = 0
        self.redone = 0
        self._last: Lease | None = None  # the timer made last, while it is scheduled

    def timer(self, eid: bytes, group: bytes, deadline: int) -> None:
        """Wake at ``deadline`` to see whether ``group``'s lease on the event ended.
        Leases given together (a QGET COUNT's, an EVCLAIMS's: the same group and
        deadline, one after the other) share one timer: no object and no entry in the
        awake index per event."""
        last = self._last
        if (last is not None and last.deadline == deadline and last.group is group
                and last.awake and len(last.eids) < LEASES_PER_TIMER):
            last.eids.append(eid)
            return
        t = self._last = Lease(self.g.next_seq(), eid, group, deadline)
        self.node.awake.add_new(t, deadline)

    def forget_timers(self) -> None:
        """The node starts a new awake index (DEBUG FLUSHALL): share no old timer."""
        self._last = None

    # ---------------------------------------------------------------- leasing
    def lease_local(self, qname: bytes, group: bytes, lease_ms: int, maxdeliv: int,
                    now: int) -> tuple[bytes, bytes, int] | None:
        """Lease the next event of ``qname`` this node decides for to ``group``:
        (ID, body, deliveries) or None (see _lease)."""
        q = self.g.store.queues.get(qname)
        if q is None:
            return None
        q.atime = now
        pos, eid, deliv = self._lease(q, group, lease_ms, maxdeliv, now)
        if pos < 0:
            return None
        return eid, self.g.store.body_at(q, pos), deliv

    def _lease(self, q: EQueue, group: bytes, lease_ms: int, maxdeliv: int,
               now: int) -> tuple[int, bytes, int]:
        """Lease the next event of ``q`` this node decides for to ``group``: (its
        position, ID, deliveries), position -1 if none. ``lease_ms`` 0 acknowledges it
        at once. An event delivered ``maxdeliv`` times already (0: no limit) goes to the
        group's dead letters instead."""
        g = self.g
        store = g.store
        for _ in range(SCAN_LIMIT):
            pos = store.find(q, group, now, True)
            if pos < 0:
                return -1, b"", 0
            eid = store.id_at(q, pos)
            cur = q.cursors[group]
            if cur.redo and cur.redo[0] == eid:
                cur.redo.popleft()
            old = store.claim_at(q, pos, group)
            deliv = (claim_deliveries(old) if old is not None else 0) + 1
            if not g.dead.exhausted(q, pos, eid, group, old, deliv, maxdeliv, now):
                break
        else:
            return -1, b"", 0
        if lease_ms:
            deadline = now + lease_ms
            c = pack(LEASED, deliv, deadline)
            self.timer(eid, group, deadline)
        else:
            c = pack(DONE, deliv, 0)
            g.acks.acked += 1
        store.put_claim(q, pos, group, c)
        self.delivered += 1
        g.repl.replicate_claim(q, pos, eid, group, c)
        return pos, eid, deliv

    def _lease_batch(self, q: EQueue, group: bytes, lease_ms: int, maxdeliv: int,
                     counters: bool, count: int, now: int) -> bytes | None:
        """QGET ... COUNT n of the events this node decides for: the reply, written
        once for the batch (event_reply's form per entry), or None if none."""
        store = self.g.store
        w = BytesWriter()
        n = 0
        held = count > 1 and self.g.log.hold_claims()  # (the leases' AOF records: one)
        try:
            for _ in range(count):
                pos, eid, deliv = self._lease(q, group, lease_ms, maxdeliv, now)
                if pos < 0:
                    break
                n += 1
                w.write(b"*3\r\n$" if counters else b"*2\r\n$")
                w.write(length_text(len(eid)))
                w.write(b"\r\n")
                w.write(eid)
                w.write(b"\r\n")
                store.write_body(w, q, pos)
                if counters:
                    w.write(b":%d\r\n" % deliv)
        finally:
            if held:
                self.g.log.write_claims()
        if not n:
            return None
        return b"*%d\r\n" % n + w.getvalue()

    def qget(self, client: Client, qname: bytes, group: bytes, lease_ms: int, maxdeliv: int,
             counters: bool, now: int, count: int = 0) -> bytes | None:
        """QGET: the group's next event, leased here if this node decides for one, else
        asked of peers. With ``count`` (COUNT n) up to n events this node decides for,
        as an array of entries; failing any, one asked of peers (``[]`` if none)."""
        group = self.g.store.intern(group)
        if count:
            q = self.g.store.queues.get(qname)
            if q is not None:
                q.atime = now
                out = self._lease_batch(q, group, lease_ms, maxdeliv, counters, count, now)
                if out is not None:
                    return out
        else:
            got = self.lease_local(qname, group, lease_ms, maxdeliv, now)
            if got is not None:
                return event_reply(got[0], got[1], got[2], counters)
        targets, hint = self._pull_targets(qname, group, now)
        if not targets:
            return resp.EMPTY_ARRAY if count else resp.null_array(client.proto)
        # EX 0 from a peer: leased briefly, acked once the grant reached us (an ack at
        # the grant would lose the event for the group if the EVGRANT were lost)
        w = PullWait(client, qname, group, lease_ms or AUTOACK_LEASE_MS, maxdeliv, targets,
                     counters)
        w.hint = hint
        w.autoack = not lease_ms
        w.batch = count > 0
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
        store = self.g.store
        q = store.queues.get(qname)
        if q is not None:
            pos = store.find(q, group, now, False)
            if pos >= 0:
                a = store.authority_of(store.holders_at(q, pos))
                if a != node.myid and a in reach:
                    return [a, *(p for p in reach if p != a)], store.id_at(q, pos)
        return list(reach), None

    def _pull_next(self, w: PullWait, now: int) -> None:
        if not w.targets or w.client.closed:
            if not w.client.closed:
                self.node.outbox.append((w.client, resp.EMPTY_ARRAY if w.batch
                                         else resp.null_array(w.client.proto)))
            return
        self.g.ask(w, now + PULL_STEP_MS)
        self.node.send([w.targets[0]], M.EVPULL, w.req, w.queue, w.group, w.lease,
                       w.maxdeliv)

    def pull_timed_out(self, w: PullWait, now: int) -> None:
        """The peer asked did not answer in time: the next one."""
        w.targets.pop(0)
        self._pull_next(w, now)

    def on_evpull(self, p: Peer, fields: M.Fields, now: int) -> None:
        req, qname, group, lease, maxdeliv = fields
        got = self.lease_local(qname, self.g.store.intern(group), lease, maxdeliv, now)
        self.node.send([p.id], M.EVGRANT, req,
                       None if got is None else list(got))

    def on_evgrant(self, p: Peer, fields: M.Fields, now: int) -> None:
        req, grant = fields
        w = self.g.answered(req)
        if not isinstance(w, PullWait) or not w.targets or w.targets[0] != p.id:
            return  # late: the lease runs out unused and the event is redone
        self.g.done(w)
        if grant is None:
            w.targets.pop(0)
            if w.hint is not None:
                self.g.repl.repair(w.hint, p.id)
                w.hint = None
            self._pull_next(w, now)
            return
        eid, body, deliv = grant
        gb = self.granted_by
        gb[eid] = p.id
        if len(gb) > GRANTED_MAX:
            del gb[next(iter(gb))]
        if not w.client.closed:
            reply = event_reply(eid, body, deliv, w.counters)
            self.node.outbox.append((w.client, b"*1\r\n" + reply if w.batch else reply))
            if w.autoack:
                self.node.send([p.id], M.EVACK, 0, w.queue, w.group, eid, 0)

    # ------------------------------------------------------------ lease ends
    def ended(self, t: Lease, now: int) -> None:
        """A lease timer fired: each of its leases still the one it was set for ran out
        unacknowledged; the authority redoes the event, every holder wakes its
        consumers."""
        if self._last is t:
            self._last = None
        for eid in t.eids:
            self._ended(eid, t.group, t.deadline, now)

    def _ended(self, eid: bytes, group: bytes, deadline: int, now: int) -> None:
        g = self.g
        store = g.store
        if store.flushed.get((eid, group)) == deadline:
            del store.flushed[(eid, group)]  # a lease held across a QFLUSH ended
        q, pos = store.locate(eid)
        if q is None:
            return
        c = store.claim_at(q, pos, group)
        if c is None or c & STATE_MASK != LEASED or claim_deadline(c) != deadline:
            return
        if store.authority_of(store.holders_at(q, pos)) == self.node.myid:
            self.redone += 1
            c = pack(REDO, claim_deliveries(c), deadline)
            store.put_claim(q, pos, group, c)
            g.repl.replicate_claim(q, pos, eid, group, c)
        cur = q.cursors.get(group)
        if cur is not None:
            cur.redo.append(eid)
        g.notify.wake(q, group, now)
        g.notify.tell_watchers(q, group)
