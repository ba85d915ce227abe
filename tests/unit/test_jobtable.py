"""The job registry (core/jobtable.py): an open-addressing table of job IDs in typed
arrays, and JSCAN's stateless cursor over it.

IDs here are ``bytes`` subclasses with a chosen hash, so the tests decide which
shard and home bucket each job lands in: long probe runs, runs that wrap around the
table's end, many jobs on one shard (growing and shrinking it) and full-hash
collisions between different IDs, which real SipHash'd IDs would almost never give.
"""

from __future__ import annotations

import base64
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from disquepy.core.job import Job
from disquepy.core.jobtable import NSHARDS, JobTable


class HashedId(bytes):
    """A job ID whose hash() is chosen by the test (equality stays the bytes')."""

    h: int

    def __new__(cls, raw: bytes, h: int) -> HashedId:
        self = super().__new__(cls, raw)
        self.h = h
        return self

    def __hash__(self) -> int:
        return self.h


def make_id(n: int, h: int | None = None) -> bytes:
    raw = b"D-00000000-" + base64.b64encode(n.to_bytes(18, "big")) + b"-0001"
    assert len(raw) == 40
    return raw if h is None else HashedId(raw, h)


def make_job(n: int, h: int | None = None) -> Job:
    return Job(make_id(n, h), b"q", b"", n, 60)


def scan_all(t: JobTable, count: int = 10) -> list[Job]:
    out: list[Job] = []
    cursor = 0
    for _ in range(1_000_000):
        cursor, got = t.scan(cursor, count, False, lambda j: True)
        out += got
        if cursor == 0:
            return out
    raise AssertionError("the scan did not end")


def test_add_get_remove_real_ids_across_resizes():
    rng = random.Random(7)
    t = JobTable()
    jobs = [make_job(rng.getrandbits(144)) for _ in range(20_000)]
    for j in jobs:
        assert t.add(j)
    assert len(t) == t.count == 20_000
    assert not t.add(jobs[123])  # its ID is known
    assert not t.add(Job(bytes(jobs[123].id), b"q", b"", 0, 60))  # an equal ID, too
    assert len(t) == 20_000
    for j in jobs:
        assert t.get(bytes(j.id)) is j  # found by an equal ID, not only the same object
        assert j.id in t
    assert t.get(make_id(1)) is None and make_id(1) not in t
    assert t.get(b"") is None and t.get(b"not an id") is None
    assert not t.remove(make_job(1))  # never registered
    assert not t.remove(Job(bytes(jobs[0].id), b"q", b"", 0, 60))  # not this very job
    for j in jobs[:19_990]:
        assert t.remove(j)
        assert t.get(j.id) is None
    assert not t.remove(jobs[0])
    assert len(t) == 10 and sorted(map(id, t.values())) == sorted(map(id, jobs[19_990:]))
    assert all(len(sh.tab) <= 16 for sh in t.shards)  # shrunk back
    t.clear()
    assert len(t) == 0 and list(t.values()) == [] and t.get(jobs[-1].id) is None


def test_colliding_hashes_are_told_apart_by_the_full_id():
    t = JobTable()
    jobs = [make_job(n, 42) for n in range(100)]  # one hash: one shard, one probe run
    for j in jobs:
        assert t.add(j)
    assert not t.add(make_job(7, 42))
    for j in jobs:
        assert t.get(make_id(j.ctime, 42)) is j  # an equal ID, another object
    assert t.get(make_id(1000, 42)) is None
    for j in jobs[::2]:
        assert t.remove(j)
    for j in jobs:
        assert (t.get(j.id) is j) == (j.ctime % 2 == 1)
    assert sorted(j.ctime for j in scan_all(t, 3)) == list(range(1, 100, 2))


def test_cursor_values_and_bad_cursors():
    t = JobTable()
    jobs = [make_job(n) for n in range(3000)]
    for j in jobs:
        t.add(j)
    cursor, got = t.scan(0, 5, False, lambda j: True)
    assert cursor > 0 and got
    for bad in (-1, NSHARDS << 32, 1 << 200):  # out of range: start over
        assert t.scan(bad, 5, False, lambda j: True) == t.scan(0, 5, False, lambda j: True)
    cursor, got = t.scan(0, 1, True, lambda j: True)  # BUSYLOOP: everything at once
    assert cursor == 0 and sorted(map(id, got)) == sorted(map(id, jobs))
    cursor, got = t.scan(0, 100, True, lambda j: j.ctime % 3 == 0)
    assert cursor == 0 and sorted(j.ctime for j in got) == list(range(0, 3000, 3))
    assert JobTable().scan(0, 10, False, lambda j: True) == (0, [])


def test_a_call_is_bounded_even_when_nothing_is_kept():
    t = JobTable()
    for n in range(50_000):
        t.add(make_job(n))
    calls = 0
    cursor = 0
    while True:
        cursor, got = t.scan(cursor, 10, False, lambda j: False)
        calls += 1
        assert got == []
        if cursor == 0:
            break
    assert calls > 50_000 // 100  # each call looked at about 10 * COUNT entries


