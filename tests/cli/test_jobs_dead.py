"""``disque jobs QUEUE`` and ``disque dead QUEUE [--requeue [ID...]]`` on a real node."""

from __future__ import annotations

import re
import time

import pytest
from cli_support import table_rows
from support import wait_for

from disquepy.client import Disque
from disquepy.client.deadletter import dead_letter_body
from disquepy.worker import Worker


def body_lines(out: str, column: int = -1) -> list[str]:
    """The text of one column of every table row, in order (multi-line cells joined)."""
    return [row[column] for row in table_rows(out)]


def test_jobs_shows_ids_counters_and_bodies(run_cli, server, r):
    j1 = r.execute_command("ADDJOB", "q", '{"user": "tom", "tags": ["a", "b"]}', 0).decode()
    j2 = r.execute_command("ADDJOB", "q", "plain text body", 0, "RETRY", 42).decode()
    j3 = r.execute_command("ADDJOB", "q", b"\x00\xffbin", 0).decode()
    got = r.execute_command("GETJOB", "FROM", "q")  # j1 out, NACKed: back with nacks=1
    assert got[0][1].decode() == j1
    r.execute_command("NACK", j1)
    res = run_cli("-p", server.port, "jobs", "q")
    assert res.rc == 0, res.err
    assert f"q on 127.0.0.1:{server.port}: 3 queued, showing 3" in res.out
    rows = table_rows(res.out)
    ids = [row[0] for row in rows if row[0]]
    assert sorted(ids) == sorted([j1, j2, j3])
    by_id = {row[0]: row for row in rows if row[0]}
    assert by_id[j1][2] == "1"  # nacks
    assert by_id[j2][2] == "0" and by_id[j2][4] == "42s"  # retry
    assert by_id[j2][5] == "plain text body"
    assert by_id[j3][5] == '"\\x00\\xffbin"'
    # the JSON body pretty-printed over several lines of j1's cell
    start = rows.index(by_id[j1])
    cell = [rows[start][5]] + [row[5] for row in rows[start + 1:] if not row[0]][:5]
    assert cell[:6] == ["{", '"user": "tom",', '"tags": [', '"a",', '"b"', "]"]
    assert r.execute_command("QLEN", "q") == 3  # peeking consumed nothing


def test_jobs_count_and_newest(run_cli, server, r):
    ids = [r.execute_command("ADDJOB", "q", f"job{i}", 0).decode() for i in range(5)]
    out = run_cli("-p", server.port, "jobs", "q", "--count", "2").out
    assert [row[0] for row in table_rows(out)] == ids[:2]
    out = run_cli("-p", server.port, "jobs", "q", "-c", "2", "--newest").out
    assert [row[0] for row in table_rows(out)] == [ids[4], ids[3]]
    out = run_cli("-p", server.port, "jobs", "empty").out
    assert "0 queued, showing 0" in out and table_rows(out) == []


def add_dead_letter(r, queue: str, original_id: str, body: bytes, error: str,
                    nacks: int = 3) -> str:
    """A dead letter made by the worker's own format function, failed 90 s ago."""
    doc = dead_letter_body(queue, original_id, body, error, nacks, 1,
                           failed_at=int(time.time() * 1000) - 90_000)
    return r.execute_command("ADDJOB", f"{queue}:dead", doc, 0, "TTL", 7 * 86400).decode()


@pytest.fixture
def letters(r):
    d1 = add_dead_letter(r, "emails", "D-aaaaaaaa-orig1", b'{"to": "tom"}',
                         "ValueError('bad address')")
    d2 = add_dead_letter(r, "emails", "D-aaaaaaaa-orig2", b"\x01\x02",
                         "RuntimeError('boom')", nacks=5)
    return d1, d2


def test_dead_lists_dead_letters(run_cli, server, r, letters):
    d1, d2 = letters
    res = run_cli("-p", server.port, "dead", "emails")
    assert res.rc == 0, res.err
    assert "Dead letters of emails" in res.out and ": 2" in res.out
    rows = {row[0]: row for row in table_rows(res.out) if row[0]}
    assert set(rows) == {d1, d2}
    assert rows[d1][1] == "D-aaaaaaaa-orig1"
    assert re.fullmatch(r"1m3[0-4]s ago", rows[d1][2])  # failed 90 s before the set-up
    assert rows[d1][3:6] == ["3", "1", "ValueError('bad address')"]
    assert rows[d2][3] == "5" and rows[d2][6] == '"\\x01\\x02"'
    assert r.execute_command("QLEN", "emails:dead") == 2  # listing consumed nothing


def test_dead_requeue_by_id_then_all(run_cli, server, r, letters):
    d1, d2 = letters
    res = run_cli("-p", server.port, "dead", "emails", "--requeue", d2)
    assert res.rc == 0, res.err
    assert "Re-queued 1 dead letters of emails" in res.out
    assert r.execute_command("QLEN", "emails:dead") == 1
    got = r.execute_command("GETJOB", "NOHANG", "FROM", "emails")
    assert got[0][2] == b"\x01\x02"  # the original bytes, decoded from base64
    res = run_cli("-p", server.port, "dead", "emails", "--requeue")
    assert res.rc == 0 and "Re-queued 1 dead letters" in res.out
    assert r.execute_command("QLEN", "emails:dead") == 0
    got = r.execute_command("GETJOB", "NOHANG", "FROM", "emails")
    assert got[0][2] == b'{"to": "tom"}'
    assert r.execute_command("QLEN", "emails") == 0
    out = run_cli("-p", server.port, "dead", "emails").out
    assert table_rows(out) == []


def test_dead_requeue_of_unknown_id_fails(run_cli, server, r, letters):
    res = run_cli("-p", server.port, "dead", "emails", "--requeue", "D-nope")
    assert res.rc == 1
    assert r.execute_command("QLEN", "emails:dead") == 2
    assert r.execute_command("QLEN", "emails") == 0


def test_dead_lists_other_jobs_in_the_dead_queue_apart(run_cli, server, r, letters):
    r.execute_command("ADDJOB", "emails:dead", "not a dead letter", 0)
    res = run_cli("-p", server.port, "dead", "emails")
    assert res.rc == 0
    assert len([row for row in table_rows(res.out) if row[0]]) == 2
    assert "1 jobs in emails:dead are not dead letters (not shown)" in res.out


@pytest.mark.timeout(60)
def test_dead_letters_of_a_real_worker_listed_and_requeued(run_cli, server, r):
    def handler(payload):
        raise ValueError(f"cannot send to {payload['to']}")

    jid = r.execute_command("ADDJOB", "mail", '{"to": "nobody"}', 0, "RETRY", 1).decode()
    client = Disque([f"127.0.0.1:{server.port}"])
    w = Worker(client, ["mail"], 1, handler, dead_letter_after=2, poll_timeout_ms=100).start()
    try:
        wait_for(lambda: w.stats["dead-lettered"] == 1, timeout=30, what="a dead letter")
    finally:
        w.stop(timeout=5)
        client.close()
    res = run_cli("-p", server.port, "dead", "mail")
    assert res.rc == 0, res.err
    (row,) = [row for row in table_rows(res.out) if row[0]]
    assert row[1] == jid
    assert row[5] == "ValueError('cannot send to nobody')"
    res = run_cli("-p", server.port, "dead", "mail", "--requeue", jid)  # by original ID
    assert res.rc == 0 and "Re-queued 1 dead letters of mail" in res.out
    assert r.execute_command("QLEN", "mail:dead") == 0
    got = r.execute_command("GETJOB", "NOHANG", "FROM", "mail")
    assert got[0][2] == b'{"to": "nobody"}'
