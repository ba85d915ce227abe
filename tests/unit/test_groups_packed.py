"""The packed event store (core/groups/store.py, in process): held events live in
their queue's columns, a group's DONE claim as a byte, a lease (or redo, or dead
letter) in the queue's side table while it lasts; an event with an IDEMPOTENT key stays
an object; mixed expiries leave holes that a compaction removes without moving a
group's place; the ID index finds every event held and nothing else; used_memory
follows every step exactly (store.memory() counts it afresh)."""

from __future__ import annotations

from nodeharness import Harness

from disquepy.core.groups.model import DONE, claim_deliveries, claim_state
from disquepy.core.groups.store import F_THAWED


def store(h: Harness):
    return h.node.groups.store


def check_accounting(h: Harness, used0: int) -> None:
    assert h.node.mem.used - used0 == store(h).memory()


def thawed(h: Harness, qname: bytes = b"q") -> int:
    q = store(h).queues[qname]
    assert len(q.thawed) == sum(1 for p in store(h).positions(q)
                                if q.meta[p - q.cbase] & F_THAWED)
    return len(q.thawed)


def test_settled_events_are_packed_and_come_back_exact():
    h = Harness()
    used0 = h.node.mem.used
    ids = [h("QADD", "q", 3600, f"body{i}") for i in range(300)]
    s = store(h)
    assert s.count == 300 and thawed(h) == 0  # settled at once: packed
    assert s.ids() == ids
    snap = s.snapshot()  # (what an AOF rewrite and an EVSYNC round walk: 25 B an ID)
    assert len(snap) == 300 and snap[10:13] == ids[10:13] and list(snap) == ids
    assert len(snap.buf) == 25 * 300 and snap[299:400] == ids[299:]
    e = s.peek(ids[7])
    assert e is not None and e.id == ids[7] and e.body == b"body7" and not e.claims
    assert s.peek(ids[7][:-1] + b"0" if ids[7][-1:] != b"0" else ids[7][:-1] + b"1") is None
    assert s.peek(b"not an id") is None and not s.has(b"x" * 25)
    check_accounting(h, used0)

    # a lease is a side claim while it lasts; its ack a DONE byte
    q = s.queues[b"q"]
    got = h("QGET", "q", "g", "EX", 30, "WITHCOUNTERS")
    assert got == [ids[0], b"body0", 1] and thawed(h) == 0
    assert s.side_claims(q) == [(0, b"g", s.claim_at(q, 0, b"g"))]
    assert h("INFO", "groups")  # (event_leases counts it: test_groups.py)
    check_accounting(h, used0)
    h.advance(1000)
    assert h("QACK", "q", "g", ids[0]) == 1
    assert not s.side_claims(q) and thawed(h) == 0
    c = s.peek(ids[0]).claims[b"g"]
    assert claim_state(c) == DONE and claim_deliveries(c) == 1
    check_accounting(h, used0)
    # a lease that runs out is redone (side), leased again, dead-lettered (side)
    assert h("QGET", "q", "g2", "EX", 1)[0] == ids[0]
    h.advance(1100)
    assert h("QGET", "q", "g2", "EX", 1, "WITHCOUNTERS", "MAXDELIVERIES", 2) \
        == [ids[0], b"body0", 2]
    h.advance(1100)
    assert h("QGET", "q", "g2", "EX", 0, "MAXDELIVERIES", 2)[0] == ids[1]
    assert h("QDEAD", "q", "g2") == [[ids[0], b"body0", 2]]
    check_accounting(h, used0)
    assert h("QDEAD", "q", "g2", "REQUEUE", ids[0]) == 1
    assert h("QGET", "q", "g2", "EX", 0, "WITHCOUNTERS")[:2] == [ids[0], b"body0"]
    check_accounting(h, used0)
    # an IDEMPOTENT event stays an object, its claims in it
    kid = h("QADD", "q", 3600, "keyed", "IDEMPOTENT", "k1")
    assert thawed(h) == 1 and h("QADD", "q", 3600, "other", "IDEMPOTENT", "k1") == kid
    check_accounting(h, used0)
    ids.append(kid)

    # a group done with every event: one byte each, QSTATUS as before
    for _ in range(300):
        assert h("QGET", "q", "g", "EX", 0) is not None
    assert h("QGET", "q", "g", "EX", 0) is None
    st = dict(zip(*[iter(h("QSTATUS", "q", "GROUPS", "g")[0][1][1])] * 2, strict=True))
    assert st[b"total"] == 301 and st[b"done"] == 301 and st[b"available"] == 0
    assert h("QGET", "q", "other", "EX", 0)[0] == ids[0]  # another group starts over
    check_accounting(h, used0)