@pytest.mark.parametrize("change", ["grow", "shrink"])
def test_a_resize_between_two_calls_misses_no_job(change):
    """Stop a scan at every point of one shard's table, resize that table (growing it
    8x or shrinking it 16x), finish the scan: every job there throughout came back."""
    rng = random.Random(change)
    serial = 0
    for stop in range(1, 120):
        t = JobTable()
        before = 30 if change == "grow" else 900
        jobs = []
        for _ in range(before):
            serial += 1
            jobs.append(make_job(serial, (rng.getrandbits(40) << 8) | 5))  # all on shard 5
            t.add(jobs[-1])
        cursor, returned = 0, set()
        for _ in range(stop):
            cursor, got = t.scan(cursor, 1, False, lambda j: True)
            returned |= {j.ctime for j in got}
            if cursor == 0:
                break
        size = len(t.shards[5].tab)
        if change == "grow":
            present = {j.ctime for j in jobs}
            for _ in range(300):
                serial += 1
                t.add(make_job(serial, (rng.getrandbits(40) << 8) | 5))
            assert len(t.shards[5].tab) >= 8 * size
        else:
            rng.shuffle(jobs)
            for j in jobs[25:]:
                t.remove(j)
            present = {j.ctime for j in jobs[:25]}
            assert len(t.shards[5].tab) * 16 <= size
        while cursor:
            cursor, got = t.scan(cursor, 1, False, lambda j: True)
            returned |= {j.ctime for j in got}
        assert present <= returned, (stop, sorted(present - returned))


# -- properties: a model dict against the table, and scans under concurrent change --

# A few hash values put many jobs on one shard (home bits in a small range: long runs,
# wrap-around at the table's end, growth to hundreds of slots); others spread out.
hashes = st.one_of(
    st.integers(0, 63).map(lambda home: (home << 8) | 5),
    st.integers(0, 63).map(lambda home: (((1 << 40) - 1 - home) << 8) | 5),
    st.integers(-(1 << 63), (1 << 63) - 1).filter(lambda h: h != -1),
)
op = st.one_of(
    st.tuples(st.just("add"), st.lists(hashes, min_size=1, max_size=80)),
    st.tuples(st.just("del"), st.floats(0, 1), st.integers(0, 2**32)),
    st.tuples(st.just("consume"), st.integers(1, 200)),  # the oldest first, as consumers do
    st.tuples(st.just("scan"), st.integers(1, 8)),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, max_size=60))
def test_table_matches_a_dict_and_scans_keep_their_guarantee(ops):
    t = JobTable()
    for sh in t.shards:  # positions wrap around 2**32 within the test
        sh.base = (1 << 32) - 40
    model: dict[bytes, Job] = {}  # ID (as the job holds it) -> job
    serial = 0
    cursor = 0
    scanning = False
    present_throughout: set[bytes] = set()  # since the current scan started
    seen_during: set[bytes] = set()  # registered at some point of the current scan
    returned: set[bytes] = set()

    for o in ops:
        if o[0] == "add":
            for h in o[1]:
                serial += 1
                j = make_job(serial, h)
                assert t.add(j)
                model[j.id] = j  # keyed by the ID object itself: its own hash
                seen_during.add(bytes(j.id))
        elif o[0] in ("del", "consume"):
            if o[0] == "del":
                rng = random.Random(o[2])
                gone = [k for k in model if rng.random() < o[1]]
            else:
                gone = list(model)[:o[1]]
            for jid in gone:
                assert t.remove(model.pop(jid))
                present_throughout.discard(bytes(jid))
        else:
            if not scanning:
                scanning, cursor = True, 0
                present_throughout = {bytes(k) for k in model}
                seen_during = set(present_throughout)
                returned = set()
            cursor, got = t.scan(cursor, o[1], False, lambda j: True)
            for j in got:
                assert t.get(j.id) is j  # only registered jobs come back
            returned |= {bytes(j.id) for j in got}
            if cursor == 0:
                assert present_throughout <= returned  # nothing present throughout missed
                assert returned <= seen_during  # nothing that was never there
                scanning = False
        assert len(t) == len(model)
        for jid, j in model.items():
            assert t.get(jid) is j
    assert sorted(map(id, t.values())) == sorted(map(id, model.values()))
    assert sorted(map(id, scan_all(t, 7))) == sorted(map(id, model.values()))
    # every entry sits in the unbroken run from its home bucket
    for sh in t.shards:
        mask = len(sh.tab) - 1
        assert sum(1 for e in sh.tab if e) == sh.n == sum(1 for j in sh.jobs if j)
        assert len(sh.jobs) <= 2 * sh.n + 8  # holes compacted
        assert all(j is None for j in sh.jobs[:sh.head])
        assert sh.head == len(sh.jobs) or sh.jobs[sh.head] is not None
        for i, e in enumerate(sh.tab):
            if e:
                assert sh.jobs[(e - sh.base) & 0xFFFF_FFFF] is not None
                p = (e >> 32) & mask
                while p != i:
                    assert sh.tab[p], "an empty slot between an entry and its home"
                    p = (p + 1) & mask
