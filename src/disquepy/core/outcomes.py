"""How jobs ended, kept for a retention after the job itself is gone.

An outcome is a small fixed record: the job ID, how it ended (completed, failed,
cancelled, expired), its queue, attempts, when it was created and finished, and a
short detail (the worker's result or the error). A node at 10k finished jobs per second
keeps 36M of them for the default hour, so the store packs them instead of keeping one
Python object each (a dict of tuples costs 300+ bytes per entry; this costs under 100).

Layout:

* **Chunks.** Records are appended to the open chunk, a preallocated ``bytearray`` of
  fixed-size packed records (ID, created, attempts, queue, detail offset and length)
  with two columns beside it: ``finished_ms`` (``array('q')``) and a state byte (a
  removed record's byte becomes ``_DEAD``). Queue names and details are stored once per
  chunk (a per-chunk name table; details in a per-chunk byte heap, repeated ones shared
  while the chunk is open), so repeated queue names and errors cost two or six bytes a
  record. A chunk is freed whole when its last live record goes.
* **Index.** ID → record number, a linear-probing hash table of 64-bit entries
  (occupied bit, 28 hash bits, 35-bit record number) split in 4096 shards, each an
  ``array('Q')`` that grows and shrinks on its own, so no resize ever touches more than
  1/4096 of the entries (an empty shard is freed). Deletion shifts entries back (no
  tombstones). A hash match is
  always confirmed against the stored ID: a collision never answers for another job.
* **Expiry order.** Outcomes leave oldest first by ``(finished_ms, arrival)``, exactly:
  a heap holds each chunk's smallest live ``finished_ms``; the chunk at the top is
  sorted once (its live slots by finished time) and consumed from the front. Outcomes
  mostly arrive in finished order, so almost only the oldest chunk is ever sorted, and
  expiry and eviction cost O(log chunks) plus O(1) per dropped outcome.

Pure: time comes in as ``now`` (ms), nothing here reads a clock.
"""

from __future__ import annotations

import heapq
import struct
import sys
from array import array
from collections.abc import Iterator
from typing import NamedTuple

from .ids import JOB_ID_LEN, is_valid_job_id

COMPLETED = 1
FAILED = 2
CANCELLED = 3
EXPIRED = 4
STATE_NAMES: dict[int, str] = {
    COMPLETED: "completed",
    FAILED: "failed",
    CANCELLED: "cancelled",
    EXPIRED: "expired",
}

DEFAULT_RETENTION_MS = 3_600_000
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
DEFAULT_MAX_DETAIL = 1024
MAX_DETAIL_LIMIT = 0xFFFF  # the detail length is a u16 in the record


class Outcome(NamedTuple):
    """How one job ended. ``detail``: the result (COMPLETED), the error (FAILED), else b''."""

    job_id: str
    state: int
    queue: str
    attempts: int
    created_ms: int
    finished_ms: int
    detail: bytes


# A record: job ID, created_ms, attempts, queue index in the chunk, detail offset, length.
_REC = struct.Struct(f"<{JOB_ID_LEN}sqIHIH")
_RSIZE = _REC.size
_QUEUE_AT = JOB_ID_LEN + 8 + 4  # the queue index's offset in a record
_REC_BYTES = _RSIZE + 8 + 1  # the packed record, its finished_ms and its state byte
_DEAD = 0
_NO_ORDER: array[int] = array("H")
_INF = 1 << 63

_CHUNK_BITS = 12
_CHUNK_MAX = 1 << _CHUNK_BITS  # records per chunk at most
_CHUNK_MIN = 16
_SLOT_MASK = _CHUNK_MAX - 1
_REC_BITS = 35  # record number = (chunk id << 12) | slot
_REC_MASK = (1 << _REC_BITS) - 1
_WID_MASK = _REC_MASK >> _CHUNK_BITS
_HASH_BITS = 28
_HASH_MASK = (1 << _HASH_BITS) - 1
_OCCUPIED = 1 << _HASH_BITS  # bit 63 of an entry, seen after the >> 35
_SHARD_BITS = 12
_NSHARDS = 1 << _SHARD_BITS
_SHARD_MASK = _NSHARDS - 1
_SHARD_MIN = 8
_MAX_DEDUP = 64  # distinct details shared per open chunk

