"""Acknowledgements of events: QACK (and QWORKING, which extends a lease instead),
decided by the event's authority, here or asked over the bus (EVACK/EVACKED).

Pure: time comes in as ``now`` (ms).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...codec import resp
from .. import messages as M
from .model import DONE, LEASED, AckWait, EQueue, claim_deadline, claim_deliveries, effective, pack

if TYPE_CHECKING:
    from ..client import Client
    from ..membership import Peer
    from . import Groups

ACK_TIMEOUT_MS = 1000  # peers asked to decide a QACK must answer within this


class EventAcks:
    def __init__(self, g: Groups) -> None:
        self.g = g
        self.node = g.node
        self.acked = 0

    def decide(self, q: EQueue, pos: int, eid: bytes, group: bytes, extend_ms: int,
               now: int) -> int:
        """As the authority: acknowledge ``group``'s live lease on the event ``eid``
        (at ``pos`` of ``q``; extend_ms 0), or extend it to ``extend_ms`` from now
        (never shortened). 1 done, 0 no live lease (ran out, acked, never leased)."""
        store = self.g.store
        c = store.claim_at(q, pos, group)
        if c is None or effective(c, now) != LEASED:
            return 0
        if extend_ms:
            deadline = max(claim_deadline(c), now + extend_ms)
            c = pack(LEASED, claim_deliveries(c), deadline)
            self.g.leases.timer(eid, group, deadline)
        else:
            c = pack(DONE, claim_deliveries(c), 0)
            self.acked += 1
        store.put_claim(q, pos, group, c)
        self.g.repl.replicate_claim(q, pos, eid, group, c)
        return 1

    def qack(self, client: Client, qname: bytes, group: bytes, eid: bytes, extend_ms: int,
             now: int) -> bytes | None:
        """QACK (``extend_ms`` 0) and QWORKING: decided by the event's authority, here
        or asked over the bus."""
        g = self.g
        store = g.store
        if store.flushed_lease(eid, group, extend_ms, now):
            return resp.ONE
        q, pos = store.locate(eid)
        if q is not None and q.name != qname:
            return resp.ZERO
        if q is not None:
            a = store.authority_of(store.holders_at(q, pos))
            if a == self.node.myid:
                return resp.ONE if self.decide(q, pos, eid, group, extend_ms, now) \
                    else resp.ZERO
            targets = [a]
        elif eid in g.leases.granted_by:
            targets = [g.leases.granted_by[eid]]
        else:
            targets = list(self.node.members.reach_ids)
        targets = [t for t in targets if t in self.node.members.peers]
        if not targets:
            return resp.ZERO
        w = AckWait(client, set(targets), eid, extend_ms)
        g.ask(w, now + ACK_TIMEOUT_MS)
        self.node.send(targets, M.EVACK, w.req, qname, group, eid, extend_ms)
        return None

    def on_evack(self, p: Peer, fields: M.Fields, now: int) -> None:
        req, qname, group, eid, extend_ms = fields
        store = self.g.store
        verdict = 2
        if store.flushed_lease(eid, group, extend_ms, now):
            verdict = 1
        else:
            q, pos = store.locate(eid)
            if q is not None and q.name == qname and store.authority_of(
                    store.holders_at(q, pos)) == self.node.myid:
                verdict = self.decide(q, pos, eid, store.intern(group), extend_ms, now)
        self.node.send([p.id], M.EVACKED, req, verdict)

    def on_evacked(self, p: Peer, fields: M.Fields, now: int) -> None:
        req, verdict = fields
        w = self.g.answered(req)
        if not isinstance(w, AckWait):
            return
        w.waiting.discard(p.id)
        if verdict == 1 or not w.waiting:
            self.g.done(w)
            if not w.extend:
                self.g.leases.granted_by.pop(w.eid, None)
            if not w.client.closed:
                self.node.outbox.append((w.client, resp.ONE if verdict == 1 else resp.ZERO))

    def timed_out(self, w: AckWait) -> None:
        """The peers asked did not all answer in time: 0."""
        if not w.client.closed:
            self.node.outbox.append((w.client, resp.ZERO))
