"""``disque cluster create/nodes`` and ``disque top`` on a real 3-node cluster."""

from __future__ import annotations

import threading

import pytest
from cli_support import table_rows
from support import hello_ok

from disquepy.cli.conn import Target
from disquepy.cli.top import queue_table, take_sample


def node_ids(clients) -> list[str]:
    return [c.execute_command("CLUSTER", "MYID").decode() for c in clients]


@pytest.mark.timeout(120)
def test_cluster_create_makes_hello_show_every_node(run_cli, fresh_nodes):
    servers = fresh_nodes(3)
    clients = [s.client() for s in servers]
    assert all(len(c.execute_command("HELLO")) == 3 for c in clients)  # alone before
    res = run_cli("cluster", "create", *[f"127.0.0.1:{s.port}" for s in servers])
    assert res.rc == 0, res.err
    assert "every node sees every node" in res.out
    rows = {r[0]: r for r in table_rows(res.out)}
    ids = node_ids(clients)
    for s, nid in zip(servers, ids, strict=True):
        assert rows[f"127.0.0.1:{s.port}"][1:] == [nid, "3", "3/3"]
    for c in clients:  # checked on the servers, not through the CLI
        assert hello_ok(c, 3)
        assert {e[0].decode() for e in c.execute_command("HELLO")[2:]} == set(ids)


@pytest.mark.timeout(60)
def test_cluster_create_reports_an_unreachable_node(run_cli, fresh_nodes):
    from support import free_port

    (s,) = fresh_nodes(1)
    dead = free_port()
    res = run_cli("cluster", "create", f"127.0.0.1:{s.port}", f"127.0.0.1:{dead}")
    assert res.rc == 1
    assert res.err.strip() == f"Could not connect to Disque at 127.0.0.1:{dead}: " \
                              "Connection refused"
    assert len(s.client().execute_command("HELLO")) == 3  # nothing was joined


@pytest.mark.timeout(120)
def test_cluster_nodes_lists_the_cluster(run_cli, make_cluster):
    servers, clients = make_cluster(3)
    res = run_cli("-p", servers[1].port, "cluster", "nodes")
    assert res.rc == 0, res.err
    rows = table_rows(res.out)
    ids = node_ids(clients)
    assert sorted(r[0] for r in rows) == sorted(ids)
    mine = next(r for r in rows if r[0] == ids[1])
    assert mine[1] == f"127.0.0.1:{servers[1].port}" and "myself" in mine[2]
    assert all(r[4] == "1" for r in rows)  # HELLO priority: all reachable
    assert {r[1] for r in rows} == {f"127.0.0.1:{s.port}" for s in servers}


@pytest.mark.timeout(120)
def test_top_once_shows_queue_lengths_matching_qlen_on_every_node(run_cli, make_cluster):
    servers, clients = make_cluster(3)
    for i, c in enumerate(clients):  # different lengths on different nodes
        for j in range(i + 1):
            c.execute_command("ADDJOB", "shared", f"s{i}{j}", 0, "REPLICATE", 1)
    for j in range(4):
        clients[2].execute_command("ADDJOB", "only2", f"o{j}", 0, "REPLICATE", 2)
    clients[0].execute_command("PAUSE", "paused", "in")
    res = run_cli("-p", servers[0].port, "top", "--once", "--interval", "0.2")
    assert res.rc == 0, res.err
    rows = table_rows(res.out)
    queues = {r[0]: r for r in rows if len(r) == 8 and not r[0].startswith("127.0.0.1:")}
    nodes = {r[0]: r for r in rows if r[0].startswith("127.0.0.1:")}
    qlen = {q: sum(c.execute_command("QLEN", q) for c in clients) for q in ("shared", "only2")}
    assert qlen == {"shared": 6, "only2": 4}
    assert queues["shared"][1] == "6" and queues["shared"][7] == "3"  # length, nodes
    assert queues["only2"][1] == "4" and queues["only2"][7] == "1"
    assert queues["paused"][5] == f"in@127.0.0.1:{servers[0].port}"
    assert set(nodes) == {f"127.0.0.1:{s.port}" for s in servers}
    ids = dict(zip((f"127.0.0.1:{s.port}" for s in servers), node_ids(clients), strict=True))
    for addr, row in nodes.items():
        assert row[1] == ids[addr][:8]
        c = clients[[f"127.0.0.1:{s.port}" for s in servers].index(addr)]
        assert row[2] == str(c.info("jobs")["registered_jobs"])


