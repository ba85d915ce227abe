"""QACK of several IDs across the cluster, in process (core/groups/acks.py): each ID
decided by its event's authority, the IDs a peer decides asked in one message, unknown
IDs asked of every reachable peer, the claims changed sent to holders in one EVSTATE,
and a peer from before EVACKS (a rolling upgrade) refusing it without harm."""

from __future__ import annotations

from clusterharness import Cluster

from disquepy.core import messages as M
from disquepy.core.groups.acks import ACK_TIMEOUT_MS


def call(c: Cluster, i: int, *args, wait: int = 100):
    """A command on node i; if it blocks, its reply once the cluster ran ``wait`` ms."""
    cl = c.new_client(i)
    r = c.cmd(i, *args, client=cl)
    if r != "BLOCKED":
        return r
    c.run(wait)
    out = [d for who, d in c.outbox(i) if who is cl]
    assert len(out) == 1, out
    return out[0]


def sent(c: Cluster, i: int, fn) -> list:
    """What node i sends on the bus while ``fn()`` runs: (destination, type, fields)."""
    node = c.nodes[i]
    c.pump()
    out = []
    real = c.route

    def route(j, per):
        if j == i:
            for d, msg in per.items():
                for m in (msg[4] if msg[0] == M.BATCH else [msg]):
                    out.append((d, m[0], m[4:]))
        real(j, per)

    c.route = route
    try:
        fn()
    finally:
        c.route = real
    assert node is c.nodes[i]
    return out


def leased(c: Cluster, n: int, per_node: int = 3) -> list[list[bytes]]:
    """``per_node`` events created on each of the first n nodes, every one leased to
    group g (each by its creator, its authority): their IDs by creating node."""
    ids = []
    for i in range(n):
        mine = [call(c, i, "QADD", "q", 3600, f"e{i}.{k}") for k in range(per_node)]
        got = call(c, i, "QGET", "q", "g", "EX", 60, "COUNT", per_node)
        assert [e[0] for e in got] == mine
        ids.append(mine)
    return ids


def test_one_qack_acks_ids_decided_here_and_by_peers_one_message_per_peer():
    c = Cluster(3)
    c.meet_all()
    a, b, x = leased(c, 3)
    unknown = b"0000000000000001-deadbeef"
    msgs = []
    reply = []

    def run():
        cl = c.new_client(0)
        reply.append(c.cmd(0, "QACK", "q", "g", *a, *b, b[0], *x, unknown, a[1], client=cl))
        c.run(50)
        reply.append([d for who, d in c.outbox(0) if who is cl])

    msgs = sent(c, 0, run)
    assert reply == ["BLOCKED", [9]]  # a's here, b's and x's by their creators
    asks = sorted((d, t, f[-1]) for d, t, f in msgs if t in (M.EVACK, M.EVACKS))
    n1, n2 = c.nodes[1].myid, c.nodes[2].myid
    # one EVACKS per peer with the IDs it decides, the unknown one asked of both
    assert sorted((d, t, sorted(ids)) for d, t, ids in asks) == sorted([
        (n1, M.EVACKS, sorted([*b, unknown])), (n2, M.EVACKS, sorted([*x, unknown]))])
    # the three claims acked here went to each holder in one EVSTATE message
    states = [(d, len(f)) for d, t, f in msgs if t == M.EVSTATE]
    assert sorted(states)[:2] == [(n1, 3), (n2, 3)] and len(states) == 2
    for i in range(3):  # every holder knows every event done
        st = call(c, i, "QSTATUS", "q")
        assert st[0][1][1][7] == 9, st  # done
    assert call(c, 1, "QACK", "q", "g", *a, *b) == 0  # acked already
    assert c.nodes[0].groups.acks.acked + c.nodes[1].groups.acks.acked \
        + c.nodes[2].groups.acks.acked == 9


def test_expired_leases_and_a_single_id_keep_bananaqs_reply():
    c = Cluster(3)
    c.meet_all()
    ids = [call(c, 1, "QADD", "q", 3600, f"e{k}") for k in range(4)]
    got = call(c, 0, "QGET", "q", "g", "EX", "0.2")  # leased by node 1, through a peer
    assert got[0] == ids[0]
    assert call(c, 1, "QGET", "q", "g", "EX", 60, "COUNT", 2) == [[ids[1], b"e1"],
                                                                   [ids[2], b"e2"]]
    c.run(300)  # the first lease ran out
    assert call(c, 0, "QACK", "q", "g", ids[0]) == 0  # one ID: 0 / 1, as ever
    assert call(c, 0, "QACK", "q", "g", ids[1]) == 1
    # ran out, live, never leased: 1
    assert call(c, 2, "QACK", "q", "g", ids[0], ids[2], ids[3]) == 1


