"""The events one batch of commands holds go to the AOF as one EVENTS record
(core/persistence.py's gather_event), in the place the first one's EVENT record would
have had: before the records about them, sealed before a drop or a flush, and a reload
brings every event back with its claims."""

from __future__ import annotations

from nodeharness import Harness

from disquepy.core import aofrecords as aof


def batch(h: Harness, *commands) -> list:
    """Run commands as one batch (no outputs taken between them); their replies."""
    out = [h.node.execute(h.client, [str(a).encode() for a in c], h.now) for c in commands]
    h.drain()
    return out


def kinds(h: Harness, since: int = 0) -> list[str]:
    return [k for _, k, _ in aof.scan(b"".join(h.shell.records[since:])).records]


def test_a_batchs_events_are_one_record_before_their_claims():
    h = Harness()
    h.node.aof.on = True
    batch(h, ("ADDJOB", "jobs", "j", 0), ("QADD", "q", 3600, "a"), ("QADD", "q", 3600, "b"),
          ("QGET", "q", "g", "COUNT", 2), ("QADD", "q", 3600, "c"))
    assert kinds(h) == ["LOADJOB", aof.EVENTS, aof.EVCLAIMS]
    events = aof.scan(b"".join(h.shell.records)).records[1][2]
    assert [f.body for f in events] == [b"a", b"b", b"c"]
    n = len(h.shell.records)
    h("QADD", "q", 3600, "d")  # alone in its batch: an EVENT record, as before
    assert kinds(h, n) == [aof.EVENT]
    fresh = Harness(now=h.now)
    assert fresh.node.aof.load(aof.scan(b"".join(h.shell.records)).records, h.now,
                               enqueue=False) == 1
    assert fresh.node.groups.log.loaded == 4
    got = fresh("QGET", "q", "g", "COUNT", 10)  # a and b leased until their deadline
    assert [e[1] for e in got] == [b"c", b"d"]


def test_a_flush_seals_the_events_held_before_it():
    """QADD, QFLUSH, QADD in one batch: the first event's record goes before the
    EVFLUSH (a reload drops it), the second's after it (a reload keeps it)."""
    h = Harness()
    h.node.aof.on = True
    batch(h, ("QADD", "q", 3600, "old"), ("QFLUSH", "q"), ("QADD", "q", 3600, "new"))
    assert kinds(h) == [aof.EVENT, aof.EVFLUSH, aof.EVENT]
    fresh = Harness(now=h.now)
    fresh.node.aof.load(aof.scan(b"".join(h.shell.records)).records, h.now, enqueue=False)
    assert [e[1] for e in fresh("QGET", "q", "g", "COUNT", 10)] == [b"new"]


def test_a_big_batch_is_cut_into_records():
    """Past MAX_EVENTS events, or about 1 MiB of bodies, a record is sealed and the
    next begins: a blob stays far from the AOF's 1 GB record limit."""
    from disquepy.core.eventcodec import MAX_EVENTS

    h = Harness()
    h.node.aof.on = True
    batch(h, *[("QADD", "q", 3600, f"e{i}") for i in range(MAX_EVENTS + 5)])
    recs = aof.scan(b"".join(h.shell.records)).records
    assert [(k, len(p)) for _, k, p in recs] == [(aof.EVENTS, MAX_EVENTS), (aof.EVENTS, 5)]
    n = len(h.shell.records)
    big = "x" * 300_000
    batch(h, *[("QADD", "q", 3600, big) for _ in range(5)])
    recs = aof.scan(b"".join(h.shell.records[n:])).records
    assert [(k, len(p)) for _, k, p in recs] == [(aof.EVENTS, 4), (aof.EVENT, 8)]
