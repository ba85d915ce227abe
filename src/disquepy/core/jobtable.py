"""The job registry: job ID -> Job, an open-addressing hash table in typed arrays.

A lookup should touch one cache line at a random place, not the chain of objects a
dict is (its index and entry, both random; with one of 16384 partition dicts per ID,
a quarter of a consumed job's CPU at a million jobs went to those misses). So the
registry is 256 shards, each two arrays:

* ``jobs``, the shard's jobs in the order they were registered (a list, with holes
  where jobs left, closed when they outnumber the jobs). Jobs are consumed about in
  the order they were created, so consecutive lookups read consecutive slots of it:
  its lines are in the cache when needed, as are the jobs' own (allocated in order).
  For the same reason holes gather at its front: those are dropped with one memmove,
  positions being counted from a per-shard base (mod 2**32) that moves instead.
* ``tab``, a linear-probing table (``librt.vecs`` ``vec[i64]``, which mypyc compiles to
  plain C loads and stores; the same code runs interpreted) of 64-bit entries: an
  occupied bit and 30 bits of the ID's hash over the job's position in ``jobs``
  (32 bits; 0: an empty slot). A probe reads only ``tab`` until the hash bits match;
  the job's full ID then confirms it, so a collision never answers for another job.
  Deletion shifts the following entries back (no tombstones).

The hash is Python's ``hash()`` of the ID bytes: keyed per process (SipHash), so IDs
crafted to collide (a client can ACKJOB made-up IDs, which a cluster node registers as
dummy acks) cannot pile up in one probe run; the node's own IDs cache theirs. Each shard
grows, shrinks and compacts on its own, from its entries alone (no job touched), so no
pause grows with the whole registry. A job costs 8 bytes in ``jobs`` (up to twice that
with holes) and 8 per table slot at a load between 3/8 and 3/4: ~25 bytes at a million
jobs (the partition dicts cost ~37).

JSCAN's stateless cursor must return every job present for the whole scan despite
inserts, deletes and resizes between calls. It walks the shards in turn and, within a
shard, *home buckets* (hash bits & mask) in reverse-binary order, as Redis's SCAN does:
the buckets a home bucket becomes in a table twice as big (or half as big) are visited
together in that order, so a resize between calls skips no job (a shrink may repeat
some). Visiting a home bucket returns the jobs of that home, all found in the run of
occupied slots starting at it (linear probing keeps every entry within the unbroken
run from its home). Compacting ``jobs`` changes positions, never where entries sit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Final, cast

from librt.vecs import vec
from mypy_extensions import i64

from .probing import delete, rehash, zeros

if TYPE_CHECKING:
    from .job import Job

_SHARD_BITS: Final = 8
NSHARDS: Final = 1 << _SHARD_BITS
_SHARD_MASK: Final = NSHARDS - 1
_MIN_SIZE: Final = 8  # slots of a shard's smallest table (a power of two)
_POS_BITS: Final = 32  # an entry's low bits: the job's position in the shard's list
_POS_MASK: Final = (1 << _POS_BITS) - 1
_KEY_BITS: Final = 30  # the hash bits kept above them (a table has <= 2**30 slots)
_KEY_MASK: Final = (1 << _KEY_BITS) - 1
_OCCUPIED: Final = 1 << _KEY_BITS
_CUR_BITS: Final = 32  # a cursor's position within a shard
_CUR_MASK: Final = (1 << _CUR_BITS) - 1
_CURSOR_END: Final = NSHARDS << _CUR_BITS  # cursors at or past it start over


def _key(h: i64) -> i64:
    """The stored key of a hash: bits above the shard's, with the occupied bit."""
    return ((h >> _SHARD_BITS) & _KEY_MASK) | _OCCUPIED


def _rev32(v: i64) -> i64:
    """The 32 low bits of ``v`` (< 2**32) in reverse order."""
    v = ((v >> 1) & 0x55555555) | ((v & 0x55555555) << 1)
    v = ((v >> 2) & 0x33333333) | ((v & 0x33333333) << 2)
    v = ((v >> 4) & 0x0F0F0F0F) | ((v & 0x0F0F0F0F) << 4)
    v = ((v >> 8) & 0x00FF00FF) | ((v & 0x00FF00FF) << 8)
    return ((v >> 16) & 0xFFFF) | ((v & 0xFFFF) << 16)


class _Shard:
    """``jobs``: the shard's jobs by registration (None: a hole); ``tab``: the table of
    ``key << 32 | position`` entries, a job's position being its index in ``jobs`` plus
    ``base`` (mod 2**32: holes dropped from the front of ``jobs`` move no entry);
    ``head``: the leading holes of ``jobs``; ``n``: the jobs registered."""

    __slots__ = ("tab", "jobs", "base", "head", "n")

    def __init__(self) -> None:
        self.tab: vec[i64] = zeros(_MIN_SIZE)
        self.jobs: list[Job | None] = []
        self.base: i64 = 0
        self.head: i64 = 0
        self.n: i64 = 0


