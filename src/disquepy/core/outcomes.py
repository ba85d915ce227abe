"""How jobs ended, kept for a retention after the job itself is gone.

An outcome is a small fixed record: the job ID, how it ended (completed, failed,
cancelled, expired), its queue, attempts, when it was created and finished, and a
short detail (the worker's result or the error). A node at 10k finished jobs per second
keeps 36M of them for the default hour, so the store packs them instead of keeping one
Python object each (a dict of tuples costs 300+ bytes per entry; this costs under 100).

Layout:

* **Chunks.** Records are appended to the open chunk as columns of fixed-width typed
  arrays (``librt.vecs.vec``, which mypyc compiles to plain C loads and stores; the
  same code runs interpreted): the job IDs (``vec[u8]``, 40 bytes each), created and
  finished times, attempts with the queue's index, the detail's offset and length
  (``vec[i64]``) and a state byte (``vec[u8]``; a removed record's byte becomes
  ``_DEAD``). Queue names and details are stored once per chunk (a per-chunk name
  table; details in a per-chunk byte heap, repeated ones shared while the chunk is
  open), so repeated queue names and errors cost nothing more a record. A chunk is
  freed whole when its last live record goes.
* **Index.** ID → record number, a linear-probing hash table of 64-bit entries
  (occupied bit, 27 hash bits, 35-bit record number) split in 256 shards, each a
  ``vec[i64]`` that grows and shrinks on its own, so no resize ever touches more than
  1/256 of the entries (an empty shard is freed): at 36M outcomes, a 2 MB table
  rehashed in a millisecond or two. Few enough shards that their handles stay in the
  CPU's cache (with 4096, finding a record's shard was a cache miss of its own: a
  quarter of a record's cost at 1M jobs). Deletion shifts entries back (no
  tombstones). A hash match is
  always confirmed against the stored ID: a collision never answers for another job.
* **Expiry order.** Outcomes leave oldest first by ``(finished_ms, arrival)``, exactly:
  a heap holds each chunk's smallest live ``finished_ms``; the chunk at the top is
  sorted once (its live slots by finished time) and consumed from the front. Outcomes
  mostly arrive in finished order, so almost only the oldest chunk is ever sorted, and
  expiry and eviction cost O(log chunks) plus O(1) per dropped outcome.
* **Batches.** ``record_many`` stores the outcomes of one command (an ACKJOB of 100
  IDs) in one call: one state check, the open chunk and the last queue's index reused,
  the memory bound checked once.

Pure: time comes in as ``now`` (ms), nothing here reads a clock.
"""

from __future__ import annotations

import heapq
import sys
from collections.abc import Iterator
from typing import Final, NamedTuple

from librt.vecs import append as vappend
from librt.vecs import extend, vec
from mypy_extensions import i16, i64, u8

from .ids import JOB_ID_LEN, is_valid_job_id
from .probing import delete, rehash, zeros

COMPLETED: Final = 1
FAILED: Final = 2
CANCELLED: Final = 3
EXPIRED: Final = 4
STATE_NAMES: Final[dict[int, str]] = {
    COMPLETED: "completed",
    FAILED: "failed",
    CANCELLED: "cancelled",
    EXPIRED: "expired",
}

DEFAULT_RETENTION_MS: Final = 3_600_000
DEFAULT_MAX_BYTES: Final = 256 * 1024 * 1024
DEFAULT_MAX_DETAIL: Final = 1024
MAX_DETAIL_LIMIT: Final = 0xFFFF  # a detail's length: 16 bits of the record's detail column
MAX_ATTEMPTS: Final = 0xFFFF_FFFF  # attempts: 32 bits of the record's meta column


class Outcome(NamedTuple):
    """How one job ended. ``detail``: the result (COMPLETED), the error (FAILED), else b''."""

    job_id: str
    state: int
    queue: str
    attempts: int
    created_ms: int
    finished_ms: int
    detail: bytes


