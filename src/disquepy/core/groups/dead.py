"""Dead letters: an event delivered a group's MAXDELIVERIES times without an ack is not
delivered to that group again; QDEAD lists a group's dead letters and gives them back.

Pure: time comes in as ``now`` (ms).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .model import DEAD, REDO, STATE_MASK, EQueue, Event, claim_deadline, claim_deliveries, pack

if TYPE_CHECKING:
    from . import Groups


class DeadLetters:
    def __init__(self, g: Groups) -> None:
        self.g = g
        self.node = g.node
        self.dead = 0

    def exhausted(self, q: EQueue, pos: int, eid: bytes, group: bytes, old: int | None,
                  deliv: int, maxdeliv: int, now: int) -> bool:
        """Before a lease of the event ``eid`` (at ``pos`` of ``q``) to ``group`` (its
        ``deliv``-th delivery): past the group's ``maxdeliv`` (0: no limit) it becomes
        a dead letter instead (True), on every holder."""
        if not maxdeliv or deliv <= maxdeliv or old is None:
            return False
        c = pack(DEAD, deliv - 1, now)
        self.g.store.put_claim(q, pos, group, c)
        self.dead += 1
        self.g.repl.replicate_claim(q, pos, eid, group, c)
        return True

    def letters(self, qname: bytes, group: bytes) -> list[tuple[Event, int]]:
        """The events of ``qname`` held here that ``group`` dead-lettered, oldest first,
        with their delivery counts."""
        q = self.g.store.queues.get(qname)
        out: list[tuple[Event, int]] = []
        if q is None:
            return out
        store = self.g.store
        for pos in store.positions(q):
            c = store.claim_at(q, pos, group)
            if c is not None and c & STATE_MASK == DEAD:
                out.append((store.view_at(q, pos), claim_deliveries(c)))
        return out

    def requeue(self, qname: bytes, group: bytes, ids: list[bytes], now: int) -> int:
        """Give dead-lettered events back to ``group`` (their delivery count starts
        over); on every holder, by EVSTATE. How many were dead letters here."""
        g = self.g
        n = 0
        q = g.store.queues.get(qname)
        store = g.store
        for eid in ids:
            lq, pos = store.locate(eid)
            if lq is None or q is None or lq is not q:
                continue
            c = store.claim_at(q, pos, group)
            if c is None or c & STATE_MASK != DEAD:
                continue
            c = pack(REDO, 0, max(now, claim_deadline(c) + 1))
            store.put_claim(q, pos, group, c)
            g.repl.replicate_claim(q, pos, eid, group, c)
            cur = q.cursors.get(group)
            if cur is not None:
                cur.redo.append(eid)
            n += 1
        if n and q is not None:
            g.notify.wake(q, group, now)
            g.notify.tell_watchers(q, group)
        return n