# What the store accounts beyond the packed bytes (measured with tracemalloc, rounded up).
_CHUNK_OVERHEAD = 1024
_SHARD_OVERHEAD = 80
_SHARD_LIST_BYTES = 8 * _NSHARDS + 64
_QUEUE_ENTRY_OVERHEAD = 8 + 100  # list slot plus the open chunk's dict entry


class _Chunk:
    __slots__ = ("seq", "wid", "cap", "n", "live", "recs", "fin", "st", "heap", "queues",
                 "qmap", "dmap", "order", "pos", "minf", "mem")

    def __init__(self, seq: int, wid: int, cap: int) -> None:
        self.seq = seq  # arrival order of chunks (never wraps)
        self.wid = wid  # the id used in record numbers (wraps, never reused while live)
        self.cap = cap
        self.n = 0
        self.live = 0
        self.recs = bytearray(cap * _RSIZE)
        self.fin = array("q", bytes(8 * cap))
        self.st = bytearray(cap)
        self.heap = bytearray()
        self.queues: list[str] = []
        self.qmap: dict[str, int] | None = {}
        self.dmap: dict[bytes, int] | None = {}
        self.order: array[int] | None = None  # live slots by finished time, from pos
        self.pos = 0
        self.minf = _INF  # <= the smallest live finished_ms; exact after _settle
        self.mem = _CHUNK_OVERHEAD + cap * _REC_BYTES