def test_a_peer_from_before_evacks_refuses_it_and_the_qack_answers_in_time():
    """Mid rolling upgrade: node 2 runs a version without EVACKS. It drops the message
    (counted and logged as any unknown type, the rest of its frame handled); the QACK
    answers after ACK_TIMEOUT_MS with the IDs the others decided, node 2's leases run
    out (at-least-once), and a single-ID QACK (EVACK, known to every version) works."""
    c = Cluster(3)
    c.meet_all()
    c.unknown[2] = frozenset({M.EVACKS, M.EVACKEDS})
    a, b, x = leased(c, 3)
    before = c.nodes[2].stats.bus_malformed
    logs: list[str] = []
    c.shells[2].log = lambda level, line: logs.append(line)
    cl = c.new_client(0)
    assert c.cmd(0, "QACK", "q", "g", *a, *b, *x, client=cl) == "BLOCKED"
    c.run(ACK_TIMEOUT_MS - 100)
    assert [d for who, d in c.outbox(0) if who is cl] == []  # node 2 never answers
    c.run(200)
    assert [d for who, d in c.outbox(0) if who is cl] == [6]
    assert c.nodes[2].stats.bus_malformed == before + 1
    assert any("unknown message type 44" in line for line in logs), logs
    assert call(c, 0, "QACK", "q", "g", x[0]) == 1  # one ID to node 2: EVACK
    assert call(c, 2, "QACK", "q", "g", x[1], x[2]) == 2  # decided there


def test_events_this_node_never_held_are_asked_of_every_peer_in_one_message_each():
    """4 nodes, R = 3: node 3 holds no copy of some of node 0's events. A QACK there
    asks every reachable peer about those (one message each, with every such ID): the
    authority acks, the others answer "not mine"; the reply once all answered."""
    c = Cluster(4)
    c.meet_all()
    ids = [call(c, 0, "QADD", "q", 3600, f"e{k}") for k in range(12)]
    got = call(c, 0, "QGET", "q", "g", "EX", 60, "COUNT", 12)
    assert [e[0] for e in got] == ids
    held = c.nodes[3].groups.store
    lacking = [i for i in ids if not held.has(i)]
    assert len(lacking) >= 2 and len(lacking) < len(ids)
    reply = []

    def run():
        cl = c.new_client(3)
        reply.append(c.cmd(3, "QACK", "q", "g", *ids, client=cl))
        c.run(50)
        reply.append([d for who, d in c.outbox(3) if who is cl])

    msgs = sent(c, 3, run)
    assert reply == ["BLOCKED", [12]]
    asks = [(d, t, f[-1]) for d, t, f in msgs if t in (M.EVACK, M.EVACKS)]
    peers = sorted(c.nodes[i].myid for i in range(3))
    assert sorted(d for d, _, _ in asks) == peers  # one message to each peer
    for d, t, sent_ids in asks:
        assert t == M.EVACKS and set(lacking) <= set(sent_ids)
        if d != c.nodes[0].myid:  # the others get the unknown ones only
            assert sorted(sent_ids) == sorted(lacking)


def test_the_claims_of_a_batch_are_one_aof_record():
    """With AOF, QGET ... COUNT's leases and a QACK's acks are one EVCLAIMS record each
    (one encoding and CRC, not one per event); a single ID keeps its EVCLAIM."""
    c = Cluster(1)
    node = c.nodes[0]
    node.aof.on = True  # (the shell opens the file; here the records are kept)
    ids = [call(c, 0, "QADD", "q", 3600, f"e{k}") for k in range(5)]
    records = c.shells[0].records
    before = len(records)
    assert [e[0] for e in call(c, 0, "QGET", "q", "g", "COUNT", 5)] == ids
    assert call(c, 0, "QACK", "q", "g", *ids[:4], ids[0]) == 4
    assert call(c, 0, "QACK", "q", "g", ids[4]) == 1
    kinds = [r.split(b"\r\n")[2] for r in records[before:]]
    assert kinds == [b"EVCLAIMS", b"EVCLAIMS", b"EVCLAIM"]