class JobTable:
    """``count``: the jobs registered (public, read by tests and benchmarks)."""

    __slots__ = ("shards", "count")

    def __init__(self) -> None:
        self.shards: list[_Shard] = [_Shard() for _ in range(NSHARDS)]
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def __contains__(self, jid: bytes) -> bool:
        return self.get(jid) is not None

    def get(self, jid: bytes) -> Job | None:
        h: i64 = hash(jid)
        sh = self.shards[h & _SHARD_MASK]
        i = _probe(sh, _key(h), jid)
        return sh.jobs[(sh.tab[i] - sh.base) & _POS_MASK] if i >= 0 else None

    def add(self, job: Job) -> bool:
        """Insert; False (and nothing changed) if the ID is already registered."""
        h: i64 = hash(job.id)
        sh = self.shards[h & _SHARD_MASK]
        key = _key(h)
        i = _probe(sh, key, job.id)
        if i >= 0:
            return False
        tab = sh.tab
        jobs = sh.jobs
        tab[-1 - i] = (key << _POS_BITS) | ((sh.base + len(jobs)) & _POS_MASK)
        jobs.append(job)
        n = sh.n + 1
        sh.n = n
        self.count += 1
        size: i64 = len(tab)
        if n * 4 > size * 3:
            sh.tab = rehash(tab, size * 2, _POS_BITS)
        return True

    def remove(self, job: Job) -> bool:
        """Unregister this very job (not another holding its ID); False if it is not."""
        h: i64 = hash(job.id)
        sh = self.shards[h & _SHARD_MASK]
        i = _probe(sh, _key(h), job.id)
        if i < 0:
            return False
        tab = sh.tab
        jobs = sh.jobs
        at = (tab[i] - sh.base) & _POS_MASK
        if jobs[at] is not job:
            return False
        jobs[at] = None
        if at == sh.head:  # the first jobs leave first: follow the run of holes they leave
            slots = cast("list[object]", jobs)  # (read untyped: no look at the next job)
            at += 1
            while at < len(slots) and slots[at] is None:
                at += 1
            sh.head = at
        delete(tab, i, _POS_BITS)
        n = sh.n - 1
        sh.n = n
        self.count -= 1
        size: i64 = len(tab)
        if n * 8 < size and size > _MIN_SIZE:
            sh.tab = rehash(tab, size // 2, _POS_BITS)
        if n * 2 < len(jobs) and (len(jobs) > _MIN_SIZE or n == 0):
            head = sh.head
            if (len(jobs) - head) <= n * 2:  # the holes are mostly the first slots
                del jobs[:head]  # drop them: positions are counted from base
                sh.base = (sh.base + head) & _POS_MASK
                sh.head = 0
            else:
                _compact(sh)
        return True

    def values(self) -> Iterator[Job]:
        """Every job, a shard at a time (each listed when reached: the registry may
        change between two jobs yielded)."""
        for sh in self.shards:
            if sh.n:
                yield from [j for j in sh.jobs if j is not None]

    def clear(self) -> None:
        self.shards = [_Shard() for _ in range(NSHARDS)]
        self.count = 0

    def scan(self, cursor: int, count: int, busyloop: bool,
             keep: Callable[[Job], bool]) -> tuple[int, list[Job]]:
        """The jobs (those ``keep`` accepts) of the home buckets from ``cursor`` on;
        returns (the next cursor, 0 when the scan is done, and the jobs). About
        ``count`` jobs, or ``count * 10`` buckets and entries looked at, per call;
        all at once with ``busyloop``. A cursor is ``(position << 8) | shard``, the
        position a reverse-binary bucket number (any other number starts over)."""
        out: list[Job] = []
        if not 0 <= cursor < _CURSOR_END:
            cursor = 0
        c: i64 = cursor
        si: i64 = c & _SHARD_MASK
        v: i64 = c >> _SHARD_BITS
        budget: i64 = count * 10 if count < 1 << 40 else 1 << 40
        work: i64 = 0
        while si < NSHARDS:
            sh = self.shards[si]
            tab = sh.tab
            jobs = sh.jobs
            base = sh.base
            mask: i64 = len(tab) - 1
            while sh.n:
                b: i64 = v & mask
                i: i64 = b
                while True:  # the run from b holds every entry whose home is b
                    e = tab[i]
                    if e == 0:
                        break
                    if (e >> _POS_BITS) & mask == b:
                        job = jobs[(e - base) & _POS_MASK]
                        if job is not None and keep(job):
                            out.append(job)
                        work += 1
                    i = (i + 1) & mask
                work += 1
                # the next bucket in reverse-binary order: set the bits above the mask,
                # add one to the reversed number; past the last bucket: shard done
                r = _rev32(v | (_CUR_MASK ^ mask)) + 1
                if r > _CUR_MASK:
                    break
                v = _rev32(r)
                if not busyloop and (len(out) >= count or work >= budget):
                    return (v << _SHARD_BITS) | si, out
            si += 1
            v = 0
            if si < NSHARDS and not busyloop and (len(out) >= count or work >= budget):
                return si, out
        return 0, out


def _probe(sh: _Shard, key: i64, jid: bytes) -> i64:
    """The slot of ``sh.tab`` holding the job whose ID is ``jid``; if none, -1 - the
    empty slot that ends the probe run (where it would go)."""
    tab = sh.tab
    mask: i64 = len(tab) - 1
    i: i64 = key & mask
    while True:
        e = tab[i]
        if e >> _POS_BITS == key:
            job = sh.jobs[(e - sh.base) & _POS_MASK]
            if job is not None and job.id == jid:
                return i
        elif e == 0:
            return -1 - i
        i = (i + 1) & mask


def _compact(sh: _Shard) -> None:
    """Close the holes of a shard's list, keeping its order; entries follow their job."""
    old = sh.jobs
    moved = zeros(len(old))  # old index -> new position
    jobs: list[Job | None] = []
    base = sh.base
    for p in range(len(old)):
        job = old[p]
        if job is not None:
            moved[p] = (base + len(jobs)) & _POS_MASK
            jobs.append(job)
    tab = sh.tab
    for q in range(len(tab)):
        e = tab[q]
        if e:
            tab[q] = (e & ~_POS_MASK) | moved[(e - base) & _POS_MASK]
    sh.jobs = jobs
    sh.head = 0
