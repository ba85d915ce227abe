"""The total-queue checker on hand-made histories: each violation it must catch, and a
clean history it must pass (no processes: pure)."""

from __future__ import annotations

from disquepy.chaos.checker import ADD_ERROR, ADD_OK, ADD_UNKNOWN, History, check


def added(h: History, body: bytes, jid: bytes, retry: int = 3, repl: int = 2) -> None:
    rec = h.add_sent(body, b"q", repl, retry, 0)
    rec.outcome, rec.jid = ADD_OK, jid


def clean_history() -> History:
    h = History()
    added(h, b"a", b"JA")
    added(h, b"b", b"JB", retry=0, repl=1)
    h.delivered(b"a", b"JA", 0)
    h.delivered(b"b", b"JB", 1)
    h.ack_ok(b"JA")
    h.ack_ok(b"JB")
    return h


def test_clean_history_passes():
    rep = check(clean_history(), {0: {}, 1: {}})
    assert rep.ok, rep.violations
    assert rep.counts["jobs_added"] == 2 and rep.counts["jobs_delivered"] == 2
    assert rep.counts["lost"] == 0 and rep.counts["duplicates"] == 0


def test_job_with_an_id_never_delivered_is_lost():
    h = clean_history()
    added(h, b"c", b"JC")
    rep = check(h, {0: {}})
    assert rep.counts["lost"] == 1
    assert not rep.ok and "lost" in rep.violations
    assert rep.examples["lost"][0][:2] == (b"c", b"JC")


def test_failed_or_unanswered_adds_are_not_lost():
    h = clean_history()
    for body, outcome in ((b"e", ADD_ERROR), (b"u", ADD_UNKNOWN)):
        h.add_sent(body, b"q", 1, 3, 0).outcome = outcome
    rep = check(h, {})
    assert rep.ok, rep.violations
    assert rep.counts["add_errors"] == 1 and rep.counts["add_unknown"] == 1


def test_retry0_job_never_delivered_is_not_lost_but_twice_is_a_violation():
    h = clean_history()
    added(h, b"z", b"JZ", retry=0, repl=1)  # never delivered: allowed
    assert check(h, {}).ok
    h.delivered(b"b", b"JB", 2)  # the at-most-once job b a second time
    rep = check(h, {})
    assert rep.counts["at_most_once"] == 1 and "at_most_once" in rep.violations


def test_unknown_body_and_other_id_are_unexpected():
    h = clean_history()
    h.delivered(b"never-sent", b"JX", 0)
    h.delivered(b"a", b"J-other", 0)  # a's body under another ID
    rep = check(h, {})
    assert rep.counts["unexpected"] == 2


def test_duplicates_are_counted_requested_apart():
    h = clean_history()
    h.delivered(b"a", b"JA", 1)
    h.delivered(b"a", b"JA", 2)
    h.request_redelivery(b"a")  # one of the two extra deliveries was asked for
    rep = check(h, {})
    assert rep.ok
    assert rep.counts["duplicates"] == 2 and rep.counts["duplicates_unrequested"] == 1
    assert rep.counts["duplicate_rate"] == 2.0  # one at-least-once job, two extra


def test_acked_job_still_held_is_not_collected_and_queued_leftover():
    h = clean_history()
    rep = check(h, {0: {b"JA": ("acked", b"q")}, 1: {b"JQ": ("queued", b"q")}})
    assert rep.counts["not_collected"] == 1 and rep.counts["leftover"] == 1
    assert set(rep.violations) == {"not_collected", "leftover"}


def test_delivered_but_never_acked_is_unacked_unless_an_ack_may_have_landed():
    h = History()
    added(h, b"a", b"JA")
    h.delivered(b"a", b"JA", 0)
    assert check(h, {}).counts["unacked"] == 1
    h.ack_maybe.add(b"JA")
    assert check(h, {}).ok