_IDLEN: Final = JOB_ID_LEN
# a record: its ID, created, finished, meta (attempts | queue index << 32), detail
# (offset << 16 | length) and its state byte
_REC_BYTES: Final = JOB_ID_LEN + 4 * 8 + 1
_DEAD: Final = 0
_INF: Final = 1 << 62
_MIN_TIME: Final = -(1 << 62)  # times out of (-2**62, 2**62) are refused

_CHUNK_BITS: Final = 12
_CHUNK_MAX: Final = 1 << _CHUNK_BITS  # records per chunk at most
_CHUNK_MIN: Final = 16
_SLOT_MASK: Final = _CHUNK_MAX - 1
_REC_BITS: Final = 35  # record number = (chunk id << 12) | slot
_REC_MASK: Final = (1 << _REC_BITS) - 1
_WID_MASK: Final = _REC_MASK >> _CHUNK_BITS
_HASH_BITS: Final = 27
_HASH_MASK: Final = (1 << _HASH_BITS) - 1
_OCCUPIED: Final = 1 << _HASH_BITS  # bit 62 of an entry, seen after the >> 35
_SHARD_BITS: Final = 8
_NSHARDS: Final = 1 << _SHARD_BITS
_SHARD_MASK: Final = _NSHARDS - 1
_SHARD_MIN: Final = 8
_MAX_DEDUP: Final = 64  # distinct details shared per open chunk
_MAX_QUEUES: Final = 0xFFFF  # queue names per chunk (at most one per record: 4096)

# What the store accounts beyond the packed bytes (measured with tracemalloc, rounded up).
_CHUNK_OVERHEAD: Final = 1024
_SHARD_OVERHEAD: Final = 80
_SHARD_LIST_BYTES: Final = 8 * _NSHARDS + 64
_QUEUE_ENTRY_OVERHEAD: Final = 8 + 100  # list slot plus the open chunk's dict entry

_NO_TAB: Final[vec[i64]] = vec[i64]()  # an empty shard (a vec, not None: no boxing when compiled)
_NO_ORDER: Final[vec[i16]] = vec[i16]()


class _Chunk:
    __slots__ = ("seq", "wid", "cap", "n", "live", "ids", "created", "fin", "meta", "det",
                 "st", "heap", "queues", "qmap", "dmap", "order", "sorted", "pos", "minf",
                 "mem")

    def __init__(self, seq: int, wid: int, cap: int) -> None:
        self.seq = seq  # arrival order of chunks (never wraps)
        self.wid = wid  # the id used in record numbers (wraps, never reused while live)
        self.cap = cap
        self.n: i64 = 0
        self.live: i64 = 0
        self.ids: vec[u8] = vec[u8](capacity=cap * _IDLEN)
        self.created: vec[i64] = vec[i64](capacity=cap)
        self.fin: vec[i64] = vec[i64](capacity=cap)
        self.meta: vec[i64] = vec[i64](capacity=cap)
        self.det: vec[i64] = vec[i64](capacity=cap)
        self.st: vec[u8] = vec[u8](capacity=cap)
        self.heap = bytearray()
        self.queues: list[str] = []
        self.qmap: dict[bytes, int] | None = {}
        self.dmap: dict[bytes, int] | None = {}
        self.order: vec[i16] = vec[i16](capacity=cap)  # live slots by finished time, from pos
        self.sorted = True  # order holds every slot in finished order (else: sort first)
        self.pos: i64 = 0
        self.minf: i64 = _INF  # <= the smallest live finished_ms; exact after _settle
        self.mem = _CHUNK_OVERHEAD + cap * _REC_BYTES


def _same_id(c: _Chunk, slot: i64, raw: bytes) -> bool:
    """Whether record ``slot`` of ``c`` holds the job ID ``raw`` (40 bytes)."""
    ids = c.ids
    off = slot * _IDLEN
    for k in range(_IDLEN):  # noqa: SIM110 (compiled: a C loop; all() would be a generator)
        if ids[off + k] != raw[k]:
            return False
    return True


