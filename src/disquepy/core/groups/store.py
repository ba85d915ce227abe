"""The events a node holds (as jobstore.py is for jobs): by ID and by queue, in
arrival order, their expiry, the claims merged into them, QFLUSH's drop, and the scan
that finds the next event available to a group (with who decides for it: the
*authority*).

**Packed.** A node may hold millions of events, most of them settled: every group
either never touched one or is done with it. One Python object per event cost 300+
bytes (a Redis Stream entry: ~40), so a held event lives in its queue's columns
instead (``librt.vecs`` typed arrays, which mypyc compiles to plain C loads and
stores; the same code runs interpreted), by *position* (arrival order here): the ID's time part (``ctimes``; the
ID is ``<time 16 hex>-<creator 8 hex>``, rebuilt from it and the creator kept in
``meta``), the expiry, ``meta`` (creator, an index into the store's table of shared
holder tuples, flags GONE and THAWED), the body's place in the queue's ``arena`` (one
bytearray, bodies in arrival order, cut at the front as the head expires), and per
group a claim byte (0: no claim; d + 1: DONE after d deliveries; SIDE: the claim is
in the queue's ``side`` table, an int by position, for the claims a byte cannot say:
LEASED, REDO, DEAD, while they last). About 50-65 bytes an event besides its body
(RSS, bench/events_memory.py), one byte per group done with it.

Callers name an event by its queue and position (:meth:`EventStore.locate`) and read
and change its claims through :meth:`claim_at` and :meth:`set_claim`; :meth:`peek`
builds a read-only Event (what the bus and the AOF write). **Thawed**: the few events a
column cannot say (an IDEMPOTENT key, its replication still under way, a body of 16 MB
or more, an ID whose time is not the event's) stay an :class:`Event` object, kept in
``EQueue.thawed`` by position, the one place their claims live.

**Index.** ID -> (queue, position): an open-addressing table of 64-bit entries
(``(queue number + 1) << 40 | position``, linear probing on a hash of the ID's time
part, backward-shift deletion), every match confirmed against the queue's columns
(time and creator), so two events with the same time part never answer for each
other.

**Expiry.** One timer per queue (:class:`Expiry`), due at the earliest expiry among
its events; per chunk of 256 positions a lower bound of the expiries in it, so the
timer looks only at the chunks with something due.

Pure: time comes in as ``now`` (ms).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

from librt.strings import BytesWriter
from librt.vecs import append as vappend
from librt.vecs import extend, vec
from mypy_extensions import i64, u8

from ...codec.resp import length_text
from ..ids import event_id
from ..membership import P_FAIL, P_PFAIL
from .model import (
    AVAILABLE,
    CLAIM_OVERHEAD,
    CLAIM_PACKED,
    CLAIM_SIDE,
    DEADLINE_SHIFT,
    DONE,
    GONE,
    HELD,
    LEASED,
    PACKED_OVERHEAD,
    REDO,
    STATE_MASK,
    THAWED_OVERHEAD,
    Cursor,
    EQueue,
    Event,
    claim_deadline,
    claim_deliveries,
    effective,
    merge,
    pack,
)

if TYPE_CHECKING:
    from . import Groups

TAKEOVER_MS: Final = 1000  # a holder whose link stayed down this long (at most half the node
#                    timeout) decides for nothing: a crashed node's events are served then
SCAN_BUDGET: Final = 10_000  # events one QGET looks at, at most, past its group's cursor
TOMBSTONE_MS: Final = 600_000  # a QFLUSH refuses copies of older events this long

F_GONE: Final = 1
F_THAWED: Final = 2
_H_SHIFT: Final = 2
_H_MASK: Final = (1 << 24) - 1
_C_SHIFT: Final = 26
_LEN_BITS: Final = 24
_LEN_MASK: Final = (1 << _LEN_BITS) - 1  # also: a body kept out of the arena (too long)
CHUNK_BITS: Final = 8
CHUNK: Final = 1 << CHUNK_BITS
_INF: Final = 1 << 62
_POS_BITS: Final = 40
_POS_MASK: Final = (1 << _POS_BITS) - 1
_SIDE: Final = 255  # a claim byte: the claim is in EQueue.side
_MAX_DONE: Final = 253  # deliveries a DONE claim byte can say
_TABLE_MIN: Final = 16
_PENDING: Final = 64  # index entries gathered before they go in the table (_settle)
_NEAR: Final = 8  # positions locate_near looks at before the index

_NO_COL: Final[vec[u8]] = vec[u8]()


def _zeros(n: int) -> vec[i64]:
    return vec[i64](memoryview(bytes(8 * n)).cast("q"))


def _hex(eid: bytes, start: i64, n: i64) -> i64:
    """The number written in lowercase hex at ``eid[start:start + n]`` (n <= 16), or -1
    (not such digits, or 2**63 or more)."""
    if n == 16 and eid[start] > 0x37:  # ('7': a time part is below 2**63)
        return -1
    v: i64 = 0
    for k in range(start, start + n):
        c = eid[k]
        if 0x30 <= c <= 0x39:
            v = (v << 4) | (c - 0x30)
        elif 0x61 <= c <= 0x66:
            v = (v << 4) | (c - 0x57)
        else:
            return -1
    return v


def _hash(t: i64) -> i64:
    """The ID index's hash of a creation time: its 64 bits folded to 32, then mixed
    (two multiply-xorshift rounds, 31-bit multipliers so no product leaves an i64).
    Creation times come in runs (consecutive ns within a ms, ms apart): a plain
    fold of their bits piled them into long probe runs (68 probes an insert at 100
    QADDs a ms, 478 at 1,000), where this stays at ~2.6 (a random hash's)."""
    x = (t ^ (t >> 32)) & 0xFFFFFFFF
    x = ((x ^ (x >> 16)) * 0x7FEB352D) & 0xFFFFFFFF
    x = ((x ^ (x >> 15)) * 0x2C1B3C6D) & 0xFFFFFFFF
    return x ^ (x >> 16)


class IdList:
    """Event IDs in one buffer, 25 bytes each: what an AOF rewrite or an EVSYNC round
    walks a slice at a time (a list of ID objects would cost ~65 bytes an event)."""

    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def __len__(self) -> int:
        return len(self.buf) // 25

    def __getitem__(self, s: slice) -> list[bytes]:
        n = len(self.buf) // 25
        start, stop, _ = s.indices(n)
        buf = self.buf
        return [bytes(buf[25 * i:25 * i + 25]) for i in range(start, stop)]

    def __iter__(self) -> Iterator[bytes]:
        buf = self.buf
        for i in range(len(buf) // 25):
            yield bytes(buf[25 * i:25 * i + 25])


class EventStore:
    """The node's events and queues of events."""

    def __init__(self, g: Groups) -> None:
        self.g = g
        self.node = g.node
        self.queues: dict[bytes, EQueue] = {}
        self.count = 0  # events held
        self.flushed: dict[tuple[bytes, bytes], int] = {}  # (event, group) -> lease end
        self.tombs: dict[bytes, tuple[int, int]] = {}  # queue -> (flushed ctime ns, until)
        self.keys: dict[bytes, Event] = {}  # IDEMPOTENT key -> its event (held or ADDING)
        self.expired = 0
        self._qlist: list[EQueue | None] = []  # by queue number (EQueue.qid)
        self._free: list[int] = []
        self._table: vec[i64] = _zeros(_TABLE_MIN)
        self._mask: i64 = _TABLE_MIN - 1
        self._pend: vec[i64] = vec[i64]()  # entries not in the table yet: (ent, ctime) pairs
        self._hlist: list[tuple[str, ...]] = []  # holder tuples, by index
        self._hidx: dict[tuple[str, ...], int] = {}
        self._suffixes: dict[int, bytes] = {}  # creator -> its IDs' "-xxxxxxxx" part
        self._last_creator: i64 = -1
        self._last_suffix = b""
        self._solo_id = ""  # put_new's holders (this node alone), for this node ID
        self._solo: tuple[str, ...] = ()
        self._solo_index = 0
        self._last_q: EQueue | None = None  # queue_for's last answer

    # ------------------------------------------------------------------ names
    def intern(self, name: bytes) -> bytes:
        """One object per group name (events hold a claim per group)."""
        return self.node.shared(name)

    def holders(self, t: tuple[str, ...]) -> tuple[str, ...]:
        """One tuple per distinct list of holders."""
        return self.node.shared(t)

    def _holders_index(self, t: tuple[str, ...]) -> int:
        i = self._hidx.get(t)
        if i is None:
            t = self.holders(t)
            i = self._hidx[t] = len(self._hlist)
            self._hlist.append(t)
        return i

    # ------------------------------------------------------------------ queues
    def queue_for(self, name: bytes, now: int) -> EQueue:
        q0 = self._last_q  # (producers add to one queue in a row: a compare, no hash)
        if q0 is not None and q0.qid >= 0 and q0.name == name:
            return q0
        q = self.queues.get(name)
        if q is None:
            q = self.queues[name] = EQueue(name, now)
            if self._free:
                q.qid = self._free.pop()
                self._qlist[q.qid] = q
            else:
                q.qid = len(self._qlist)
                self._qlist.append(q)
        self._last_q = q  # (a dropped queue's qid is -1: never answered again)
        return q

    def drop_queue(self, q: EQueue) -> None:
        """Forget ``q`` (it holds no event)."""
        if self.queues.get(q.name) is q:
            del self.queues[q.name]
        if q.qid >= 0:
            self._qlist[q.qid] = None
            self._free.append(q.qid)
            q.qid = -1
        self.node.awake.cancel(q.expiry)

    # ------------------------------------------------------------------ index
    def _slot(self, eid: bytes) -> i64:
        """The index slot of the event ``eid``, or -1. (IDs from clients and peers are
        checked where they enter, commands and messages.parse; what is not an ID in
        the same form answers -1, never another event.)"""
        if len(eid) != 25 or eid[16] != 0x2D:
            return -1
        t = _hex(eid, 0, 16)
        cr = _hex(eid, 17, 8)
        if t < 0 or cr < 0:
            return -1
        if len(self._pend):
            self._settle()
        table = self._table
        mask = self._mask
        qlist = self._qlist
        i = _hash(t) & mask
        for _ in range(len(table)):  # (the table is never full: an empty slot ends it)
            ent = table[i]
            if ent == 0:
                return -1
            q = qlist[(ent >> _POS_BITS) - 1]
            assert q is not None
            k = (ent & _POS_MASK) - q.cbase
            if q.ctimes[k] == t and q.meta[k] >> _C_SHIFT == cr:
                return i
            i = (i + 1) & mask
        return -1

    def locate(self, eid: bytes) -> tuple[EQueue | None, int]:
        """(queue, position) of the event ``eid`` held here, or (None, -1)."""
        i = self._slot(eid)
        if i < 0:
            return None, -1
        ent = self._table[i]
        return self._qlist[(ent >> _POS_BITS) - 1], ent & _POS_MASK

    def locate_near(self, q: EQueue, eid: bytes) -> tuple[EQueue | None, int]:
        """locate(), for an ID expected in ``q``: acks come in the order their leases
        were given, so the few positions after the one found last are looked at first
        (their columns are in the cache, where the index's slot is a random line)."""
        if len(eid) == 25 and eid[16] == 0x2D:
            t = _hex(eid, 0, 16)
            cr = _hex(eid, 17, 8)
            cb = q.cbase
            k = q.ack_hint - cb
            ctimes = q.ctimes
            meta = q.meta
            end = min(k + _NEAR, len(meta))
            if t >= 0 and cr >= 0 and k >= 0:
                while k < end:
                    m = meta[k]
                    if ctimes[k] == t and m >> _C_SHIFT == cr and not m & F_GONE:
                        q.ack_hint = cb + k + 1
                        return q, cb + k
                    k += 1
        found, pos = self.locate(eid)
        if found is q:
            q.ack_hint = pos + 1
        return found, pos

    def _key_of(self, ent: i64) -> i64:
        q = self._qlist[(ent >> _POS_BITS) - 1]
        assert q is not None
        return q.ctimes[(ent & _POS_MASK) - q.cbase]

    def _index_add(self, ent: i64, t: i64) -> None:
        """Index the event at ``ent`` (created at ``t``): gathered, in the table by the
        next lookup or after _PENDING more (see _settle)."""
        pend = vappend(vappend(self._pend, ent), t)
        self._pend = pend
        if len(pend) >= 2 * _PENDING:
            self._settle()

    def _settle(self) -> None:
        """Put the gathered entries in the table. Each lands on a random line of a
        table much bigger than the cache: one at a time between QADDs, each insert
        waited for its line (11% of a QADD); in one tight loop the misses overlap."""
        pend = self._pend
        self._pend = vec[i64]()
        n = len(self._table)
        while self.count * 5 > n * 4:  # (count has the gathered entries)
            n *= 2
        if n != len(self._table):
            self._resize(n)
        table = self._table
        mask = self._mask
        for k in range(0, len(pend), 2):
            i = _hash(pend[k + 1]) & mask
            while table[i] != 0:
                i = (i + 1) & mask
            table[i] = pend[k]

    def _index_del(self, i: i64) -> None:
        """Delete slot ``i``, shifting back the entries after it that probed past it."""
        table = self._table
        mask = self._mask
        j = i
        for _ in range(len(table)):  # (the table is never full: an empty slot ends it)
            j = (j + 1) & mask
            ent = table[j]
            if ent == 0:
                break
            home = _hash(self._key_of(ent)) & mask
            if (i <= j and (home <= i or home > j)) or (i > j and home <= i and home > j):
                table[i] = ent
                i = j
        table[i] = 0
        n = len(table)
        if n > _TABLE_MIN and self.count * 8 < n:
            self._resize(n // 2)

    def _resize(self, n: int) -> None:
        old = self._table
        self._table = table = _zeros(n)
        self._mask = mask = n - 1
        for ent in old:
            if ent != 0:
                i = _hash(self._key_of(ent)) & mask
                while table[i] != 0:
                    i = (i + 1) & mask
                table[i] = ent

    # ------------------------------------------------------------------ events
    def has(self, eid: bytes) -> bool:
        return self._slot(eid) >= 0

    def peek(self, eid: bytes) -> Event | None:
        """The event ``eid`` held here, for reading only (what the bus and the AOF
        write): its Event object if it has one, else one built from its columns
        (changing it changes nothing)."""
        q, pos = self.locate(eid)
        return None if q is None else self.view_at(q, pos)

    def view_at(self, q: EQueue, pos: int) -> Event:
        e = q.thawed.get(pos)
        return e if e is not None else self._build(q, pos)

    def body_at(self, q: EQueue, pos: int) -> bytes:
        k = pos - q.cbase
        if q.meta[k] & F_THAWED:
            e = q.thawed.get(pos)
            if e is not None:
                return e.body
        ref = q.bodies[k]
        off = (ref >> _LEN_BITS) - q.abase
        return bytes(q.arena[off:off + (ref & _LEN_MASK)])

    def write_body(self, w: BytesWriter, q: EQueue, pos: int) -> None:
        """Write the body of the event at ``pos`` of ``q`` as a RESP bulk into ``w``
        (from the arena at once: no bytes object of its own)."""
        k = pos - q.cbase
        e = q.thawed.get(pos) if q.meta[k] & F_THAWED else None
        if e is not None:
            w.write(b"$")
            w.write(length_text(len(e.body)))
            w.write(b"\r\n")
            w.write(e.body)
        else:
            ref = q.bodies[k]
            n = ref & _LEN_MASK
            off = (ref >> _LEN_BITS) - q.abase
            w.write(b"$")
            w.write(length_text(n))
            w.write(b"\r\n")
            w.write(q.arena[off:off + n])
        w.write(b"\r\n")

    def id_at(self, q: EQueue, pos: int) -> bytes:
        k = pos - q.cbase
        return event_id(q.ctimes[k], self._suffix(q.meta[k] >> _C_SHIFT))

    def _suffix(self, creator: i64) -> bytes:
        """The node part of a creator's event IDs (ids.event_id's ``suffix``), made once
        per creator: a QGET rebuilds an ID per event it leases (mostly one creator's
        after another's: the last one is kept at hand)."""
        if creator == self._last_creator:
            return self._last_suffix
        sx = self._suffixes.get(creator)
        if sx is None:
            if len(self._suffixes) >= 4096:  # (creators are the cluster's nodes)
                self._suffixes.clear()
            sx = self._suffixes[creator] = b"-%08x" % creator
        self._last_creator = creator
        self._last_suffix = sx
        return sx

    def holders_at(self, q: EQueue, pos: int) -> tuple[str, ...]:
        m = q.meta[pos - q.cbase]
        if m & F_THAWED:  # (the flag spares the packed events a dict lookup)
            e = q.thawed.get(pos)
            if e is not None:
                return e.delivered
        return self._hlist[(m >> _H_SHIFT) & _H_MASK]

    def _build(self, q: EQueue, pos: int) -> Event:
        """An Event object from the columns at ``pos`` (a read-only copy)."""
        k = pos - q.cbase
        m = q.meta[k]
        t = q.ctimes[k]
        e = Event(event_id(t, self._suffix(m >> _C_SHIFT)), q.name, self.body_at(q, pos), t,
                  q.etimes[k], self._hlist[(m >> _H_SHIFT) & _H_MASK])
        e.stage = HELD
        e.confirmed = ()
        e.pos = pos
        e.claims = self.claims_at(q, pos)
        return e

    def claims_at(self, q: EQueue, pos: int) -> dict[bytes, int]:
        """Every group's claim on the event at ``pos`` of ``q`` (a new dict)."""
        e = q.thawed.get(pos)
        if e is not None:
            return dict(e.claims)
        k = pos - q.cbase
        out: dict[bytes, int] = {}
        for g, col in q.claims.items():
            if k < len(col):
                b = col[k]
                if b == _SIDE:
                    out[g] = q.side[g][pos]
                elif b:
                    out[g] = pack(DONE, b - 1, 0)
        return out

    def ids(self) -> list[bytes]:
        """The IDs of the events held, queue by queue in arrival order."""
        snap = self.snapshot()
        return snap[0:len(snap)]

    def snapshot(self) -> IdList:
        """The IDs of the events held, queue by queue in arrival order, packed."""
        out = IdList()
        buf = out.buf
        for q in self.queues.values():
            meta = q.meta
            cb = q.cbase
            for pos in range(q.base, q.end()):
                if not meta[pos - cb] & F_GONE:
                    buf += self.id_at(q, pos)
        return out

    def max_id(self) -> bytes:
        """The largest ID of the events held (IDs compare as strings), or b""."""
        best = b""
        for q in self.queues.values():
            meta = q.meta
            cb = q.cbase
            bt = -1
            bc = -1
            for pos in range(q.base, q.end()):
                k = pos - cb
                m = meta[k]
                if m & F_GONE:
                    continue
                t = q.ctimes[k]
                if t > bt or t == bt and m >> _C_SHIFT > bc:
                    bt, bc = t, m >> _C_SHIFT
            if bt >= 0:
                eid = b"%016x-%08x" % (bt, bc)
                if eid > best:
                    best = eid
        return best

    def positions(self, q: EQueue) -> list[int]:
        """The positions of the events of ``q`` held, in arrival order."""
        meta = q.meta
        cb = q.cbase
        return [pos for pos in range(q.base, q.end()) if not meta[pos - cb] & F_GONE]

    def ctime_at(self, q: EQueue, pos: int) -> int:
        e = q.thawed.get(pos)
        return e.ctime if e is not None else q.ctimes[pos - q.cbase]

    def claim_at(self, q: EQueue, pos: int, group: bytes) -> int | None:
        """``group``'s claim on the event at ``pos`` of ``q`` (None: never delivered)."""
        k = pos - q.cbase
        if q.meta[k] & F_THAWED:
            return q.thawed[pos].claims.get(group)
        col = q.claims.get(group)
        if col is None or k >= len(col):
            return None
        b = col[k]
        if b == 0:
            return None
        if b == _SIDE:
            return q.side[group][pos]
        return pack(DONE, b - 1, 0)

    def put_claim(self, q: EQueue, pos: int, group: bytes, claim: int) -> None:
        """Set ``group``'s claim on the event at ``pos`` of ``q`` (memory accounted)."""
        k = pos - q.cbase
        if q.meta[k] & F_THAWED:
            e = q.thawed[pos]
            if group not in e.claims:
                self.node.mem.used += CLAIM_OVERHEAD
            e.claims[group] = claim
            return
        self.node.mem.used += self._write_claim(q, k, pos, group, claim)

    def _write_claim(self, q: EQueue, k: int, pos: int, group: bytes, claim: int) -> int:
        """Write a packed event's claim; the change in its cost (bytes)."""
        d = 0
        if (claim & STATE_MASK == DONE and not claim >> DEADLINE_SHIFT
                and claim_deliveries(claim) <= _MAX_DONE):
            b = u8(claim_deliveries(claim) + 1)
        else:
            b = u8(_SIDE)
        col = q.claims.get(group)
        if col is None:
            col = vec[u8]()
        n = len(col)
        old = col[k] if k < n else 0
        if old == 0:
            d += CLAIM_PACKED
        if b == _SIDE:
            side = q.side.get(group)
            if side is None:
                side = q.side[group] = {}
            side[pos] = claim
            if old != _SIDE:
                d += CLAIM_SIDE
        elif old == _SIDE:
            del q.side[group][pos]  # (an empty table stays: the next leases fill it)
            d -= CLAIM_SIDE
        if n > k:
            col[k] = b  # (in place: the column in q.claims shares the buffer)
        elif n == k:
            q.claims[group] = vappend(col, b)
        else:
            col = extend(col, bytes(k - n))
            q.claims[group] = vappend(col, b)
        return d

    def set_holders(self, q: EQueue, pos: int, holders: tuple[str, ...]) -> None:
        e = q.thawed.get(pos)
        if e is not None:
            e.delivered = holders
            return
        k = pos - q.cbase
        m = q.meta[k]
        q.meta[k] = (((m >> _C_SHIFT) << _C_SHIFT) | (self._holders_index(holders) << _H_SHIFT)
                     | (m & (F_GONE | F_THAWED)))

    def claimed(self, q: EQueue, group: bytes) -> bool:
        """Whether an event of ``q`` held packed has a claim of ``group``."""
        col = q.claims.get(group)
        if col is None:
            return False
        meta = q.meta
        return any(col[k] and not meta[k] & F_GONE for k in range(len(col)))

    def side_claims(self, q: EQueue) -> list[tuple[int, bytes, int]]:
        """The packed events' claims a byte cannot say: (position, group, claim)."""
        return [(pos, g, c) for g, side in q.side.items() for pos, c in side.items()]

    def leased_count(self) -> int:
        """The LEASED claims held, live or ended (INFO event_leases)."""
        n = 0
        for q in self.queues.values():
            for e in q.thawed.values():
                for c in e.claims.values():
                    if c & STATE_MASK == LEASED:
                        n += 1
            for side in q.side.values():
                for c in side.values():
                    if c & STATE_MASK == LEASED:
                        n += 1
        return n

    # ----------------------------------------------------------------- packing
    def _packable(self, e: Event, t: int) -> bool:
        """Whether ``e`` (``t``: its ID's time part) can live in the columns: its
        replication over, nothing a column cannot say."""
        return not (e.key is not None or e.awake or len(e.body) >= _LEN_MASK
                    or t != e.ctime or e.id in self.g.repl.adding)

    def _thawed_extra(self, e: Event) -> int:
        """What a thawed event costs beyond its packed self (memory accounting)."""
        return (THAWED_OVERHEAD + len(e.body) + (len(e.key) if e.key is not None else 0)
                + (CLAIM_OVERHEAD - CLAIM_PACKED) * len(e.claims))

    # ------------------------------------------------------------------ holding
    def put(self, e: Event, now: int) -> None:
        """Hold ``e`` (new here): in its queue's order, expiring at its etime; packed
        unless a column cannot say it (then kept as the object, *thawed*)."""
        q = self.queue_for(e.queue, now)
        e.queue = q.name
        e.stage = HELD
        t = _hex(e.id, 0, 16)
        cr = _hex(e.id, 17, 8)
        pos = self._append(q, t, cr, e.etime, e.body, self._holders_index(e.delivered))
        e.pos = pos
        if e.key is not None:
            self.keys[e.key] = e
        self.g.log.held(e)
        if self._packable(e, t):
            k = pos - q.cbase
            for g, c in e.claims.items():
                self.node.mem.used += self._write_claim(q, k, pos, g, c)
        else:
            q.thawed[pos] = e
            q.meta[pos - q.cbase] = q.meta[pos - q.cbase] | F_THAWED
            self.node.mem.used += CLAIM_PACKED * len(e.claims) + self._thawed_extra(e)

    def put_new(self, qname: bytes, body: bytes, ctime: i64, etime: i64,
                cr: i64, now: int, eid: bytes | None = None) -> EQueue | None:
        """Hold a new event of this node's that needs no copies (its QADD's reply is
        due now) and has no key: straight into the columns, as put() packs one, with
        no Event object made (a third of a QADD's allocations). Returns its queue, or
        None (nothing done) for a body a column cannot say: put() an Event then."""
        if len(body) >= _LEN_MASK or ctime < 0:
            return None
        myid = self.node.myid
        if myid is not self._solo_id:  # (the holders: this node alone)
            self._solo_id = myid
            self._solo = self.holders((myid,))
            self._solo_index = self._holders_index(self._solo)
        q = self.queue_for(qname, now)
        self._append(q, ctime, cr, etime, body, self._solo_index)
        self.g.log.held_new(eid, q.name, body, ctime, etime, self._solo)
        return q

    def _append(self, q: EQueue, t: i64, cr: i64, etime: int, body: bytes,
                hidx: int) -> int:
        """A new event's columns at the end of ``q`` (``t``, ``cr``: its ID's parts;
        ``hidx``: its holders'), its index entry, counts, memory and the queue's expiry
        timer; its position."""
        pos = q.end()
        blen = len(body)
        if blen < _LEN_MASK:
            ref = ((q.abase + len(q.arena)) << _LEN_BITS) | blen
            q.arena += body
        else:
            ref = _LEN_MASK  # (thawed for good)
        q.ctimes = vappend(q.ctimes, t)
        q.etimes = vappend(q.etimes, etime)
        q.meta = vappend(q.meta, (cr << _C_SHIFT) | (hidx << _H_SHIFT))
        q.bodies = vappend(q.bodies, ref)
        c = (pos >> CHUNK_BITS) - (q.cbase >> CHUNK_BITS)
        if c == len(q.expmin):
            q.expmin = vappend(q.expmin, etime)
        elif etime < q.expmin[c]:
            q.expmin[c] = etime
        self._index_add(((q.qid + 1) << _POS_BITS) | pos, t)
        self.count += 1
        q.live += 1
        self.node.mem.used += PACKED_OVERHEAD + blen
        t_exp = q.expiry
        if not t_exp.awake or etime < t_exp.awake:
            self.node.awake.schedule(t_exp, etime)
        return pos

    def remove(self, e: Event) -> None:
        """Drop ``e`` (held, or still ADDING)."""
        if e.stage == GONE:
            return
        if e.stage != HELD:
            e.stage = GONE
            self.node.awake.cancel(e)
            if e.key is not None and self.keys.get(e.key) is e:
                del self.keys[e.key]
            return
        q, pos = self.locate(e.id)
        e.stage = GONE
        if q is not None:
            self._drop(q, pos)
            self._tidy(q)

    def _drop(self, q: EQueue, pos: int) -> None:
        """Drop the live event at ``pos`` of ``q`` (the columns are tidied by _tidy)."""
        if len(self._pend):
            self._settle()
        k = pos - q.cbase
        t = q.ctimes[k]
        m = q.meta[k]
        # its index slot: probe for the entry naming this very position
        table = self._table
        mask = self._mask
        ent_self = ((q.qid + 1) << _POS_BITS) | pos
        i = _hash(t) & mask
        for _ in range(len(table)):  # (always there: every live event is indexed)
            if table[i] == ent_self:
                break
            i = (i + 1) & mask
        q.meta[k] = m | F_GONE
        self.count -= 1
        q.live -= 1
        self._index_del(i)
        blen = q.bodies[k] & _LEN_MASK
        cost = PACKED_OVERHEAD
        if m & F_THAWED:
            e = q.thawed.pop(pos)
            cost += CLAIM_PACKED * len(e.claims) + self._thawed_extra(e)
            e.stage = GONE
            self.node.awake.cancel(e)
            if e.key is not None and self.keys.get(e.key) is e:
                del self.keys[e.key]
            if blen == _LEN_MASK:
                blen = len(e.body)
            e.body = b""
            e.claims = {}
        else:
            for g, col in q.claims.items():
                if k < len(col) and col[k]:
                    cost += CLAIM_PACKED
                    if col[k] == _SIDE:
                        cost += CLAIM_SIDE
                        side = q.side[g]
                        del side[pos]
                        if not side:
                            del q.side[g]
        self.node.mem.used -= cost + blen

    def _tidy(self, q: EQueue) -> None:
        """After drops: the head moves past the gone events, the columns and the arena
        lose their dead front, and a queue with more holes than events is compacted."""
        end = q.end()
        meta = q.meta
        cb = q.cbase
        base = q.base
        while base < end and meta[base - cb] & F_GONE:
            base += 1
        q.base = base
        span = end - base
        if span > 64 and q.live * 2 < span:
            self._compact(q)
            return
        cut = (base >> CHUNK_BITS << CHUNK_BITS) - cb
        if cut >= CHUNK and cut * 2 >= len(meta):
            self._cut(q, cut)
        self._cut_arena(q)

    def _cut(self, q: EQueue, cut: int) -> None:
        """Drop the first ``cut`` column entries (a whole number of chunks, all gone)."""
        q.ctimes = q.ctimes[cut:]
        q.etimes = q.etimes[cut:]
        q.meta = q.meta[cut:]
        q.bodies = q.bodies[cut:]
        q.expmin = q.expmin[cut >> CHUNK_BITS:]
        for g, col in list(q.claims.items()):
            if len(col) > cut:
                q.claims[g] = col[cut:]
            else:
                del q.claims[g]
        q.cbase += cut

    def _cut_arena(self, q: EQueue) -> None:
        """The arena loses the bodies before the first live one (bytearray: cheap)."""
        bodies = q.bodies
        meta = q.meta
        cb = q.cbase
        first = q.abase + len(q.arena)
        for pos in range(q.base, q.end()):
            k = pos - cb
            if not meta[k] & F_GONE and bodies[k] & _LEN_MASK != _LEN_MASK:
                first = bodies[k] >> _LEN_BITS
                break
        d = first - q.abase
        if d > 4096 and d * 2 >= len(q.arena):
            del q.arena[:d]
            q.abase = first

    def _compact(self, q: EQueue) -> None:
        """Drop the gone events from the middle of a queue (some expire before older
        ones): live events get consecutive positions from ``base``, cursors move to the
        same place among the live events, index entries follow."""
        if len(self._pend):
            self._settle()
        base = q.base
        end = q.end()
        cb = q.cbase
        ncb = base >> CHUNK_BITS << CHUNK_BITS
        lead = base - ncb
        ctimes = vec[i64](capacity=lead + q.live)
        etimes = vec[i64](capacity=lead + q.live)
        meta = vec[i64](capacity=lead + q.live)
        bodies = vec[i64](capacity=lead + q.live)
        for _ in range(lead):
            ctimes = vappend(ctimes, 0)
            etimes = vappend(etimes, 0)
            meta = vappend(meta, F_GONE)
            bodies = vappend(bodies, 0)
        cols: dict[bytes, vec[u8]] = {g: vec[u8](bytes(lead)) for g in q.claims}
        arena = bytearray()
        thawed: dict[int, Event] = {}
        side: dict[bytes, dict[int, int]] = {g: {} for g in q.side}
        newpos = vec[i64](capacity=end - base + 1)  # newpos[i]: live events before base + i
        slots = vec[i64](capacity=q.live)
        table = self._table
        mask = self._mask
        ent0 = (q.qid + 1) << _POS_BITS
        n = 0
        for pos in range(base, end):
            newpos = vappend(newpos, n)
            k = pos - cb
            m = q.meta[k]
            if m & F_GONE:
                continue
            np = base + n
            t = q.ctimes[k]
            i = _hash(t) & mask
            for _ in range(len(table)):  # (always there: every live event is indexed)
                if table[i] == ent0 | pos:
                    break
                i = (i + 1) & mask
            slots = vappend(slots, i)
            ctimes = vappend(ctimes, t)
            etimes = vappend(etimes, q.etimes[k])
            meta = vappend(meta, m)
            ref = q.bodies[k]
            ln = ref & _LEN_MASK
            if ln != _LEN_MASK:
                off = (ref >> _LEN_BITS) - q.abase
                ref = (len(arena) << _LEN_BITS) | ln
                arena += q.arena[off:off + ln]
            bodies = vappend(bodies, ref)
            for g, col in q.claims.items():
                b = col[k] if k < len(col) else u8(0)
                cols[g] = vappend(cols[g], b)
                if b == _SIDE:
                    side[g][np] = q.side[g][pos]
            if m & F_THAWED:
                e = q.thawed[pos]
                e.pos = np
                thawed[np] = e
            n += 1
        newpos = vappend(newpos, n)
        for j in range(len(slots)):
            table[slots[j]] = ent0 | (base + j)
        q.ctimes, q.etimes, q.meta, q.bodies = ctimes, etimes, meta, bodies
        q.claims = {g: col for g, col in cols.items() if any(col)}
        q.side = side
        q.arena = arena
        q.abase = 0
        q.thawed = thawed
        q.cbase = ncb
        span = end - base
        for cur in q.cursors.values():
            cur.pos = base + newpos[min(max(cur.pos - base, 0), span)]
            cur.mine_pos = base + newpos[min(max(cur.mine_pos - base, 0), span)]
        # the chunks' expiry bounds, exact again
        expmin = vec[i64]()
        for k in range(len(meta)):
            if k & (CHUNK - 1) == 0:
                expmin = vappend(expmin, _INF)
            if not meta[k] & F_GONE and etimes[k] < expmin[k >> CHUNK_BITS]:
                expmin[k >> CHUNK_BITS] = etimes[k]
        q.expmin = expmin

    def expire(self, e: Event, now: int) -> None:
        """``e``'s own timer fired (a replication retry left behind): if it expired."""
        if e.stage == HELD and e.etime <= now:
            self.expired += 1
            self.remove(e)

    def expire_queue(self, qname: bytes, now: int) -> None:
        """A queue's expiry timer: drop its events expired by ``now``, wake at the next."""
        q = self.queues.get(qname)
        if q is None:
            return
        expmin = q.expmin
        etimes = q.etimes
        meta = q.meta
        cb = q.cbase
        end = q.end()
        dropped = False
        for c in range(len(expmin)):
            if expmin[c] > now:
                continue
            lo = max(q.base, cb + (c << CHUNK_BITS))
            hi = min(end, cb + ((c + 1) << CHUNK_BITS))
            low = _INF
            for pos in range(lo, hi):
                k = pos - cb
                if meta[k] & F_GONE:
                    continue
                et = etimes[k]
                if et <= now:
                    self.expired += 1
                    self._drop(q, pos)
                    dropped = True
                elif et < low:
                    low = et
            expmin[c] = low
        if dropped:
            self._tidy(q)
        self._rearm(q)

    def _rearm(self, q: EQueue) -> None:
        low = _INF
        for v in q.expmin:
            if v < low:
                low = v
        if low < _INF and q.live:
            self.node.awake.schedule(q.expiry, low)
        else:
            self.node.awake.cancel(q.expiry)

    def set_claim(self, q: EQueue, pos: int, group: bytes, claim: int, now: int) -> None:
        """Merge ``claim`` (from a peer) into ``group``'s claim on the event at ``pos``
        of ``q``, memory accounted: a lease gets its timer here too (every LEASED claim
        held has one, so a scan may pass it), a redo wakes this node's consumers."""
        old = self.claim_at(q, pos, group)
        new = merge(old, claim)
        if new == old:
            return
        self.put_claim(q, pos, group, new)
        eid = self.id_at(q, pos)
        self.g.log.claim(eid, group, new)
        if new & STATE_MASK == LEASED:
            self.g.leases.timer(eid, group, claim_deadline(new))
        elif new & STATE_MASK == REDO:
            cur = q.cursors.get(group)
            if cur is not None:
                cur.redo.append(eid)
            self.g.notify.wake(q, group, now)

    def memory(self) -> int:
        """What the events held cost in used memory, counted afresh (the simulator's
        check of the accounting)."""
        n = 0
        for q in self.queues.values():
            for pos in range(q.base, q.end()):
                k = pos - q.cbase
                m = q.meta[k]
                if m & F_GONE:
                    continue
                e = q.thawed.get(pos)
                if e is not None:
                    n += (PACKED_OVERHEAD + len(e.body) + CLAIM_PACKED * len(e.claims)
                          + self._thawed_extra(e))
                    continue
                n += PACKED_OVERHEAD + (q.bodies[k] & _LEN_MASK)
                for g, col in q.claims.items():
                    if k < len(col) and col[k]:
                        n += CLAIM_PACKED
                        if col[k] == _SIDE:
                            assert pos in q.side[g]
                            n += CLAIM_SIDE
        return n

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
        for pos in range(q.base, q.end()):
            if q.meta[pos - q.cbase] & F_GONE:
                continue
            for g, c in self.claims_at(q, pos).items():
                if effective(c, now) == LEASED:
                    self.flushed[(self.id_at(q, pos), g)] = claim_deadline(c)
            self._drop(q, pos)
        self._tidy(q)
        q.cursors.clear()  # as if the queue never existed
        if not q.waiters and not q.watchers:
            self.drop_queue(q)

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
        for q in list(self.queues.values()):
            for pos in range(q.base, q.end()):
                if not q.meta[pos - q.cbase] & F_GONE:
                    self._drop(q, pos)
            self.drop_queue(q)
        self.queues.clear()
        self._qlist.clear()
        self._free.clear()
        self._table = _zeros(_TABLE_MIN)
        self._mask = _TABLE_MIN - 1
        self._pend = vec[i64]()
        self.count = 0
        self.flushed.clear()
        self.tombs.clear()
        self.keys.clear()

    # ---------------------------------------------------------------- authority
    def takeover_ms(self) -> int:
        return max(100, min(TAKEOVER_MS, self.node.config.cluster_node_timeout // 2))

    def authority(self, e: Event) -> str:
        return self.authority_of(e.delivered)

    def authority_of(self, holders: tuple[str, ...]) -> str:
        """The holder that decides for an event held by ``holders``: the first holder
        not failing, this node if all the others are. Failing: FAIL; or, if this node
        reaches a majority of the cluster, flagged PFAIL (its own suspicion) or our
        link to it broke and could not be made again for takeover_ms() (a process that
        died refuses connections at once; a live one is reconnected in a few ms).
        Taking over then, not at the majority's FAIL a node timeout or more later,
        serves a crashed node's events within a second. The price is for a node cut
        off but alive on the minority side: the majority leases its events while it
        may still lease them to its side (as with FAIL, sooner); the minority side
        never takes over early. In a healthy cluster no link stays down."""
        node = self.node
        myid = node.myid
        peers = node.members.peers
        # only a node that reaches a majority takes over before FAIL (which needs one):
        # the minority side of a partition leaves the majority's events alone
        quick = 2 * (node.reachable + 1) > node.size
        for h in holders:
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
        return self.authority_of(e.delivered) == self.node.myid

    def leasable(self, holders: tuple[str, ...]) -> bool:
        """Whether this node leases an event held by ``holders`` now: its authority,
        caught up (sync.py)."""
        return self.authority_of(holders) == self.node.myid and not self.g.sync.blocks(holders)

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

    def find(self, q: EQueue, group: bytes, now: int, only_mine: bool) -> int:
        """The position of the next event available to ``group`` in ``q`` (leasable
        here when ``only_mine``), redo first, then in arrival order, or -1; advances
        the cursor past what no longer needs a look."""
        cur = self.cursor(q, group)
        redo = cur.redo
        k = 0
        while k < len(redo):
            rq, rpos = self.locate(redo[k])
            if rq is not q or effective(self.claim_at(q, rpos, group), now) not in (
                    REDO, AVAILABLE):
                del redo[k]  # gone, leased again, done or dead: no longer to redo
                continue
            if not only_mine or self.leasable(self.holders_at(q, rpos)):
                return rpos
            k += 1  # another node redoes it (or should: a repair may be due); kept in view
        # a scan for this node's own events starts past those another node decides
        i: i64 = cur.mine_pos if only_mine else cur.pos
        end: i64 = q.end()
        cb: i64 = q.cbase
        meta = q.meta
        col = q.claims.get(group, _NO_COL)
        ncol: i64 = len(col)
        side = q.side.get(group)
        hlist = self._hlist
        advance = i == cur.pos
        budget = SCAN_BUDGET
        while i < end and budget:
            budget -= 1
            k2: i64 = i - cb
            m = meta[k2]
            if not m & F_GONE:
                if m & F_THAWED:
                    e2 = q.thawed[i]
                    st = effective(e2.claims.get(group), now)
                    ok = st in (AVAILABLE, REDO)
                    holders = e2.delivered
                else:
                    if k2 >= ncol or col[k2] == 0:
                        ok = True
                    elif col[k2] == _SIDE and side is not None:
                        st = effective(side[i], now)
                        ok = st in (AVAILABLE, REDO)
                    else:
                        ok = False
                    holders = hlist[(m >> _H_SHIFT) & _H_MASK]
                if ok:
                    if not only_mine or self.leasable(holders):
                        if advance:
                            cur.pos = i  # passed once leased (a look leases nothing)
                        if only_mine:
                            cur.mine_pos = i
                        return i
                    advance = False  # another node leases it: keep it in view
            i += 1
            if advance:
                cur.pos = i
            if only_mine:
                cur.mine_pos = i
        return -1

    def available(self, q: EQueue, group: bytes, now: int) -> bool:
        return self.find(q, group, now, False) >= 0