def test_mixed_expiries_compact_and_keep_the_scan_in_place():
    h = Harness()
    used0 = h.node.mem.used
    s = store(h)
    long_ids = []
    for i in range(2000):  # every 4th lives an hour, the others 1 s
        eid = h("QADD", "q", 3600 if i % 4 == 0 else 1, f"e{i}")
        if i % 4 == 0:
            long_ids.append(eid)
    # the group takes the first 100 long-lived ones before the others expire
    got = []
    while len(got) < 100:
        r = h("QGET", "q", "g", "EX", 0)
        if r[0] in long_ids:
            got.append(r[0])
    h.advance(2000)
    q = s.queues[b"q"]
    assert s.count == q.live == 500
    assert q.end() - q.base <= 2 * q.live  # the holes went
    assert s.ids() == long_ids
    for eid in long_ids[::37]:
        assert s.peek(eid).id == eid
    check_accounting(h, used0)
    rest = []
    while (r := h("QGET", "q", "g", "EX", 0)) is not None:
        rest.append(r[0])
    assert rest == long_ids[100:]  # in order, none twice, none skipped
    h.advance(3_600_000)
    assert s.count == 0 and h.node.mem.used == used0
    assert len(q.arena) == 0 or b"q" not in s.queues


def test_a_flush_drops_packed_events_and_their_memory():
    h = Harness()
    used0 = h.node.mem.used
    ids = [h("QADD", "q", 3600, f"b{i}") for i in range(50)]
    assert h("QGET", "q", "g", "EX", 0)[0] == ids[0]
    assert h("QGET", "q", "g", "EX", 30)[0] == ids[1]
    assert h("QFLUSH", "q") == b"OK"
    assert h("QACK", "q", "g", ids[1]) == 1  # a lease held across the flush
    assert store(h).count == 0 and h.node.mem.used == used0
    assert h("QADD", "q", 3600, "after") is not None
    assert store(h).count == 1
    check_accounting(h, used0)