@pytest.mark.timeout(60)
def test_top_rates_and_blocked_clients(server, r):
    target = Target(port=server.port)
    try:
        before = take_sample(target, {})
        for i in range(10):
            r.execute_command("ADDJOB", "q", f"j{i}", 0)
        for _ in range(4):
            r.execute_command("GETJOB", "FROM", "q")
        blocked = server.client()
        t = threading.Thread(target=blocked.execute_command,
                             args=("GETJOB", "TIMEOUT", 3000, "FROM", "idle"), daemon=True)
        t.start()
        from support import wait_for

        wait_for(lambda: r.info("clients")["blocked_clients"] == 1, what="a blocked GETJOB")
        after = take_sample(target, {})
    finally:
        target.close()
    dt = after.t - before.t
    from rich.console import Console

    con = Console(width=200, no_color=True)
    with con.capture() as cap:
        con.print(queue_table(after, before, limit=10))
    rows = {row[0]: row for row in table_rows(cap.get())}
    assert rows["q"][1:4] == ["6", f"{10 / dt:.1f}", f"{4 / dt:.1f}"]
    assert rows["idle"][4] == "1"  # blocked clients
    with con.capture() as cap:  # a first frame has no rates yet
        con.print(queue_table(after, None, limit=10))
    assert {row[0]: row for row in table_rows(cap.get())}["q"][2:4] == ["-", "-"]
    t.join(5)


@pytest.mark.timeout(60)
def test_top_iterations_prints_that_many_tables(run_cli, server, r):
    r.execute_command("ADDJOB", "q", "x", 0)
    res = run_cli("-p", server.port, "top", "--iterations", "3", "-i", "0.1")
    assert res.rc == 0, res.err
    assert res.out.count("Queues (1)") == 3 and res.out.count("Nodes (1)") == 3


@pytest.mark.timeout(60)
def test_top_against_nothing_is_a_clear_error(run_cli):
    from support import free_port

    port = free_port()
    res = run_cli("-p", port, "top", "--once")
    assert res.rc == 1
    assert res.err.strip() == f"Could not connect to Disque at 127.0.0.1:{port}: " \
                              "Connection refused"


@pytest.mark.timeout(120)
def test_top_shows_a_dead_node_as_down_and_survives_its_seed_dying(run_cli, make_cluster):
    servers, clients = make_cluster(3)
    clients[1].execute_command("ADDJOB", "q", "x", 0, "REPLICATE", 1)
    servers[2].kill()
    res = run_cli("-p", servers[0].port, "top", "--once", "-i", "0.1")
    assert res.rc == 0, res.err
    rows = {row[0]: row for row in table_rows(res.out)}
    assert rows[f"127.0.0.1:{servers[2].port}"][2].startswith("down")
    assert rows[f"127.0.0.1:{servers[1].port}"][2] == "1"  # jobs on the live node
    assert rows["q"][1] == "1"
    # the seed itself dies between refreshes: the other nodes are asked instead
    target = Target(port=servers[0].port)
    known: list = []
    try:
        first = take_sample(target, {}, known)
        assert len(first.nodes) == 3 and len(known) == 3
        servers[0].kill()
        second = take_sample(target, {}, known)
    finally:
        target.close()
    state = {n.addr: n.info is not None for n in second.nodes}
    assert state == {f"127.0.0.1:{servers[0].port}": False,
                     f"127.0.0.1:{servers[1].port}": True,
                     f"127.0.0.1:{servers[2].port}": False}
    assert second.qstats[("q", f"127.0.0.1:{servers[1].port}")]["len"] == 1
