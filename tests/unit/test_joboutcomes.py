"""JOBOUTCOMES (disquepy): the outcome store's records, the last finished first, paged
with a cursor, filtered by STATUS and QUEUE; and Outcomes.recent under it."""

from __future__ import annotations

from nodeharness import Error, Harness

from disquepy.core.outcomes import CANCELLED, COMPLETED, FAILED, Outcome, Outcomes


def fields(item):
    return {k.decode(): v for k, v in zip(item[::2], item[1::2], strict=True)}


def finish(h, queue, body, how):
    jid = h("ADDJOB", queue, body, 0)
    if how == "cancel":
        assert h("CANCEL", jid) == b"OK"
        return jid
    h("GETJOB", "FROM", queue)
    if how == "fail":
        assert h("FAILJOB", jid, "ERROR", f"boom {body}") == 1
    else:
        assert h("ACKJOB", jid, "RESULT", f"done {body}") == 1
    return jid


def page_all(h, *args, count=3):
    out, cursor, calls = [], "0", 0
    while True:
        nxt, items = h("JOBOUTCOMES", cursor, "COUNT", count, *args)
        out += [fields(x) for x in items]
        calls += 1
        cursor = nxt.decode()
        if cursor == "0" or calls > 100:
            return out, calls


def test_newest_first_with_fields_and_paging():
    h = Harness()
    made = []
    for i, how in enumerate(["ack", "fail", "cancel", "ack", "fail", "ack", "ack"]):
        made.append(finish(h, "q" if i % 2 else "r", str(i), how))
        h.advance(10)
    got, calls = page_all(h)
    assert [g["id"] for g in got] == made[::-1]  # the last finished first
    assert calls >= 3
    first = got[0]
    assert first["state"] == b"completed" and first["queue"] == b"r"
    assert first["detail"] == b"done 6" and first["attempts"] == 1
    assert first["finished"] >= first["created"]
    assert got[2]["state"] == b"failed" and got[2]["detail"] == b"boom 4"
    assert got[4]["state"] == b"cancelled" and got[4]["detail"] is None
    # an item's cursor goes on after it
    nxt, items = h("JOBOUTCOMES", fields(h("JOBOUTCOMES", "COUNT", 2)[1][1])["cursor"])
    assert [fields(x)["id"] for x in items] == made[::-1][2:]


def test_status_and_queue_filters():
    h = Harness()
    ids = {}
    for i, how in enumerate(["ack", "fail", "cancel", "fail", "ack", "fail"]):
        ids[i] = finish(h, "a" if i < 3 else "b", str(i), how)
    failed, _ = page_all(h, "STATUS", "failed")
    assert [g["id"] for g in failed] == [ids[5], ids[3], ids[1]]
    both, _ = page_all(h, "STATUS", "failed", "STATUS", "CANCELLED", "QUEUE", "a")
    assert [g["id"] for g in both] == [ids[2], ids[1]]
    two, _ = page_all(h, "QUEUE", "a", "QUEUE", "b", count=10)
    assert len(two) == 6
    assert page_all(h, "QUEUE", "none")[0] == []


def test_bad_arguments_get_clear_errors():
    h = Harness()
    assert h("JOBOUTCOMES", "STATUS", "queued") == Error(
        "ERR STATUS must be completed, failed, cancelled or expired")
    assert h("JOBOUTCOMES", "COUNT", 0) == Error("ERR value is out of range")
    assert h("JOBOUTCOMES", "COUNT", "x") == Error(
        "ERR value is not an integer or out of range")
    assert h("JOBOUTCOMES", "abc") == Error("ERR invalid cursor or option name")
    assert h("JOBOUTCOMES", "0", "1") == Error("ERR syntax error")
    assert h("JOBOUTCOMES") == [b"0", []]


def test_outcomes_off_lists_nothing():
    h = Harness()
    h("CONFIG", "SET", "job-outcome-retention", "0")
    finish(h, "q", "x", "ack")
    assert h("JOBOUTCOMES") == [b"0", []]


def _id(i: int) -> str:
    return f"D-{i:08x}-{'A' * 24}-05a1"


def test_recent_is_bounded_and_misses_nothing_across_chunks_and_removals():
    o = Outcomes(max_bytes=1 << 20)  # small chunks: many of them
    for i in range(5000):
        o.record(Outcome(_id(i), (COMPLETED, FAILED, CANCELLED)[i % 3], f"q{i % 4}", 1, i,
                         10_000 + i, b""))
    for i in range(0, 5000, 5):  # a second outcome replaces the first: it moves up
        o.record(Outcome(_id(i), FAILED, "q1", 2, i, 20_000 + i, b"again"))
    want = [x.job_id for x in sorted(o, key=lambda x: -x.finished_ms)
            if x.state == FAILED and x.queue == "q1"]
    cursor, seen, calls = 0, [], 0
    while True:
        cursor, got = o.recent(cursor, 50, 1 << FAILED, frozenset({"q1"}), 300)
        assert len(got) <= 50
        seen += [x.job_id for _, x in got]
        calls += 1
        if cursor == 0:
            break
        assert calls < 1000
    assert seen == want and calls > len(want) // 50
    assert o.recent(0, 10, 0, None, 0)[1][0][1].finished_ms == 20_000 + 4995
