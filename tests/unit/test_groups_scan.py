"""A group's scan of a queue on a node that decides none of its events (core, in
process): QGET there asks the deciding node, and must not look again at every event
of a long queue each time (it did: up to 10,000 events per QGET, 1.7 ms at 5,000)."""

from __future__ import annotations

from clusterharness import Cluster
from nodeharness import decode


def consume_on(c: Cluster, i: int, n: int, group: bytes = b"g") -> list[tuple[bytes, bool]]:
    """QGET ``n`` times on node ``i``: (event ID, leased by node i itself) each."""
    got = []
    for _ in range(n):
        client = c.new_client(i)
        r = c.nodes[i].execute(client, [b"QGET", b"q", group, b"EX", b"30"], c.now)
        if r is not None:
            got.append((decode(r)[0], True))
            continue
        c.pump()
        c.run(10)
        got += [(d[0], False) for cl, d in c.outbox(i) if cl is client and d]
    return got


def test_a_non_deciding_node_scans_each_event_once_until_reachability_changes():
    c = Cluster(3)
    c.meet_all()
    for n in range(600):
        assert c.cmd(0, "QADD", "q", 3600, f"ev{n}", "NOBLOCK") == b"OK"
    c.run(200)
    ids = c.nodes[0].groups.store.ids()
    groups1 = c.nodes[1].groups.store
    q = groups1.queues[b"q"]
    assert q.live == 600 and groups1.ids() == ids  # node 1 holds a copy of every event,
    #                                                node 0 decides

    got = consume_on(c, 1, 5)
    assert got == [(e, False) for e in ids[:5]]  # leased by node 0, in order
    cur = q.cursors[b"g"]
    assert cur.pos <= q.base + 5  # the first available event stays in view (pulls)...
    assert cur.mine_pos == q.end()  # ...and none is looked at again for a lease here
    got = consume_on(c, 1, 5)
    assert got == [(e, False) for e in ids[5:10]] and cur.mine_pos == q.end()
    # an event node 1 decides itself is found past the others
    assert c.cmd(1, "QADD", "q", 3600, "mine", "NOBLOCK") == b"OK"
    c.run(50)
    own = groups1.ids()[-1]
    assert consume_on(c, 1, 1) == [(own, True)]

    # node 0 fails: the first holder not failed decides for its events now, and node
    # 1's scans look at them again
    c.down.add(0)
    c.run(8000)
    assert cur.reach is not c.nodes[1].members.reach_ids  # not rescanned yet
    deciders = {groups1.authority(groups1.peek(e)) for e in ids[10:]}
    assert deciders == {c.nodes[1].myid} or deciders == {c.nodes[2].myid}
    mine = deciders == {c.nodes[1].myid}
    assert consume_on(c, 1, 3) == [(e, mine) for e in ids[10:13]]
