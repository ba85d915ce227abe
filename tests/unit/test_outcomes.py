"""The outcome store (core/outcomes.py) against a plain-dict model."""

from __future__ import annotations

import contextlib
import random
import re

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from disquepy.core import outcomes as outcomes_mod
from disquepy.core.ids import JobIdGenerator
from disquepy.core.outcomes import (
    CANCELLED,
    COMPLETED,
    EXPIRED,
    FAILED,
    STATE_NAMES,
    Outcome,
    Outcomes,
)

_gen = JobIdGenerator("dcb833cf" + "0" * 32, b"seed")
IDS = [_gen.next_id(3600, 1).decode() for _ in range(40)]
QUEUES = ["q", "emails", "queue:ünïcode", "x" * 300]
DETAILS = [b"", b"ok", b"boom: division by zero", b"r" * 40, b"e" * 100]
STATES = [COMPLETED, FAILED, CANCELLED, EXPIRED]
BASE_MEM = Outcomes().memory_bytes()


class Model:
    """What the store must hold: id → (arrival, outcome), oldest by (finished, arrival)."""

    def __init__(self, retention: int, max_detail: int) -> None:
        self.retention = retention
        self.max_detail = max_detail
        self.items: dict[str, tuple[int, Outcome]] = {}
        self.arrivals = 0

    def record(self, o: Outcome) -> None:
        self.arrivals += 1
        self.items[o.job_id] = (self.arrivals, o._replace(detail=o.detail[:self.max_detail]))

    def ordered(self) -> list[Outcome]:
        return [o for _a, o in sorted(self.items.values(),
                                      key=lambda t: (t[1].finished_ms, t[0]))]

    def expire(self, now: int) -> int:
        gone = [k for k, (_a, o) in self.items.items() if o.finished_ms + self.retention <= now]
        for k in gone:
            del self.items[k]
        return len(gone)

    def drop_oldest(self, n: int) -> None:
        for o in self.ordered()[:n]:
            del self.items[o.job_id]


outcome_parts = st.tuples(st.sampled_from(IDS), st.sampled_from(STATES),
                          st.sampled_from(QUEUES), st.integers(0, 2**32 - 1),
                          st.integers(-5_000, 5_000), st.integers(-2_000, 2_000),
                          st.sampled_from(DETAILS))


class OutcomeMachine(RuleBasedStateMachine):
    @initialize(retention=st.sampled_from([0, 500, 3_600_000]),
                max_bytes=st.sampled_from([BASE_MEM + 4_000, BASE_MEM + 12_000, 256 << 20]),
                max_detail=st.sampled_from([0, 30, 1024]))
    def setup(self, retention: int, max_bytes: int, max_detail: int) -> None:
        self.store = Outcomes(retention, max_bytes, max_detail)
        self.model = Model(retention, max_detail)
        self.now = 0

    def sync_evictions(self, before: int) -> None:
        dropped = self.store.dropped - before
        assert dropped >= 0
        self.model.drop_oldest(dropped)

    @rule(parts=outcome_parts, offset=st.integers(-50, 50))
    def record(self, parts: tuple, offset: int) -> None:
        jid, state, queue, attempts, created, finished, detail = parts
        o = Outcome(jid, state, queue, attempts, created, self.now + finished + offset, detail)
        before = self.store.dropped
        self.store.record(o)
        self.model.record(o)
        self.sync_evictions(before)

    @rule(parts=outcome_parts, n=st.integers(1, 40))
    def burst(self, parts: tuple, n: int) -> None:
        # Many outcomes in finished order, as a busy node sees them.
        _jid, state, queue, attempts, created, finished, detail = parts
        for k in range(n):
            o = Outcome(IDS[(finished + k) % len(IDS)], state, queue, attempts, created,
                        self.now + finished + k, detail)
            before = self.store.dropped
            self.store.record(o)
            self.model.record(o)
            self.sync_evictions(before)

    @rule(step=st.integers(0, 3_000))
    def expire(self, step: int) -> None:
        self.now += step
        assert self.store.expire(self.now) == self.model.expire(self.now)

    @rule(retention=st.sampled_from([0, 100, 1_000, 3_600_000]))
    def set_retention(self, retention: int) -> None:
        self.store.retention_ms = retention
        self.model.retention = retention

    @rule(max_bytes=st.sampled_from([BASE_MEM + 3_000, BASE_MEM + 20_000, 256 << 20]))
    def set_max_bytes(self, max_bytes: int) -> None:
        before = self.store.dropped
        self.store.max_bytes = max_bytes
        self.sync_evictions(before)

    @rule(jid=st.sampled_from(IDS))
    def get(self, jid: str) -> None:
        got = self.model.items.get(jid)
        assert self.store.get(jid) == (got[1] if got else None)

    @invariant()
    def same_as_model(self) -> None:
        assert len(self.store) == len(self.model.items)
        ordered = self.model.ordered()
        assert list(self.store) == ordered
        want_next = ordered[0].finished_ms + self.model.retention if ordered else None
        assert self.store.next_expiry() == want_next
        if len(self.store):
            assert self.store.memory_bytes() <= self.store.max_bytes


