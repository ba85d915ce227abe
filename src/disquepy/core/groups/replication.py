"""Events' copies on other nodes: QADD through the node's one replication mechanism
(core/replication.py, the one ADDJOB uses: EVADD copies to R-1 reachable peers, one
more every 50 ms while short, the reply once R nodes confirmed with GOTJOB, NOREPL and
EVDEL past the deadline), copies held on arrival, read repair, the claims changes sent
to every holder (EVSTATE) and QFLUSH's EVFLUSH.

Pure: time comes in as ``now`` (ms).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from mypy_extensions import i64

from ...codec import resp
from .. import errors
from .. import messages as M
from ..errors import ReplyError
from ..eventcodec import event_fields
from ..ids import event_id, event_id_reply
from ..replication import COPIES_UP_TO
from .model import ADDING, LEASED, STATE_MASK, EQueue, Event, claim_deadline, merge

if TYPE_CHECKING:
    from ..client import Client
    from ..eventcodec import EventFields
    from ..membership import Peer
    from ..record import Record
    from . import Groups

QADD_TIMEOUT_MS: Final = 5000  # a QADD waiting for its copies gives up (NOREPL) after this


class EventReplication:
    def __init__(self, g: Groups) -> None:
        self.g = g
        self.node = g.node
        self.adding: dict[bytes, Event] = {}  # QADDs waiting for their copies, by event ID
        self.added = 0
        self.repairs = 0
        self._suffix = b""  # node.event_suffix, and the creator number it says
        self._creator: i64 = -1

    # --------------------------------------------------------------------- QADD
    def qadd(self, client: Client, qname: bytes, expire_ms: int, body: bytes, noblock: bool,
             now: int, key: bytes | None = None) -> bytes | None:
        """QADD: a new event, with copies on R-1 other nodes before the reply (NOBLOCK:
        at once, copies in the background). With an IDEMPOTENT ``key`` already used
        for an event held here, that event's ID instead (see :meth:`_again`)."""
        node = self.node
        store = self.g.store
        repl = node.default_replicate if node.clustered else 1
        need = repl - 1
        if key is not None:
            old = store.keys.get(key)
            if old is not None:
                return self._again(old, client, noblock, need, now)
        if need > node.reachable and not noblock:
            raise ReplyError(errors.NOREPL)
        targets = node.repl.choose(need)
        ctime = node.next_ctime(now)
        sx = node.event_suffix
        if not targets and key is None:  # no copies to wait for: no Event object
            if sx is not self._suffix:
                self._suffix, self._creator = sx, int(sx[1:], 16)
            # the ID is made as the reply (no bytes of its own) unless the AOF's record
            # needs it too: then once, for both
            eid0 = event_id(ctime, sx) if node.aof.on else None
            q = store.put_new(qname, body, ctime, now + expire_ms, self._creator, now, eid0)
            if q is not None:
                self.added += 1
                self.g.notify.arrived_in(q, now)
                if noblock:
                    return resp.OK
                return event_id_reply(ctime, sx) if eid0 is None else resp.bulk(eid0)
        eid = event_id(ctime, sx)
        e = Event(eid, qname, body, ctime, now + expire_ms,
                  store.holders((node.myid, *targets)))
        e.repl = repl
        if key is not None:
            e.key = key
            store.keys[key] = e
        self.added += 1
        if targets:
            self.send_copy(e, targets)
        if noblock or not targets:
            store.put(e, now)
            self.g.notify.arrived(e, now)
            return resp.OK if noblock else resp.bulk(eid)
        self.adding[eid] = e
        node.repl.wait(e, client, now + min(QADD_TIMEOUT_MS, expire_ms), False, now)
        return None

    def _again(self, e: Event, client: Client, noblock: bool, need: int,
               now: int) -> bytes | None:
        """A QADD with the IDEMPOTENT key of ``e``: its ID, never a second event. An
        event this node created whose copies are still short (its QADD got NOREPL:
        kept, see add_failed) gets them made first, as a new QADD would."""
        if e.id in self.adding:
            raise ReplyError(errors.EV_IDEM_BUSY)
        if noblock:
            return resp.OK
        if not e.confirmed or len(e.confirmed) >= e.repl or e.delivered[0] != self.node.myid:
            return resp.bulk(e.id)  # (replicated: confirmed emptied)
        if need > self.node.reachable:
            raise ReplyError(errors.NOREPL)
        self.adding[e.id] = e
        self.node.repl.wait(e, client, now + min(QADD_TIMEOUT_MS, e.etime - now), False, now)
        return None

    def send_copy(self, rec: Record, dsts: list[str]) -> None:
        """The replication's hook: send ``dsts`` (sorted) a copy of the event."""
        assert isinstance(rec, Event)
        self.node.send_item(dsts, M.EVADD, event_fields(rec), len(rec.body))

    def replicated(self, e: Record, client: Client | None, now: int) -> None:
        """The replication's hook: R nodes hold ``e``: held here, the QADD answered."""
        assert isinstance(e, Event)
        self.adding.pop(e.id, None)
        e.confirmed = ()  # (matters while replicating only, as for jobs)
        if e.stage == ADDING:
            if e.etime > now and not self.g.store.has(e.id):
                self.g.store.put(e, now)
                self.g.notify.arrived(e, now)
            else:
                self.g.store.remove(e)
        if client is not None and not client.closed:
            self.node.outbox.append((client, resp.bulk(e.id)))

    def add_failed(self, e: Record) -> None:
        """The replication's hook: the copies were not made in time (its client gets
        NOREPL): those made are dropped; but an event with an IDEMPOTENT key is kept
        (held here, with the copies made): the producer's retry with the key gets its
        ID, never a second event, whichever copies the first try left."""
        assert isinstance(e, Event)
        self.adding.pop(e.id, None)
        now = self.node.now
        if e.key is not None and (e.stage != ADDING or e.etime > now):
            if e.stage == ADDING:
                self.g.store.put(e, now)
                self.g.notify.arrived(e, now)
            return
        self.g.store.remove(e)
        myid = self.node.myid
        self.node.send(sorted(h for h in e.delivered if h != myid), M.EVDEL, e.id)

    # ----------------------------------------------------------------- copies
    def on_evadd(self, p: Peer, fields: M.Fields, now: int) -> None:
        """Copies to hold (a new event, a read repair): GOTJOB for each held, in one
        message. A copy of an event held already tells the sender's claims: merged,
        and what this node knows better goes back (anti-entropy: a lost EVSTATE heals
        here)."""
        g = self.g
        store = g.store
        node = self.node
        got: list[bytes] = []
        for f in fields:  # EventFields, decoded and checked by messages.parse
            eid = f.id
            g.seen(f.ctime, now)
            got.append(eid)
            q, pos = store.locate(eid)
            if q is not None:
                store.set_holders(q, pos, store.holders(tuple(dict.fromkeys(
                    [*store.holders_at(q, pos), *f.holders]))))
                theirs = {store.intern(gr): c for gr, c in f.claims}
                for gr, c in theirs.items():
                    store.set_claim(q, pos, gr, c, now)
                for gr, c in store.claims_at(q, pos).items():
                    if theirs.get(gr) != c:
                        node.send_item([p.id], M.EVSTATE, [eid, gr, c])
                continue
            known = self.adding.get(eid)  # ours, a copy sent back before confirmed
            if known is not None:
                known.delivered = store.holders(tuple(dict.fromkeys(
                    [*known.delivered, *f.holders])))
                theirs = {store.intern(gr): c for gr, c in f.claims}
                for gr, c in theirs.items():
                    known.claims[gr] = merge(known.claims.get(gr), c)
                for gr, c in known.claims.items():
                    if theirs.get(gr) != c:
                        node.send_item([p.id], M.EVSTATE, [eid, gr, c])
                continue
            if f.etime <= now or store.refused(f.queue, f.ctime):
                continue
            if not node.mem.fits_job(len(f.body), COPIES_UP_TO):
                got.pop()  # not held (as a job copy past 75% of maxmemory): not counted
                continue
            self._hold(f, now)
        if got:
            node.send_items([p.id], M.GOTJOB, got)

    def _hold(self, f: EventFields, now: int) -> None:
        g = self.g
        store = g.store
        myid = self.node.myid
        hs = f.holders if myid in f.holders else (*f.holders, myid)
        e = Event(f.id, f.queue, f.body, f.ctime, f.etime, store.holders(hs))
        e.key = f.key
        for gr, c in f.claims:
            gr = store.intern(gr)
            e.claims[gr] = c
            if c & STATE_MASK == LEASED:  # (every LEASED claim held has its timer)
                g.leases.timer(f.id, gr, claim_deadline(c))
        store.put(e, now)
        g.notify.arrived(e, now)

    def on_evdel(self, p: Peer, fields: M.Fields, now: int) -> None:
        e = self.g.store.peek(fields[0])
        if e is not None:
            self.g.store.remove(e)
            self.g.log.dropped(e.id)

    def repair(self, eid: bytes, nid: str) -> None:
        """``nid`` decides for an event we know is available, yet leased us nothing: it
        may have lost its copy (a restart: events live in memory). Send it ours, with
        the claims we know; a node that holds it merges them (a join: no harm)."""
        e = self.g.store.peek(eid)
        if e is not None and self.g.store.authority(e) == nid:
            self.repairs += 1
            self.node.send([nid], M.EVADD, event_fields(e))

    # ----------------------------------------------------------------- claims
    def replicate_claim(self, q: EQueue, pos: int, eid: bytes, group: bytes,
                        claim: int) -> None:
        """``group``'s claim on the event ``eid`` (at ``pos`` of ``q``) changed here to
        ``claim``: in the AOF, and every other holder merges it."""
        self.g.log.claim(eid, group, claim)
        myid = self.node.myid
        hs = self.g.store.holders_at(q, pos)
        if len(hs) == 1 and hs[0] == myid:
            return  # (held here alone)
        dsts = sorted(h for h in hs if h != myid)
        if dsts:
            self.node.send_item(dsts, M.EVSTATE, [eid, group, claim])

    def on_evstate(self, p: Peer, fields: M.Fields, now: int) -> None:
        store = self.g.store
        held = len(fields) > 1 and self.g.log.hold_claims()  # (their AOF records: one)
        try:
            for eid, group, claim in fields:
                q, pos = store.locate(eid)
                if q is not None:
                    store.set_claim(q, pos, store.intern(group), claim, now)
        finally:
            if held:
                self.g.log.write_claims()

    # ------------------------------------------------------------------ flush
    def qflush(self, qname: bytes, now: int) -> bytes:
        ctime = self.node.next_ctime(now)
        self.g.store.flush_local(qname, ctime, now)
        peers = self.node.members.known_peers()
        if peers:
            self.node.send(peers, M.EVFLUSH, qname, ctime)
        return resp.OK

    def on_evflush(self, p: Peer, fields: M.Fields, now: int) -> None:
        qname, ctime = fields
        self.g.seen(ctime, now)
        self.g.store.flush_local(qname, ctime, now)
