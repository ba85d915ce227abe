"""``disque groups [QUEUE...] [-g GROUP] [--dead [--requeue ID]]`` on a real node."""

from __future__ import annotations

import time

from cli_support import table_rows


def test_groups_table_dead_letters_and_requeue(run_cli, server, r):
    e1 = r.execute_command("QADD", "events", 60, '{"n": 1}').decode()
    r.execute_command("QADD", "events", 60, "two")
    assert r.execute_command("QGET", "events", "billing", "EX", 0)[0].decode() == e1
    r.execute_command("QGET", "events", "audit", "EX", 30)
    res = run_cli("-p", server.port, "groups")
    assert res.rc == 0, res.err
    rows = {(row[0], row[1]): row[2:] for row in table_rows(res.out)}
    # total inprogress redo done available consumers dead lag pending oldest
    assert rows[("events", "billing")][:9] == ["2", "0", "0", "1", "1", "0", "0", "1", "0"]
    assert rows[("events", "audit")][:9] == ["2", "1", "0", "0", "1", "0", "0", "1", "1"]
    res = run_cli("-p", server.port, "groups", "events", "-g", "newcomer")
    assert [row[:6] for row in table_rows(res.out)] == [
        ["events", "newcomer", "2", "0", "0", "0"]]
    # dead letters of a group, requeued
    assert r.execute_command("QGET", "events", "ops", "EX", "0.05", "MAXDELIVERIES", 1)
    time.sleep(0.1)
    r.execute_command("QGET", "events", "ops", "EX", 0, "MAXDELIVERIES", 1)  # dead-letters e1
    res = run_cli("-p", server.port, "groups", "events", "-g", "ops", "--dead")
    assert res.rc == 0, res.err
    dead = table_rows(res.out)
    assert dead[0][:2] == [e1, "1"] and '"n": 1' in res.out
    res = run_cli("-p", server.port, "groups", "events", "-g", "ops", "--dead",
                  "--requeue", e1)
    assert res.rc == 0 and "Requeued 1 of 1" in res.out
    res = run_cli("-p", server.port, "groups", "events", "--dead")
    assert res.rc != 0 and "--dead needs one QUEUE and one --group" in res.err
