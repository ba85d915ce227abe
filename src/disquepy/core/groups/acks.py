"""Acknowledgements of events: QACK (and QWORKING, which extends a lease instead) of
one or more events, each decided by its authority, here or asked over the bus (EVACK
/EVACKED for one ID, EVACKS/EVACKEDS for several to one peer).

Pure: time comes in as ``now`` (ms).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ...codec import resp
from .. import messages as M
from .model import DONE, LEASED, AckWait, EQueue, claim_deadline, claim_deliveries, effective, pack

if TYPE_CHECKING:
    from ..client import Client
    from ..membership import Peer
    from . import Groups

ACK_TIMEOUT_MS: Final = 1000  # peers asked to decide a QACK must answer within this


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

    def qack(self, client: Client, qname: bytes, group: bytes, eids: list[bytes],
             extend_ms: int, now: int) -> bytes | None:
        """QACK (``extend_ms`` 0) and QWORKING of one or more events: how many live
        leases ended (were extended). Each event is decided by its authority: here at
        once, or asked over the bus, one message per peer for all the IDs it decides
        (an event not held here: the peer that leased it to us, else every reachable
        peer). The reply once every ID is decided (a peer said 1, or every peer asked
        about it answered), or after ACK_TIMEOUT_MS with what was decided by then. An
        ID given twice counts once."""
        g = self.g
        held = len(eids) > 1 and g.log.hold_claims()  # (the claims' AOF records: one)
        try:
            count, asked = self._here(qname, group, eids, extend_ms, now)
        finally:
            if held:
                g.log.write_claims()
        if not asked:
            return resp.integer(count)
        w = AckWait(client, asked, count, extend_ms)
        opened = w.open
        for ids in asked.values():
            for eid in ids:
                opened[eid] = opened.get(eid, 0) + 1
        g.ask(w, now + ACK_TIMEOUT_MS)
        send = self.node.send
        for pid, ids in asked.items():
            if len(ids) == 1:  # (the message every version knows)
                w.parts.add((pid, 0))
                send([pid], M.EVACK, w.req, qname, group, ids[0], extend_ms)
                continue
            for i in range(0, len(ids), M.MAX_ITEMS):
                w.parts.add((pid, i))
                send([pid], M.EVACKS, w.req, qname, group, extend_ms, i, ids[i:i + M.MAX_ITEMS])
        return None

    def _here(self, qname: bytes, group: bytes, eids: list[bytes], extend_ms: int,
              now: int) -> tuple[int, dict[str, list[bytes]]]:
        """Decide the events this node decides for: how many leases ended, and the IDs
        to ask of each peer."""
        g = self.g
        store = g.store
        locate = store.locate
        myid = self.node.myid
        peers = self.node.members.peers
        granted_by = g.leases.granted_by
        count = 0
        asked: dict[str, list[bytes]] = {}
        reach: list[str] | None = None
        flushed = store.flushed  # (leases held across a QFLUSH: rare)
        hq = store.queues.get(qname)
        for eid in dict.fromkeys(eids) if len(eids) > 1 else eids:
            if flushed and store.flushed_lease(eid, group, extend_ms, now):
                count += 1
                continue
            q, pos = locate(eid) if hq is None else store.locate_near(hq, eid)
            targets: list[str]
            if q is not None:
                if q.name != qname:
                    continue
                a = store.authority_of(store.holders_at(q, pos))
                if a == myid:
                    count += self.decide(q, pos, eid, group, extend_ms, now)
                    continue
                targets = [a]
            elif eid in granted_by:
                targets = [granted_by[eid]]
            else:
                if reach is None:
                    reach = list(self.node.members.reach_ids)
                targets = reach
            for t in targets:
                if t in peers:
                    asked.setdefault(t, []).append(eid)
        return count, asked

    def _verdict(self, qname: bytes, group: bytes, eid: bytes, extend_ms: int,
                 now: int) -> int:
        """A peer asks: 1 acked (extended), 0 no live lease, 2 not mine to decide."""
        store = self.g.store
        if store.flushed_lease(eid, group, extend_ms, now):
            return 1
        q, pos = store.locate(eid)
        if q is not None and q.name == qname and store.authority_of(
                store.holders_at(q, pos)) == self.node.myid:
            return self.decide(q, pos, eid, group, extend_ms, now)
        return 2

    def on_evack(self, p: Peer, fields: M.Fields, now: int) -> None:
        req, qname, group, eid, extend_ms = fields
        verdict = self._verdict(qname, self.g.store.intern(group), eid, extend_ms, now)
        self.node.send([p.id], M.EVACKED, req, verdict)

    def on_evacks(self, p: Peer, fields: M.Fields, now: int) -> None:
        req, qname, group, extend_ms, first, eids = fields
        g = self.g
        group = g.store.intern(group)
        held = g.log.hold_claims()
        try:
            verdicts = [self._verdict(qname, group, eid, extend_ms, now) for eid in eids]
        finally:
            if held:
                g.log.write_claims()
        self.node.send([p.id], M.EVACKEDS, req, first, verdicts)

    def on_evacked(self, p: Peer, fields: M.Fields, now: int) -> None:
        req, verdict = fields
        self._answered(p.id, req, 0, [verdict])

    def on_evackeds(self, p: Peer, fields: M.Fields, now: int) -> None:
        req, first, verdicts = fields
        self._answered(p.id, req, first, verdicts)

    def _answered(self, pid: str, req: int, first: int, verdicts: list[int]) -> None:
        """Peer ``pid`` decided the IDs asked of it from index ``first``."""
        w = self.g.answered(req)
        if not isinstance(w, AckWait) or (pid, first) not in w.parts:
            return  # late, repeated, or not asked
        w.parts.discard((pid, first))
        opened = w.open
        for eid, verdict in zip(w.asked[pid][first:first + len(verdicts)], verdicts,
                                strict=False):
            n = opened.get(eid)
            if n is None:
                continue  # decided already (another peer said 1)
            if verdict == 1:
                w.count += 1
                del opened[eid]
            elif n == 1:
                del opened[eid]
            else:
                opened[eid] = n - 1
        if not w.parts or not opened:
            self.g.done(w)
            if not w.extend:
                granted_by = self.g.leases.granted_by
                for ids in w.asked.values():
                    for eid in ids:
                        granted_by.pop(eid, None)
            self.timed_out(w)

    def timed_out(self, w: AckWait) -> None:
        """Every ID is decided, or the time ran out: the reply, the leases ended (or
        extended) so far (an ID whose peers did not answer counts 0)."""
        if not w.client.closed:
            self.node.outbox.append((w.client, resp.integer(w.count)))
