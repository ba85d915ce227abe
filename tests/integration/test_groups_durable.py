"""Consumer groups' events as durable as jobs (issue #25): in the AOF with the jobs,
kept through rolling restarts of real processes (SIGTERM, then kill -9), rewrites and
disque-check-aof; holders catching up after a restart (docs/GROUPS.md, "Durability")."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from support import hello_ok, wait_for

from disquepy.core.aofrecords import scan

AOF = ("--appendonly", "yes")


def drain(clients, queue: str, group: str, expect: int, ack: bool = True) -> list[bytes]:
    """Consume ``queue`` as ``group`` round-robin over ``clients`` until ``expect``
    events came (each acked unless ``ack`` is false); the IDs in delivery order."""
    got: list[bytes] = []

    def step():
        for c in clients:
            if len(got) >= expect:
                break
            e = c.execute_command("QGET", queue, group, "EX", 30)
            if e is not None:
                got.append(e[0])
                if ack:
                    assert c.execute_command("QACK", queue, group, e[0]) == 1
        return len(got) >= expect

    try:
        wait_for(step, timeout=40, step=0.05, what=f"{expect} events for {group}")
    except AssertionError as e:
        views = [c.execute_command("QINFO", queue, "GROUPS", group) for c in clients]
        raise AssertionError(f"{e}: {len(got)} came; the nodes' views: {views}") from None
    return got


def restart(servers, clients, i: int, sig: int) -> None:
    servers[i].kill(sig)
    servers[i].start()
    clients[i] = servers[i].client()
    for c in clients:
        wait_for(lambda c=c: hello_ok(c, len(servers)), timeout=30,
                 what="the cluster to re-form")


def test_rolling_restart_with_aof_loses_no_acknowledged_event(make_cluster):
    """300 events added round-robin; a group consumes a third of them; then every node
    is restarted in turn, first with SIGTERM, then with kill -9, each time waiting for
    the cluster to re-form. The old group gets exactly the other 200 (none it acked
    comes back), a new group gets all 300, and every node's AOF checks clean."""
    servers, clients = make_cluster(3, *AOF)
    ids = [clients[i % 3].execute_command("QADD", "q", 600, f"ev{i}") for i in range(300)]
    assert len(set(ids)) == 300
    acked = drain(clients, "q", "old", 100)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for i in range(3):
            restart(servers, clients, i, sig)
    for c in clients:
        assert c.info("groups")["events"] == 300  # every node holds every event (R=3)
    rest = drain(clients, "q", "old", 200)
    assert not set(rest) & set(acked)
    assert set(rest) | set(acked) == set(ids)
    assert sorted(drain(clients, "q", "new", 300)) == sorted(ids)
    st = clients[0].execute_command("QINFO", "q", "GROUPS", "old", "new")
    assert [line.split()[2] for line in st] == [b"total:300", b"total:300"]
    for s in servers:
        s.stop()
        out = subprocess.run([sys.executable, "-m", "disquepy.tools.check_aof",
                              str(s.workdir / "disque.aof")],
                             capture_output=True, text=True, env=s.env, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "AOF is valid" in out.stdout and ", events=" in out.stdout


def test_a_whole_cluster_restart_keeps_events_and_progress(make_cluster):
    """Every node stopped at once (kill -9) and started again: the events, the acks and
    the dead letters are back; a lease in flight comes back to the group when it ends."""
    servers, clients = make_cluster(3, *AOF)
    a, b, c = clients
    ids = [a.execute_command("QADD", "q", 600, f"e{i}") for i in range(5)]
    assert b.execute_command("QGET", "q", "g", "EX", 0)[0] == ids[0]  # acked at once
    assert c.execute_command("QGET", "q", "g", "EX", 1, "MAXDELIVERIES", 1)[0] == ids[1]
    assert a.execute_command("QGET", "q", "g", "EX", 3)[0] == ids[2]
    time.sleep(1.2)  # e1's lease ran out: its next lease makes it a dead letter
    assert a.execute_command("QGET", "q", "g", "EX", 3, "MAXDELIVERIES", 1)[0] == ids[3]
    assert [d[0] for d in a.execute_command("QDEAD", "q", "g")] == [ids[1]]
    for s in servers:
        s.kill(signal.SIGKILL)
    for s in servers:
        s.start()
    clients[:] = [s.client() for s in servers]
    for x in clients:
        wait_for(lambda x=x: hello_ok(x, 3), timeout=30, what="the cluster to re-form")
    a, b, c = clients
    assert [d[0] for d in a.execute_command("QDEAD", "q", "g")] == [ids[1]]
    got = drain(clients, "q", "g", 3)  # e2 and e3 (their leases ran out meanwhile), e4
    assert sorted(got) == ids[2:]
    assert [d[0] for d in b.execute_command("QDEAD", "q", "g")] == [ids[1]]


def test_rewrite_keeps_events_and_claims(server_factory):
    """BGREWRITEAOF writes the events held with their claims (and QFLUSH's mark):
    after a restart the group goes on where it was."""
    s = server_factory(*AOF)
    r = s.client()
    ids = [r.execute_command("QADD", "q", 600, f"e{i}") for i in range(10)]
    r.execute_command("QADD", "gone", 600, "x")
    r.execute_command("QFLUSH", "gone")
    for _ in range(4):
        eid = r.execute_command("QGET", "q", "g")[0]
        assert r.execute_command("QACK", "q", "g", eid) == 1
    assert r.execute_command("BGREWRITEAOF")
    wait_for(lambda: r.info("persistence")["aof_rewrite_in_progress"] == 0,
             what="the rewrite")
    # one EVENT an event, claims inside: no EVENTS or EVCLAIMS, which older builds refuse
    kinds = {k for _, k, _ in scan((s.workdir / "disque.aof").read_bytes()).records}
    assert "EVENT" in kinds and not kinds & {"EVENTS", "EVCLAIMS"}, kinds
    r.execute_command("QADD", "q", 600, "after")  # in the new file after the snapshot
    s.kill(signal.SIGKILL)
    s.start()
    r = s.client()
    assert r.info("groups")["events"] == 11
    rest = [r.execute_command("QGET", "q", "g", "EX", 0)[1] for _ in range(7)]
    assert rest == [b"e4", b"e5", b"e6", b"e7", b"e8", b"e9", b"after"]
    assert r.execute_command("QGET", "q", "g") is None
    assert r.execute_command("QGET", "gone", "g") is None
    assert "events" in s.log() and ids


def test_a_batch_leased_and_acked_survives_kill_9(server_factory):
    """QGET ... COUNT 6 and a QACK of several IDs (one twice) write their claims as one
    EVCLAIMS record each: after a kill -9 the 4 acked events stay done, the 2 still
    leased come back when their lease ends, and disque-check-aof passes the file."""
    s = server_factory(*AOF, "--appendfsync", "always")
    r = s.client()
    ids = [r.execute_command("QADD", "q", 600, f"e{i}") for i in range(10)]
    got = [e[0] for e in r.execute_command("QGET", "q", "g", "EX", 1, "COUNT", 6)]
    assert got == ids[:6]
    assert r.execute_command("QACK", "q", "g", *got[:4], got[0]) == 4
    assert (s.workdir / "disque.aof").read_bytes().count(b"\r\nEVCLAIMS\r\n") == 2
    s.kill(signal.SIGKILL)
    s.start()
    r = s.client()
    st = r.execute_command("QINFO", "q", "GROUPS", "g")[0].split()
    assert b"done:4" in st and b"inprogress:2" in st, st
    time.sleep(1.1)  # the two leases in flight ran out
    rest = [r.execute_command("QGET", "q", "g", "EX", 0)[0] for _ in range(6)]
    assert sorted(rest) == ids[4:]
    assert r.execute_command("QGET", "q", "g") is None
    s.stop()
    out = subprocess.run([sys.executable, "-m", "disquepy.tools.check_aof",
                          str(s.workdir / "disque.aof")],
                         capture_output=True, text=True, env=s.env, timeout=60)
    assert out.returncode == 0 and "AOF is valid" in out.stdout, out.stdout + out.stderr


def test_rolling_restart_without_aof_keeps_events_with_copies_left(make_cluster):
    """Without AOF a restarted node comes back empty; its peers give it their copies
    back when the link comes up (EVSYNC/EVNEED), so a rolling restart keeps every
    event as long as a copy survives each step."""
    servers, clients = make_cluster(3)
    ids = [clients[i % 3].execute_command("QADD", "q", 600, f"ev{i}") for i in range(60)]
    for i in range(3):
        restart(servers, clients, i, signal.SIGTERM)
        wait_for(lambda i=i: clients[i].info("groups")["events"] == 60, timeout=20,
                 what="the restarted node to get its copies back")
    assert sorted(drain(clients, "q", "g", 60)) == sorted(ids)