TestOutcomeMachine = OutcomeMachine.TestCase
TestOutcomeMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None,
                                       suppress_health_check=[HealthCheck.too_slow])


def outcome(jid: str, finished: int, state: int = COMPLETED, detail: bytes = b"",
            queue: str = "q") -> Outcome:
    return Outcome(jid, state, queue, 1, finished - 10, finished, detail)


def test_state_names() -> None:
    assert STATE_NAMES == {COMPLETED: "completed", FAILED: "failed",
                           CANCELLED: "cancelled", EXPIRED: "expired"}


def test_empty_store() -> None:
    s = Outcomes()
    assert len(s) == 0
    assert list(s) == []
    assert s.get(IDS[0]) is None
    assert s.next_expiry() is None
    assert s.expire(10**12) == 0
    assert s.dropped == 0
    assert s.memory_bytes() == BASE_MEM


@contextlib.contextmanager
def refused(message: str):
    """A bad value is refused: ValueError with ``message``; or, for a value of the wrong
    type, TypeError, which the compiled module (mypyc) raises from its annotations."""
    with pytest.raises((ValueError, TypeError)) as e:
        yield
    if e.type is ValueError:
        assert re.search(message, str(e.value)), str(e.value)


@pytest.mark.parametrize("bad", [
    "", "D-", "x" * 40, IDS[0][:-1], IDS[0] + "0", "E" + IDS[0][1:],
    IDS[0][:10] + "+" + IDS[0][11:], IDS[0][:39] + "\u20ac", b"D-" + b"x" * 38, None, 42])
def test_bad_ids_are_refused_and_change_nothing(bad: object) -> None:
    s = Outcomes()
    s.record(outcome(IDS[0], 5))
    mem = s.memory_bytes()
    with refused("invalid job ID"):
        s.record(outcome(bad, 6))  # type: ignore[arg-type]
    with refused("invalid job ID"):
        s.get(bad)  # type: ignore[arg-type]
    assert list(s) == [outcome(IDS[0], 5)]
    assert s.memory_bytes() == mem


@pytest.mark.parametrize("field,value,message", [
    ("state", 0, "unknown outcome state"),
    ("state", 9, "unknown outcome state"),
    ("attempts", -1, "bad outcome"),
    ("attempts", 2**32, "bad outcome"),
    ("created_ms", 2**63, "bad outcome"),
    ("finished_ms", 2**63, "bad outcome"),
    ("finished_ms", 1.5, "bad outcome"),
    ("queue", b"q", "queue must be a str"),
    ("detail", "text", "detail must be bytes"),
])
def test_bad_fields_are_refused_and_change_nothing(field: str, value: object,
                                                   message: str) -> None:
    s = Outcomes()
    s.record(outcome(IDS[0], 5))
    mem = s.memory_bytes()
    with refused(message):
        s.record(outcome(IDS[1], 6)._replace(**{field: value}))
    assert list(s) == [outcome(IDS[0], 5)]
    assert s.memory_bytes() == mem
    s.record(outcome(IDS[1], 6))  # the store still works
    assert len(s) == 2


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="max_detail"):
        Outcomes(max_detail=70_000)
    with pytest.raises(ValueError, match="retention_ms"):
        Outcomes(retention_ms=-1)
    s = Outcomes()
    with pytest.raises(ValueError, match="retention_ms"):
        s.retention_ms = -5
    with pytest.raises(ValueError, match="max_bytes"):
        s.max_bytes = -1
    assert s.retention_ms == 3_600_000


def test_detail_is_truncated_to_max_detail() -> None:
    s = Outcomes(max_detail=8)
    s.record(outcome(IDS[0], 5, FAILED, b"Traceback: a long error"))
    s.record(outcome(IDS[1], 5, COMPLETED, b"short"))
    assert s.get(IDS[0]).detail == b"Tracebac"  # type: ignore[union-attr]
    assert s.get(IDS[1]).detail == b"short"  # type: ignore[union-attr]


def test_last_record_wins() -> None:
    s = Outcomes()
    s.record(outcome(IDS[0], 100, FAILED, b"err"))
    s.record(outcome(IDS[1], 150))
    s.record(outcome(IDS[0], 200, COMPLETED, b"done"))
    assert len(s) == 2
    assert s.get(IDS[0]) == outcome(IDS[0], 200, COMPLETED, b"done")
    assert [o.job_id for o in s] == [IDS[1], IDS[0]]
    assert s.next_expiry() == 150 + 3_600_000