def test_the_memory_bench_measures_a_packed_store():
    """bench/events_memory.py (docs/PERFORMANCE.md, GROUPS.md's Costs), small: what it
    prints per event stays near the target (~110 B for 16-byte bodies; 5,000 events
    carry more of the index's and the columns' fixed share than 100k: 83-102 B) by
    tracemalloc, and what the node accounts within 20% of it."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[2] / "bench" / "events_memory.py"
    out = subprocess.run([sys.executable, str(bench), "--n", "5000", "--trace"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    rows = re.findall(r"tracemalloc +([\d.]+) B/event +used_memory +([\d.]+) B/event", out)
    assert len(rows) == 3, out  # no group, 2 groups done, 10 groups done
    for traced, used in ((float(a), float(b)) for a, b in rows):
        assert 40 < traced < 120 and abs(used - traced) <= 0.2 * traced, out


def test_the_id_index_hash_spreads_runs_of_creation_times():
    """Creation times come in runs (consecutive ns in a ms, ms apart). The index is
    linear probing, so its hash must scatter runs as a random one would: inserting
    100,000 such times into 2**17 slots (the table's load at its largest, 0.76)
    takes ~2.6 probes an insert on average, as random homes do; a fold of their bits
    took 68 at 100 QADDs a ms (and made QACK's lookups most of its CPU)."""
    from disquepy.core.groups.store import _hash

    mask = (1 << 17) - 1
    for per_ms in (1000, 100, 10):
        table = bytearray(mask + 1)
        probes = 0
        for i in range(100_000):
            j = _hash((1_000_000 + i // per_ms) * 1_000_000 + i % per_ms) & mask
            probes += 1
            while table[j]:
                j = (j + 1) & mask
                probes += 1
            table[j] = 1
        assert probes / 100_000 < 4, (per_ms, probes / 100_000)


def test_a_batch_of_leases_shares_one_timer_and_each_lease_ends_on_its_own():
    """QGET COUNT's leases end at one time: one timer for them all (core/groups/leases.py),
    which redoes only those still leased when it fires."""
    from disquepy.core.groups.model import Lease

    h = Harness()
    ids = [h("QADD", "q", 3600, f"e{i}") for i in range(40)]
    timers0 = len(h.node.awake)
    got = h("QGET", "q", "g", "EX", 2, "COUNT", 30, "WITHCOUNTERS")
    assert [e[0] for e in got] == ids[:30] and all(e[2] == 1 for e in got)
    assert len(h.node.awake) == timers0 + 1  # one timer, thirty leases
    t = h.node.groups.leases._last  # (the timer made last)
    assert isinstance(t, Lease) and t.eids == ids[:30] and t.awake == t.deadline
    # another group's batch at the same time: a timer of its own
    assert len(h("QGET", "q", "g2", "EX", 2, "COUNT", 5)) == 5
    assert len(h.node.awake) == timers0 + 2
    # acked, extended, left: only the left ones are redone when the time comes
    assert h("QACK", "q", "g", *ids[:10]) == 10
    assert h("QWORKING", "q", "g", *ids[10:20], "EX", 10) == 10
    h.advance(2100)
    again = h("QGET", "q", "g", "COUNT", 100, "WITHCOUNTERS")
    assert [e[0] for e in again] == ids[20:30] + ids[30:]  # the redone first, then new
    assert [e[2] for e in again] == [2] * 10 + [1] * 10
    assert h("QACK", "q", "g", *ids[10:20]) == 10  # the extended ones still leased
    assert len(h("QGET", "q", "g2", "COUNT", 100)) == 40  # g2's five were redone too


def test_acks_in_lease_order_skip_the_index_and_find_only_their_own_queue():
    h = Harness()
    a = [h("QADD", "qa", 3600, f"a{i}") for i in range(20)]
    b = [h("QADD", "qb", 3600, f"b{i}") for i in range(20)]
    assert len(h("QGET", "qa", "g", "COUNT", 20)) == 20
    assert len(h("QGET", "qb", "g", "COUNT", 20)) == 20
    s = store(h)
    qa = s.queues[b"qa"]
    # an ID of another queue, one not held, one acked twice: not counted
    assert h("QACK", "qa", "g", b[0], a[0], a[0], "0" * 16 + "-" + "0" * 8) == 1
    assert qa.ack_hint == s.locate(a[0])[1] + 1
    assert h("QACK", "qa", "g", *a[1:10]) == 9  # in order: the hint finds each
    assert h("QACK", "qa", "g", *reversed(a[10:])) == 10  # out of order: the index does
    assert h("QACK", "qb", "g", *b) == 20
    assert h("QACK", "qa", "g", *a) == 0  # all done already


def test_index_entries_gathered_in_a_batch_are_found_and_dropped():
    """A batch of QADDs gathers its index entries (store._index_add) and puts them in
    the table in one loop (_settle) before any lookup, drop or compaction: 1,000 events
    in one batch (past the gathering's 64 and several table growths), half of them
    expiring first; every ID held is found, none of those gone, and the table holds
    one entry per event held."""
    h = Harness()
    s = store(h)
    replies = [h.node.execute(h.client, [b"QADD", b"q", b"1" if i % 2 else b"3600", b"e%d" % i],
                              h.now) for i in range(1000)]
    ids = [r[5:30] for r in replies]
    assert all(r[:5] == b"$25\r\n" for r in replies)

    def indexed() -> int:
        return sum(1 for ent in s._table if ent)

    assert len(s._pend) > 0 and indexed() + len(s._pend) // 2 == s.count == 1000
    h.advance(2000)  # the odd ones expire, entries still gathered: dropped from the index
    assert not s._pend and s.count == 500 and indexed() == 500
    assert [s.has(i) for i in ids] == [i % 2 == 0 for i in range(1000)]
    more = [h.node.execute(h.client, [b"QADD", b"q", b"3600", b"m"], h.now)[5:30]
            for _ in range(100)]
    assert s._pend and all(s.has(i) for i in more) and not s._pend and indexed() == 600
    assert [e[0] for e in h("QGET", "q", "g", "COUNT", 1000)] == ids[::2] + more


def test_a_qadd_after_its_queue_was_dropped_lands_in_the_live_queue():
    """queue_for answers the last queue again when the name is the same: a queue a
    flush (or DEBUG FLUSHALL) dropped is never that answer."""
    h = Harness()
    a = h("QADD", "q", 3600, "a")
    old = store(h).queues[b"q"]
    assert h("QFLUSH", "q") == b"OK" and b"q" not in store(h).queues and old.qid == -1
    b = h("QADD", "q", 3600, "b")
    assert store(h).queues[b"q"] is not old
    assert h("QGET", "q", "g")[0] == b and h("QGET", "q", "g") is None
    for i in range(3):  # two queues in turns, then the same one again
        h("QADD", "q1", 3600, f"x{i}")
        h("QADD", "q2", 3600, f"y{i}")
        h("QADD", "q2", 3600, f"z{i}")
    assert [len(list(store(h).positions(store(h).queues[n]))) for n in (b"q1", b"q2")] == [3, 6]
    assert h("DEBUG", "FLUSHALL") == b"OK"
    c = h("QADD", "q2", 3600, "c")
    assert h("QGET", "q2", "g")[0] == c and store(h).count == 1
    assert a != b != c