def _id_at(c: _Chunk, slot: i64) -> bytes:
    off = slot * _IDLEN
    return bytes(c.ids[off:off + _IDLEN])


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
        self._shards: list[vec[i64]] = [_NO_TAB] * _NSHARDS
        self._counts: vec[i64] = zeros(_NSHARDS)
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
        range (attempts: 0..2**32-1; times: within +-2**62), storing nothing.
        """
        job_id, state, queue, attempts, created, finished, detail = o
        try:
            raw = job_id.encode("latin-1")
        except (UnicodeEncodeError, AttributeError):
            raw = b""
        if not is_valid_job_id(raw):
            raise _bad_id(job_id)
        if type(queue) is not str:
            raise ValueError("outcome queue must be a str")
        self.record_raw(raw, state, _queue_bytes(queue), attempts, created, finished,
                        detail)

    def record_raw(self, raw: bytes, state: int, queue: bytes, attempts: int, created: int,
                   finished: int, detail: bytes) -> None:
        """:meth:`record` for a caller whose job ID is known valid (the node's own, as
        bytes) and whose queue name is bytes (as the node holds it, read as latin-1):
        no Outcome tuple, no ID encoding or check. The other fields are checked as in
        record()."""
        self.record_many([raw], state, [queue], [attempts], [created], finished, detail)

    def record_many(self, raws: list[bytes], state: int, queues: list[bytes],
                    attempts: list[int], created: list[int], finished: int,
                    detail: bytes = b"") -> None:
        """Store the outcomes of a batch that ended the same way at the same time (an
        ACKJOB's jobs): ``raws[i]`` (a valid job ID, as bytes) in ``queues[i]`` with
        ``attempts[i]`` and ``created[i]``; one ``state``, ``finished`` time and
        ``detail`` for all. Each is :meth:`record_raw`'s: checked as a whole first
        (ValueError, storing nothing), then stored in order."""
        if state not in STATE_NAMES:
            raise ValueError(f"unknown outcome state {state!r}")
        n = len(raws)
        if len(queues) != n or len(attempts) != n or len(created) != n:
            raise ValueError("record_many: the lists differ in length")
        if not _MIN_TIME < finished < _INF:
            raise ValueError(f"bad outcome finished time {finished!r}")
        for i in range(n):
            a = attempts[i]
            t = created[i]
            if not 0 <= a <= MAX_ATTEMPTS or not _MIN_TIME < t < _INF:
                raise ValueError(f"bad outcome for job {raws[i]!r}: attempts {a!r}, "
                                 f"created {t!r}")
            if type(queues[i]) is not bytes:
                raise ValueError("outcome queue must be bytes")
        dlen = 0
        if detail:
            if type(detail) is not bytes:
                if not isinstance(detail, bytes | bytearray | memoryview):
                    raise ValueError("outcome detail must be bytes")
                detail = bytes(detail)
            if len(detail) > self.max_detail:
                detail = detail[:self.max_detail]
            dlen = len(detail)
        elif detail != b"":
            raise ValueError("outcome detail must be bytes")
        # Validated: from here on nothing fails.
        c = self._open
        last_q = b""
        qi = -1
        for i in range(n):
            if c is None or c.n == c.cap:
                c = self._new_chunk()
                qi = -1
            q = queues[i]
            if qi < 0 or q != last_q:
                qi = self._queue_index(c, q)
                last_q = q
            doff = self._detail_offset(c, detail) if dlen else 0
            self._put(c, raws[i], state, qi, attempts[i], created[i], finished,
                      (doff << 16) | dlen)
        self._version += 1
        if self._mem > self._max_bytes:
            self._enforce()

    def _queue_index(self, c: _Chunk, queue: bytes) -> int:
        qmap = c.qmap
        assert qmap is not None  # the open chunk has its tables
        qi = qmap.get(queue)
        if qi is None:
            qi = len(c.queues)
            name = queue.decode("latin-1")
            c.queues.append(name)
            qmap[queue] = qi
            grow = sys.getsizeof(name) + _QUEUE_ENTRY_OVERHEAD
            c.mem += grow
            self._mem += grow
        return qi

    def _detail_offset(self, c: _Chunk, detail: bytes) -> int:
        dmap = c.dmap
        got = dmap.get(detail) if dmap is not None else None
        if got is not None:
            return got
        doff = len(c.heap)
        c.heap += detail
        c.mem += len(detail)
        self._mem += len(detail)
        if dmap is not None and len(dmap) < _MAX_DEDUP:
            dmap[detail] = doff
        return doff

    def _put(self, c: _Chunk, raw: bytes, state: int, qi: i64, attempts: i64, created: i64,
             finished: i64, det: i64) -> None:
        """Append one checked record to the open chunk ``c`` (not full) and index it."""
        slot: i64 = c.n
        c.ids = extend(c.ids, raw)
        c.created = vappend(c.created, created)
        c.fin = vappend(c.fin, finished)
        c.meta = vappend(c.meta, attempts | (qi << 32))
        c.det = vappend(c.det, det)
        c.st = vappend(c.st, state)
        c.n = slot + 1
        c.live += 1
        self._live += 1
        if c.sorted:
            order = c.order
            if len(order) == 0 or finished >= c.fin[i64(order[len(order) - 1])]:
                c.order = vappend(order, i16(slot))
            else:
                c.sorted = False
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
        entry_rec: i64 = (c.wid << _CHUNK_BITS) | slot
        h: i64 = hash(raw)
        si: i64 = h & _SHARD_MASK
        tab = self._shards[si]
        if len(tab) == 0:
            tab = self._shards[si] = zeros(_SHARD_MIN)
            self._mem += 8 * _SHARD_MIN + _SHARD_OVERHEAD
        key: i64 = ((h >> _SHARD_BITS) & _HASH_MASK) | _OCCUPIED
        size: i64 = len(tab)
        mask: i64 = size - 1
        i: i64 = key & mask
        while True:
            e: i64 = tab[i]
            if e == 0:
                tab[i] = (key << _REC_BITS) | entry_rec
                counts = self._counts
                count: i64 = counts[si] + 1
                counts[si] = count
                if count * 10 > size * 7:
                    self._resize(si, size * 2)
                break
            if e >> _REC_BITS == key:
                old = self._chunks[(e & _REC_MASK) >> _CHUNK_BITS]
                oslot: i64 = e & _SLOT_MASK
                if _same_id(old, oslot, raw):
                    tab[i] = (key << _REC_BITS) | entry_rec
                    self._kill(old, oslot)
                    break
            i = (i + 1) & mask

    def get(self, job_id: str) -> Outcome | None:
        """The outcome of ``job_id``, or None when none is kept."""
        return self._find(_raw_id(job_id), job_id)

    def get_raw(self, raw: bytes) -> Outcome | None:
        """:meth:`get` for a caller holding the ID as bytes, known valid (the node's
        commands after job_ids()): no decode here and encode back in get()."""
        return self._find(raw, None)

    def _find(self, raw: bytes, job_id: str | None) -> Outcome | None:
        h: i64 = hash(raw)
        tab = self._shards[h & _SHARD_MASK]
        if len(tab) == 0:
            return None
        key: i64 = ((h >> _SHARD_BITS) & _HASH_MASK) | _OCCUPIED
        mask: i64 = len(tab) - 1
        i: i64 = key & mask
        chunks = self._chunks
        while True:
            e: i64 = tab[i]
            if e == 0:
                return None
            if e >> _REC_BITS == key:
                c = chunks[(e & _REC_MASK) >> _CHUNK_BITS]
                slot: i64 = e & _SLOT_MASK
                if _same_id(c, slot, raw):
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
        heap: list[tuple[int, int, int, _Chunk, vec[i16]]] = [
            (c.minf, c.seq, -1, c, _NO_ORDER) for c in self._chunks.values() if c.live]
        heapq.heapify(heap)
        while heap:
            if self._version != version:
                raise RuntimeError("outcomes changed during iteration")
            _f, seq, k, c, order = heap[0]
            if k < 0:
                order = _live_by_finished(c)
            else:
                yield _outcome(c, i64(order[k]), None)
            k += 1
            if k < len(order):
                heapq.heapreplace(heap, (c.fin[i64(order[k])], seq, k, c, order))
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
            st, meta = c.st, c.meta
            for slot in range(top - 1, -1, -1):
                looked += 1
                state = st[slot]
                if state != _DEAD and (not states or states >> state & 1):
                    keep = True
                    if qi != -1:
                        q = meta[slot] >> 32
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

    def _kill(self, c: _Chunk, slot: i64) -> None:
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
            if not c.sorted:
                c.order = _live_by_finished(c)
                c.sorted = True
                c.pos = 0
            order = c.order
            st = c.st
            pos = c.pos
            while st[i64(order[pos])] == _DEAD:
                pos += 1
            c.pos = pos
            f = c.fin[i64(order[pos])]
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
            order, st, fin = c.order, c.st, c.fin
            pos: i64 = c.pos
            end: i64 = len(order)
            base = c.wid << _CHUNK_BITS
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
                slot: i64 = i64(order[pos])
                if st[slot] != _DEAD:
                    f = fin[slot]
                    if f > bound or (f == bound and seq > bseq):
                        break
                    self._index_del(_id_at(c, slot), base | slot)
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

    def _index_del(self, raw: bytes, recno: i64) -> None:
        h: i64 = hash(raw)
        si: i64 = h & _SHARD_MASK
        tab = self._shards[si]
        assert len(tab)
        entry: i64 = ((((h >> _SHARD_BITS) & _HASH_MASK) | _OCCUPIED) << _REC_BITS) | recno
        mask: i64 = len(tab) - 1
        i: i64 = (entry >> _REC_BITS) & mask
        while tab[i] != entry:
            i = (i + 1) & mask
        delete(tab, i, _REC_BITS)
        counts = self._counts
        count: i64 = counts[si] - 1
        counts[si] = count
        if count == 0:
            self._shards[si] = _NO_TAB
            self._mem -= 8 * len(tab) + _SHARD_OVERHEAD
        elif count * 8 < len(tab) and len(tab) > _SHARD_MIN:
            self._resize(si, len(tab) // 2)

    def _resize(self, si: i64, size: i64) -> None:
        old = self._shards[si]
        self._shards[si] = rehash(old, size, _REC_BITS)
        self._mem += 8 * (size - len(old))


def _live_by_finished(c: _Chunk) -> vec[i16]:
    """The chunk's live slots, by finished time (then slot: arrival)."""
    st, fin = c.st, c.fin
    live = [s for s in range(c.n) if st[s] != _DEAD]
    live.sort(key=lambda s: fin[s])
    return vec[i16]([i16(s) for s in live])


def _chunk_seq(c: _Chunk) -> int:
    return c.seq


def _non_negative(name: str, value: int) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"{name} must be an integer >= 0")
    return value


def _queue_bytes(queue: str) -> bytes:
    """A queue name as the node holds it: bytes read as latin-1 (a str outside latin-1,
    which no node queue has, is refused)."""
    try:
        return queue.encode("latin-1")
    except UnicodeEncodeError:
        raise ValueError(f"outcome queue {queue!r} is not latin-1") from None


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


def _outcome(c: _Chunk, slot: i64, job_id: str | None) -> Outcome:
    meta: i64 = c.meta[slot]
    det: i64 = c.det[slot]
    dlen: i64 = det & 0xFFFF
    doff: i64 = det >> 16
    return _new_tuple(Outcome, (  # Outcome(...) without its Python-level __new__
        _id_at(c, slot).decode("latin-1") if job_id is None else job_id, c.st[slot],
        c.queues[meta >> 32], meta & MAX_ATTEMPTS, c.created[slot], c.fin[slot],
        bytes(c.heap[doff:doff + dlen]) if dlen else b""))


_new_tuple = tuple.__new__
