"""Events in the node's AOF, with the jobs (as core/persistence.py is for jobs): the
records of an event's life (aofrecords.py: EVENT(S), EVCLAIM(S), EVDEL, EVFLUSH),
what a rewrite writes for the events held, and the replay at start.

Records go to ``node.aof.out`` with the jobs' records, so they share the AOF's fsync
policy and its group commit: the shell writes (and syncs) them before the replies and
the bus frames of the same loop iteration leave. A QADD's reply, and a copy's GOTJOB,
are thus never sent before the event is on disk (as ADDJOB's); nor a QACK's 1 before
its claim is.

Pure: time comes in as ``now`` (ms).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .. import aofrecords as records
from ..eventcodec import EventFields, event_fields, fields_of
from ..ids import event_id
from .model import LEASED, STATE_MASK, Event, claim_deadline, merge
from .store import TOMBSTONE_MS, IdList

if TYPE_CHECKING:
    from . import Groups


class EventLog:
    def __init__(self, g: Groups) -> None:
        self.g = g
        self.node = g.node
        self.loaded = 0  # events the last load brought back
        self._claims: list[list[object]] | None = None  # held: see hold_claims()

    # --- the running log ------------------------------------------------------------
    def held(self, e: Event) -> None:
        """``e`` is held here (new, or its copy arrived), with its claims: its record
        goes with the others of the batch (Persistence.gather_event)."""
        aof = self.node.aof
        if aof.on:
            aof.gather_event(event_fields(e), len(e.body))

    def held_new(self, eid: bytes | None, queue: bytes, body: bytes, ctime: int,
                 etime: int, holders: tuple[str, ...]) -> None:
        """:meth:`held`, for a new event of this node's held with no object
        (EventStore.put_new); its ID, or None (made here if the AOF needs it). The
        record's fields share the holders' tuple and an empty tuple of claims: they are
        only encoded."""
        aof = self.node.aof
        if aof.on:
            if eid is None:
                eid = event_id(ctime, self.node.event_suffix)
            aof.gather_event(fields_of(eid, queue, body, ctime, etime, holders, ()),
                             len(body))

    def claim(self, eid: bytes, group: bytes, claim: int) -> None:
        """``group``'s claim on the event ``eid`` changed here to ``claim``."""
        if self.node.aof.on:
            change: list[object] = [eid, group, claim]
            if self._claims is not None:
                self._claims.append(change)
            else:
                self.node.aof.out.append(records.encode_event_record(records.EVCLAIM, change))

    def hold_claims(self) -> bool:
        """From now until :meth:`write_claims`, the claims changed go to the AOF as one
        EVCLAIMS record (one command's: a QGET ... COUNT, a QACK of several IDs, an
        EVSTATE received): one encoding and CRC instead of one per claim (0.5 us
        each). The records written meanwhile stay valid in any order around it
        (claims merge by a join; a claim of an event dropped or flushed is ignored on
        reload). False (nothing to do) without AOF or when holding already."""
        if not self.node.aof.on or self._claims is not None:
            return False
        self._claims = []
        return True

    def write_claims(self) -> None:
        """The claims held since :meth:`hold_claims`, in one record (one: EVCLAIM)."""
        got, self._claims = self._claims, None
        if not got:
            return
        if len(got) == 1:
            self.node.aof.out.append(records.encode_event_record(records.EVCLAIM, got[0]))
        else:
            self.node.aof.out.append(records.encode_event_record(records.EVCLAIMS, got))

    def dropped(self, eid: bytes) -> None:
        """An event dropped before its expiry (its QADD gave up)."""
        if self.node.aof.on:
            self.node.aof.seal_events()  # its EVENT goes before (an EVENTS does not merge)
            self.node.aof.out.append(records.encode_event_record(records.EVDEL, [eid]))

    def flushed(self, qname: bytes, ctime: int) -> None:
        """QFLUSH: the events of ``qname`` created up to ``ctime`` (ns) are gone."""
        if self.node.aof.on:
            self.node.aof.seal_events()  # the events held before it go before it
            self.node.aof.out.append(records.encode_event_record(records.EVFLUSH,
                                                                 [qname, ctime]))

    # --- a rewrite ------------------------------------------------------------------
    def snapshot_list(self) -> IdList:
        """The IDs of the events a rewrite will write, a slice at a time (25 bytes
        each)."""
        return self.g.store.snapshot()

    def snapshot(self, eid: bytes) -> bytes | None:
        """A rewrite's record for the event ``eid``, or None if it is no longer held
        (dropped or expired since the snapshot was listed: the running log has said
        so)."""
        e = self.g.store.peek(eid)
        if e is None:
            return None
        return records.encode_event_record(records.EVENT, event_fields(e))

    def tombstones(self) -> list[bytes]:
        """A rewrite's EVFLUSH records: the flushes still refusing late copies (written
        before the events, so a reload drops none created after the flush)."""
        return [records.encode_event_record(records.EVFLUSH, [q, ctime])
                for q, (ctime, _) in self.g.store.tombs.items()]

    # --- loading --------------------------------------------------------------------
    def load(self, recs: Iterable[tuple[str, object]], now: int) -> int:
        """Replay the events' records (file order): the events held and unexpired come
        back with their claims, in their arrival order, leases running to their
        deadlines; flushes recent enough keep refusing older copies. Returns the
        events loaded."""
        g = self.g
        store = g.store
        events: dict[bytes, tuple[EventFields, dict[bytes, int]]] = {}
        tombs: dict[bytes, int] = {}
        for kind, p in recs:
            if kind == records.EVENT or kind == records.EVENTS:
                held = (p,) if kind == records.EVENT else p
                assert isinstance(held, tuple)
                for f in held:
                    assert isinstance(f, EventFields)
                    old = events.get(f.id)
                    claims = old[1] if old is not None else {}
                    for gr, c in f.claims:
                        claims[gr] = merge(claims.get(gr), c)
                    events[f.id] = (f, claims)
            elif kind == records.EVCLAIM or kind == records.EVCLAIMS:
                changes = (p,) if kind == records.EVCLAIM else p
                assert isinstance(changes, tuple)
                for eid, gr, c in changes:
                    ev = events.get(eid)
                    if ev is not None:
                        ev[1][gr] = merge(ev[1].get(gr), c)
            elif kind == records.EVDEL:
                assert isinstance(p, bytes)
                events.pop(p, None)
            else:
                assert isinstance(p, tuple)
                qname, ctime = p
                if ctime > tombs.get(qname, -1):
                    tombs[qname] = ctime
                for eid in [i for i, (f, _) in events.items()
                            if f.queue == qname and f.ctime <= ctime]:
                    del events[eid]
        for qname, ctime in tombs.items():
            until = ctime // 1_000_000 + TOMBSTONE_MS
            if until > now:
                store.tombs[qname] = (ctime, until)
        n = 0
        myid = self.node.myid
        for f, claims in events.values():
            if f.etime <= now or store.has(f.id):
                continue
            hs = f.holders if myid in f.holders else (*f.holders, myid)
            e = Event(f.id, store.intern(f.queue), f.body, f.ctime, f.etime,
                      store.holders(hs))
            e.key = f.key
            for gr, c in claims.items():
                gr = store.intern(gr)
                e.claims[gr] = c
                if c & STATE_MASK == LEASED and claim_deadline(c) > now:
                    g.leases.timer(f.id, gr, claim_deadline(c))
            store.put(e, now)
            n += 1
            g.seen(f.ctime, now)
        self.loaded = n
        if n:
            g.sync.after_load(now)
        return n