def test_retention_change_applies_to_kept_outcomes() -> None:
    s = Outcomes(retention_ms=1_000)
    for k, jid in enumerate(IDS[:10]):
        s.record(outcome(jid, 1_000 + k * 100))
    assert s.expire(2_000) == 1
    s.retention_ms = 100
    assert s.next_expiry() == 1_200
    assert s.expire(1_500) == 4  # finished at 1100..1400
    s.retention_ms = 10_000
    assert s.expire(5_000) == 0
    assert s.next_expiry() == 11_500


def test_iteration_refuses_a_change_underneath() -> None:
    s = Outcomes()
    s.record(outcome(IDS[0], 1))
    s.record(outcome(IDS[1], 2))
    it = iter(s)
    next(it)
    s.record(outcome(IDS[2], 3))
    with pytest.raises(RuntimeError, match="changed during iteration"):
        next(it)


def test_memory_bound_drops_oldest_and_counts_them() -> None:
    s = Outcomes(max_bytes=BASE_MEM + 150_000)  # holds ~1,500 of the 2,000
    ids = [_gen.next_id(60, 1).decode() for _ in range(2_000)]
    for k, jid in enumerate(ids):
        s.record(outcome(jid, k))
        assert s.memory_bytes() <= s.max_bytes
    assert s.dropped > 0
    assert len(s) + s.dropped == len(ids)
    kept = [o.job_id for o in s]
    assert kept == ids[s.dropped:]  # the oldest went first
    s.max_bytes = BASE_MEM + 30_000
    assert s.memory_bytes() <= s.max_bytes
    assert [o.job_id for o in s] == ids[s.dropped:]


def test_hash_collisions_never_answer_for_another_job(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every ID hashes alike: lookups, replacement and expiry must rely on the stored ID.
    monkeypatch.setattr(outcomes_mod, "hash", lambda raw: 12345, raising=False)
    s = Outcomes(retention_ms=10)
    ids = [_gen.next_id(60, 1).decode() for _ in range(300)]
    for k, jid in enumerate(ids[:200]):
        s.record(outcome(jid, k))
    for k, jid in enumerate(ids[:200]):
        assert s.get(jid) == outcome(jid, k)
    for jid in ids[200:]:
        assert s.get(jid) is None
    s.record(outcome(ids[5], 500, FAILED, b"again"))
    assert s.expire(110) == 100  # finished at 0..100, but ids[5] was replaced
    assert len(s) == 100
    assert s.get(ids[5]) == outcome(ids[5], 500, FAILED, b"again")
    for k, jid in enumerate(ids[:200]):
        want = outcome(jid, k) if k > 100 else None
        if k != 5:
            assert s.get(jid) == want


def test_volume_out_of_order_against_the_model() -> None:
    # Enough outcomes to fill several 4096-record chunks, grow and shrink the index; the
    # finished times arrive jittered (replicas' clocks), some replaced.
    rnd = random.Random(7)
    s = Outcomes(retention_ms=5_000)
    model = Model(5_000, 1024)
    ids = [_gen.next_id(60, 1).decode() for _ in range(15_000)]
    now = 0
    for k in range(30_000):
        jid = ids[rnd.randrange(len(ids))] if k % 10 == 0 else ids[k % len(ids)]
        o = Outcome(jid, rnd.choice(STATES), rnd.choice(QUEUES), k % 7, now - 100,
                    now + rnd.randint(-300, 20), rnd.choice(DETAILS))
        s.record(o)
        model.record(o)
        if k % 1_000 == 999:
            now += 1_000
            assert s.expire(now) == model.expire(now)
            assert len(s) == len(model.items)
    assert list(s) == model.ordered()
    for jid in ids[::37]:
        got = model.items.get(jid)
        assert s.get(jid) == (got[1] if got else None)
    mem_full = s.memory_bytes()
    now += 10_000
    assert s.expire(now) == len(model.items)
    assert len(s) == 0 and list(s) == [] and s.next_expiry() is None
    # All chunks freed but the open one (4096 records of 73 bytes), the index's shards too.
    assert mem_full > BASE_MEM + 600_000
    assert s.memory_bytes() <= BASE_MEM + 4096 * 73 + 1024 + 4_000  # + its names, details


def test_record_raw_is_record_without_the_tuple() -> None:
    """The node's path: the job ID as bytes, known valid; the same store afterwards."""
    a, b = Outcomes(), Outcomes()
    for i, jid in enumerate(IDS[:20]):
        o = outcome(jid, 100 + i, FAILED if i % 3 else COMPLETED, b"err" if i % 3 else b"")
        a.record(o)
        b.record_raw(jid.encode(), o.state, o.queue.encode("latin-1"), o.attempts,
                     o.created_ms, o.finished_ms, o.detail)
    assert list(a) == list(b) and a.memory_bytes() == b.memory_bytes()
    with pytest.raises(ValueError, match="unknown outcome state"):
        b.record_raw(IDS[0].encode(), 9, b"q", 1, 1, 2, b"")
    assert len(b) == 20
