"""The jobs and the events one batch of commands creates go to the AOF as one LOADJOBS
and one EVENTS record (core/persistence.py: created, gather_event), each in the place
its first one's record would have had: before the records about them, sealed before
a DELJOB (jobs), a drop or a flush (events); a reload brings every one back."""

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


def test_a_batchs_jobs_are_one_record_and_a_deljob_seals_them():
    h = Harness()
    h.node.aof.on = True
    a, b, c = batch(h, ("ADDJOB", "q", "a", 0), ("ADDJOB", "q", "b", 0),
                    ("ADDJOB", "q", "c", 0))
    ids = [r[1:41] for r in (a, b, c)]  # (+<id>\r\n: a status reply, as Disque)
    assert kinds(h) == [aof.LOADJOBS]
    jobs = aof.scan(b"".join(h.shell.records)).records[0][2]
    assert [f.id for f in jobs] == ids and [f.body for f in jobs] == [b"a", b"b", b"c"]
    n = len(h.shell.records)
    # created, deleted, created: the DELJOB between them seals the first
    batch(h, ("ADDJOB", "q", "e", 0), ("ACKJOB", ids[0].decode()), ("ADDJOB", "q", "f", 0))
    got = kinds(h, n)
    assert got[0] == aof.LOADJOB and got[-1] == aof.LOADJOB and aof.DELJOB in got
    assert aof.LOADJOBS not in got
    fresh = Harness(now=h.now)
    assert fresh.node.aof.load(aof.scan(b"".join(h.shell.records)).records, h.now,
                               enqueue=False) == 4
    assert fresh.node.jobs.get(ids[0]) is None and fresh.node.jobs.get(ids[1]) is not None


def test_a_batchs_jobs_past_the_record_limit_are_cut():
    h = Harness()
    h.node.aof.on = True
    batch(h, *[("ADDJOB", "q", f"j{i}", 0) for i in range(aof.MAX_JOBS + 3)])
    recs = aof.scan(b"".join(h.shell.records)).records
    assert [(k, len(p)) for _, k, p in recs] == [(aof.LOADJOBS, aof.MAX_JOBS),
                                                 (aof.LOADJOBS, 3)]