class Outcomes:
    """The outcomes of finished jobs, kept ``retention_ms`` after they finished.

    ``record`` stores an outcome (a second one for the same job replaces the first:
    the last one wins); a detail longer than ``max_detail`` bytes is truncated to it.
    ``expire(now)`` drops those with ``finished_ms + retention_ms <= now``. When
    ``memory_bytes()`` would exceed ``max_bytes`` the oldest outcomes (smallest
    ``finished_ms``, then first recorded) are dropped first and counted in ``dropped``;
    memory is freed a chunk at a time (at most 1/64 of ``max_bytes``), so one eviction
    may drop a few more than strictly needed. Iterating yields the live outcomes oldest
    first, in that same order; the store must not change during an iteration.
    """

    def __init__(self, retention_ms: int = DEFAULT_RETENTION_MS,
                 max_bytes: int = DEFAULT_MAX_BYTES,
                 max_detail: int = DEFAULT_MAX_DETAIL) -> None:
        if not 0 <= max_detail <= MAX_DETAIL_LIMIT:
            raise ValueError(f"max_detail must be between 0 and {MAX_DETAIL_LIMIT}")
        self.max_detail = max_detail
        self._retention = 0
        self.retention_ms = retention_ms
        self._max_bytes = 0
        self._chunks: dict[int, _Chunk] = {}
        self._open: _Chunk | None = None
        self._seq = 0
        self._heap: list[tuple[int, int, int]] = []  # (minf, chunk seq, chunk wid)
        self._shards: list[array[int] | None] = [None] * _NSHARDS
        self._counts = [0] * _NSHARDS
        self._live = 0
        self._mem = _SHARD_LIST_BYTES + 16 * _NSHARDS  # the shard list and the counts
        self._version = 0
        self.dropped = 0
        self.max_bytes = max_bytes

    # --- settings ---------------------------------------------------------------------

    @property
    def retention_ms(self) -> int:
        return self._retention

    @retention_ms.setter
    def retention_ms(self, value: int) -> None:
        self._retention = _non_negative("retention_ms", value)

    @property
    def max_bytes(self) -> int:
        return self._max_bytes

    @max_bytes.setter
    def max_bytes(self, value: int) -> None:
        """Set the bound; outcomes are dropped at once, oldest first, to fit it."""
        self._max_bytes = _non_negative("max_bytes", value)
        self._enforce()

    # --- the API ------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._live

    def memory_bytes(self) -> int:
        """The bytes the store accounts for: chunks, index and tables (what max_bytes bounds)."""
        return self._mem

    def record(self, o: Outcome) -> None:
        """Store an outcome, replacing any earlier one for the same job.

        A detail longer than ``max_detail`` is truncated to ``max_detail`` bytes. Raises
        ValueError for an ID that is not a job ID, an unknown state, or a field out of
        range (attempts: 0..2**32-1; times: signed 64-bit), storing nothing.
        """
        job_id, state, queue, attempts, created, finished, detail = o
        try:
            raw = job_id.encode("latin-1")
        except (UnicodeEncodeError, AttributeError):
            raw = b""
        if not is_valid_job_id(raw):
            raise _bad_id(job_id)
        self.record_raw(raw, state, queue, attempts, created, finished, detail)

    def record_raw(self, raw: bytes, state: int, queue: str, attempts: int, created: int,
                   finished: int, detail: bytes) -> None:
        """:meth:`record` for a caller whose job ID is known valid (the node's own, as
        bytes): no Outcome tuple, no ID encoding or check (about 1.2 µs less, a third of
        a record). The other fields are checked as in record()."""
        if state not in STATE_NAMES:
            raise ValueError(f"unknown outcome state {state!r}")
        job_id = raw
        c = self._open
        if c is None or c.n == c.cap:
            c = self._new_chunk()
        qmap = c.qmap
        assert qmap is not None  # the open chunk has its tables
        qi = qmap.get(queue)
        new_queue = qi is None
        if qi is None:
            if type(queue) is not str:
                raise ValueError("outcome queue must be a str")
            qi = len(c.queues)
        doff = dlen = 0
        new_detail = False
        if detail:
            if type(detail) is not bytes:
                if not isinstance(detail, bytes | bytearray | memoryview):
                    raise ValueError("outcome detail must be bytes")
                detail = bytes(detail)
            if len(detail) > self.max_detail:
                detail = detail[:self.max_detail]
            dlen = len(detail)
            got = c.dmap.get(detail) if c.dmap is not None else None
            if got is None:
                doff = len(c.heap)
                new_detail = True
            else:
                doff = got
        elif detail != b"":
            raise ValueError("outcome detail must be bytes")
        slot = c.n
        fin = c.fin
        try:
            _REC.pack_into(c.recs, slot * _RSIZE, raw, created, attempts, qi, doff, dlen)
            fin[slot] = finished
        except (struct.error, TypeError, OverflowError) as err:
            raise ValueError(f"bad outcome for job {job_id!r}: {err}") from None
        # Validated: from here on nothing fails.
        if new_queue:
            c.queues.append(queue)
            qmap[queue] = qi
            grow = sys.getsizeof(queue) + _QUEUE_ENTRY_OVERHEAD
            c.mem += grow
            self._mem += grow
        if new_detail:
            c.heap += detail
            c.mem += dlen
            self._mem += dlen
            if c.dmap is not None and len(c.dmap) < _MAX_DEDUP:
                c.dmap[detail] = doff
        c.st[slot] = state
        c.n = slot + 1
        c.live += 1
        self._live += 1
        self._version += 1
        order = c.order
        if order is not None:
            if not order or finished >= fin[order[-1]]:
                order.append(slot)
            else:
                c.order = None
        if finished < c.minf:
            c.minf = finished
            heap = self._heap
            heapq.heappush(heap, (finished, c.seq, c.wid))
            if len(heap) > 2 * len(self._chunks) + 16:  # stale entries from time going back
                self._heap = [(x.minf, x.seq, x.wid) for x in self._chunks.values() if x.live]
                heapq.heapify(self._heap)
        if slot + 1 == c.cap:
            c.qmap = c.dmap = None  # sealed: the tables are only needed to append
        # The index: point the ID at the new record; an older record for it dies.
        entry_rec = (c.wid << _CHUNK_BITS) | slot
        h = hash(raw)
        si = h & _SHARD_MASK
        tab = self._shards[si]
        if tab is None:
            tab = self._shards[si] = array("Q", bytes(8 * _SHARD_MIN))
            self._mem += 8 * _SHARD_MIN + _SHARD_OVERHEAD
        key = ((h >> _SHARD_BITS) & _HASH_MASK) | _OCCUPIED
        size = len(tab)
        mask = size - 1
        i = key & mask
        while True:
            e = tab[i]
            if not e:
                tab[i] = (key << _REC_BITS) | entry_rec
                counts = self._counts
                count = counts[si] = counts[si] + 1
                if count * 10 > size * 7:
                    self._resize(si, size * 2)
                break
            if e >> _REC_BITS == key:
                old = self._chunks[(e & _REC_MASK) >> _CHUNK_BITS]
                oslot = e & _SLOT_MASK
                if old.recs.startswith(raw, oslot * _RSIZE):
                    tab[i] = (key << _REC_BITS) | entry_rec
                    self._kill(old, oslot)
                    break
            i = (i + 1) & mask
        if self._mem > self._max_bytes:
            self._enforce()

    def get(self, job_id: str) -> Outcome | None:
        """The outcome of ``job_id``, or None when none is kept."""
        return self._find(_raw_id(job_id), job_id)

    def get_raw(self, raw: bytes) -> Outcome | None:
        """:meth:`get` for a caller holding the ID as bytes, known valid (the node's
        commands after job_ids()): no decode here and encode back in get()."""
        return self._find(raw, None)

    def _find(self, raw: bytes, job_id: str | None) -> Outcome | None:
        h = hash(raw)
        tab = self._shards[h & _SHARD_MASK]
        if tab is None:
            return None
        key = ((h >> _SHARD_BITS) & _HASH_MASK) | _OCCUPIED
        mask = len(tab) - 1
        i = key & mask
        chunks = self._chunks
        while True:
            e = tab[i]
            if not e:
                return None
            if e >> _REC_BITS == key:
                c = chunks[(e & _REC_MASK) >> _CHUNK_BITS]
                slot = e & _SLOT_MASK
                if c.recs.startswith(raw, slot * _RSIZE):
                    return _outcome(c, slot, job_id)
            i = (i + 1) & mask

    def expire(self, now: int) -> int:
        """Drop the outcomes with ``finished_ms + retention_ms <= now``; how many."""
        return self._drop(now - self._retention, -1)

    def next_expiry(self) -> int | None:
        """When the oldest kept outcome expires (ms), or None when the store is empty."""
        c = self._settle()
        return None if c is None else c.minf + self._retention

    def __iter__(self) -> Iterator[Outcome]:
        # A lazy merge of the chunks by (finished_ms, chunk, position): a chunk enters the
        # heap under its minf (a lower bound) and is sorted only when that reaches the top,
        # so with outcomes mostly in finished order only one or two are sorted at a time.
        version = self._version
        heap: list[tuple[int, int, int, _Chunk, array[int]]] = [
            (c.minf, c.seq, -1, c, _NO_ORDER) for c in self._chunks.values() if c.live]
        heapq.heapify(heap)
        while heap:
            if self._version != version:
                raise RuntimeError("outcomes changed during iteration")
            _f, seq, k, c, order = heap[0]
            if k < 0:
                st = c.st
                order = array("H", sorted((s for s in range(c.n) if st[s] != _DEAD),
                                          key=c.fin.__getitem__))
            else:
                yield _outcome(c, order[k], None)
            k += 1
            if k < len(order):
                heapq.heapreplace(heap, (c.fin[order[k]], seq, k, c, order))
            else:
                heapq.heappop(heap)

    def recent(self, before: int, count: int, states: int, queues: frozenset[str] | None,
               budget: int) -> tuple[int, list[tuple[int, Outcome]]]:
        """The live outcomes recorded last first (the order they finished in on this
        node): those at record positions below ``before`` (0: from the newest), at most
        ``count``, in one of ``states`` (a bit per state; 0: any) and ``queues`` (None:
        any). At most ``budget`` records are looked at (0: no limit). Returns the
        position to continue from (0 when none is left) and ``(position, outcome)``
        pairs. A position stays valid while the store changes: records only leave, and
        new ones come above every position handed out."""
        out: list[tuple[int, Outcome]] = []
        looked = 0
        qset: frozenset[int] = frozenset()
        for c in reversed(list(self._chunks.values())):  # insertion order: oldest first
            base = c.seq << _CHUNK_BITS
            if before and base >= before:
                continue
            top = min(c.n, before - base) if before else c.n
            qi = -1
            if queues is not None:
                names = c.queues
                wanted = [i for i in range(len(names)) if names[i] in queues]
                if not wanted or not c.live:
                    looked += 1
                    if budget and looked >= budget:
                        return base, out  # the chunk is done: continue below it
                    continue
                qi = wanted[0] if len(wanted) == 1 else -2
                qset = frozenset(wanted)
            st, recs = c.st, c.recs
            for slot in range(top - 1, -1, -1):
                looked += 1
                state = st[slot]
                if state != _DEAD and (not states or states >> state & 1):
                    keep = True
                    if qi != -1:
                        off = slot * _RSIZE + _QUEUE_AT
                        q = recs[off] | recs[off + 1] << 8
                        keep = q == qi if qi >= 0 else q in qset
                    if keep:
                        out.append((base | slot, _outcome(c, slot, None)))
                        if len(out) >= count:
                            return base | slot, out
                if budget and looked >= budget:
                    return base | slot, out
        return 0, out

    def chunks(self) -> list[object]:
        """The store's chunks as they are now, oldest first: handles for ``live_in``,
        for a caller that reads the store a chunk at a time while it changes."""
        return [c for c in sorted(self._chunks.values(), key=_chunk_seq) if c.live]

    def live_in(self, chunk: object) -> list[Outcome]:
        """The outcomes still kept of a chunk from ``chunks()`` (none once it is freed)."""
        assert isinstance(chunk, _Chunk)
        if self._chunks.get(chunk.wid) is not chunk:
            return []
        st = chunk.st
        return [_outcome(chunk, s, None) for s in range(chunk.n) if st[s] != _DEAD]

    # --- chunks -------------------------------------------------------------------------

    def _new_chunk(self) -> _Chunk:
        old = self._open
        if old is not None:
            old.qmap = old.dmap = None
            if old.live == 0:
                self._free(old)
        self._seq += 1
        wid = self._seq & _WID_MASK
        while wid in self._chunks:  # only after 2**23 chunks, one of them still live
            self._seq += 1
            wid = self._seq & _WID_MASK
        cap = max(_CHUNK_MIN, min(_CHUNK_MAX, self._max_bytes // (64 * _REC_BYTES)))
        c = _Chunk(self._seq, wid, cap)
        self._chunks[wid] = c
        self._open = c
        self._mem += c.mem
        return c

    def _free(self, c: _Chunk) -> None:
        del self._chunks[c.wid]
        self._mem -= c.mem
        if c is self._open:
            self._open = None

    def _kill(self, c: _Chunk, slot: int) -> None:
        """Mark a record dead (its index entry is already gone or replaced)."""
        c.st[slot] = _DEAD
        c.live -= 1
        self._live -= 1
        self._version += 1
        if c.live == 0 and c is not self._open:
            self._free(c)

    def _settle(self) -> _Chunk | None:
        """Make the heap's top exact; the chunk holding the oldest live outcome, or None."""
        heap = self._heap
        chunks = self._chunks
        while heap:
            minf, seq, wid = heap[0]
            c = chunks.get(wid)
            if c is None or c.seq != seq or c.live == 0:
                heapq.heappop(heap)
                if c is not None and c.seq == seq:
                    c.minf = _INF  # an empty open chunk: its next record pushes it again
                continue
            order = c.order
            st = c.st
            if order is None:
                fin = c.fin
                order = c.order = array("H", sorted(
                    (s for s in range(c.n) if st[s] != _DEAD), key=fin.__getitem__))
                c.pos = 0
            pos = c.pos
            while st[order[pos]] == _DEAD:
                pos += 1
            c.pos = pos
            f = c.fin[order[pos]]
            if f != minf:
                c.minf = f
                heapq.heapreplace(heap, (f, seq, wid))
                continue
            return c
        return None

    def _drop(self, cutoff: int, limit: int) -> int:
        """Drop outcomes oldest first: those finished at or before cutoff, or ``limit``."""
        n = 0
        while n != limit:
            c = self._settle()
            if c is None or c.minf > cutoff:
                break
            order, st, fin, recs = c.order, c.st, c.fin, c.recs
            assert order is not None  # _settle sorted it
            pos, end = c.pos, len(order)
            base = c.wid << _CHUNK_BITS
            index_del = self._index_del
            first = n
            # this chunk's outcomes go in a run while they stay older than every other
            # chunk's: below the next heap entry (a lower bound of the next chunk's
            # oldest; an equal finished time goes to the chunk that arrived first)
            heap = self._heap
            nxt = heap[1] if len(heap) > 1 else (_INF, 0, 0)
            if len(heap) > 2 and heap[2] < nxt:
                nxt = heap[2]
            bound, bseq = (cutoff, _INF) if cutoff < nxt[0] else (nxt[0], nxt[1])
            seq = c.seq
            while pos < end and n != limit:
                slot = order[pos]
                if st[slot] != _DEAD:
                    f = fin[slot]
                    if f > bound or (f == bound and seq > bseq):
                        break
                    off = slot * _RSIZE
                    index_del(bytes(recs[off:off + JOB_ID_LEN]), base | slot)
                    st[slot] = _DEAD
                    n += 1
                pos += 1
            c.pos = pos
            c.live -= n - first
            self._live -= n - first
            self._version += 1
            if c.live == 0 and c is not self._open:
                self._free(c)
        return n

    def _enforce(self) -> None:
        # Memory comes back a chunk at a time, so ask (oldest first) for as many as the
        # chunk holding the oldest outcome has live, not one per pass: one _drop call
        # and one _settle per run of a chunk instead of per outcome (at a 4 MB cap,
        # 300k records: 3.8 -> 2.7 us a record interpreted, 2.2 us compiled). Outcomes
        # of other chunks may be among the oldest, so a pass can drop up to a chunk more
        # than strictly needed.
        while self._mem > self._max_bytes and self._live:
            c = self._settle()
            assert c is not None  # live outcomes exist
            self.dropped += self._drop(_INF, c.live)
        o = self._open
        if self._mem > self._max_bytes and o is not None and o.live == 0:
            self._free(o)

    # --- the index ----------------------------------------------------------------------

    def _index_del(self, raw: bytes, recno: int) -> None:
        h = hash(raw)
        si = h & _SHARD_MASK
        tab = self._shards[si]
        assert tab is not None
        entry = ((((h >> _SHARD_BITS) & _HASH_MASK) | _OCCUPIED) << _REC_BITS) | recno
        mask = len(tab) - 1
        i = (entry >> _REC_BITS) & mask
        while tab[i] != entry:
            i = (i + 1) & mask
        j = i
        while True:  # shift back the entries after i that may live closer to home
            j = (j + 1) & mask
            e = tab[j]
            if not e:
                break
            k = (e >> _REC_BITS) & mask
            if (k <= i < j) or (i < j < k) or (j < k <= i):
                tab[i] = e
                i = j
        tab[i] = 0
        count = self._counts[si] = self._counts[si] - 1
        if not count:
            self._shards[si] = None
            self._mem -= 8 * len(tab) + _SHARD_OVERHEAD
        elif count * 8 < len(tab) and len(tab) > _SHARD_MIN:
            self._resize(si, len(tab) // 2)

    def _resize(self, si: int, size: int) -> None:
        old = self._shards[si]
        assert old is not None
        tab = array("Q", bytes(8 * size))
        mask = size - 1
        for e in old:
            if e:
                i = (e >> _REC_BITS) & mask
                while tab[i]:
                    i = (i + 1) & mask
                tab[i] = e
        self._shards[si] = tab
        self._mem += 8 * (size - len(old))


def _chunk_seq(c: _Chunk) -> int:
    return c.seq


def _non_negative(name: str, value: int) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"{name} must be an integer >= 0")
    return value


def _raw_id(job_id: str) -> bytes:
    try:
        raw = job_id.encode("latin-1")
    except (UnicodeEncodeError, AttributeError):
        raw = b""
    if not is_valid_job_id(raw):
        raise _bad_id(job_id)
    return raw


def _bad_id(job_id: object) -> ValueError:
    return ValueError(f"invalid job ID {job_id!r}: a job ID is {JOB_ID_LEN} characters, "
                      "D-<8 hex>-<24 base64>-<4 hex>")


def _outcome(c: _Chunk, slot: int, job_id: str | None) -> Outcome:
    raw, created, attempts, qi, doff, dlen = _REC.unpack_from(c.recs, slot * _RSIZE)
    return _new_tuple(Outcome, (  # Outcome(...) without its Python-level __new__
        raw.decode("latin-1") if job_id is None else job_id, c.st[slot], c.queues[qi],
        attempts, created, c.fin[slot], bytes(c.heap[doff:doff + dlen]) if dlen else b""))


_new_tuple = tuple.__new__
