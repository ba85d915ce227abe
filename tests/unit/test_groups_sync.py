"""Holders catching up when a link comes up (core/groups/sync.py, in process): a node
that lost its copies (restarted without AOF) gets them back from a peer's EVSYNC
round, which goes out a chunk of events per tick (a node holding many events never
stalls on it), and ends with EVSYNCED."""

from __future__ import annotations

from clusterharness import Cluster

from disquepy.core.groups.sync import SYNC_CHUNK


def test_an_evsync_round_in_chunks_gives_a_node_its_lost_copies_back():
    c = Cluster(2)
    c.meet_all()
    n = SYNC_CHUNK * 2 + 100  # three steps
    for k in range(n):
        assert c.cmd(0, "QADD", "q", 3600, f"ev{k}", "NOBLOCK") == b"OK"
    c.run(200)
    g1 = c.nodes[1].groups
    assert g1.store.count == n  # node 1 holds a copy of each
    assert c.cmd(0, "QGET", "q", "g", "EX", "0")[1] == b"ev0"  # a claim to sync too
    c.run(50)
    g1.store.clear()  # as after a restart without AOF
    assert not g1.store.count
    g0 = c.nodes[0].groups
    g0.sync.send(c.nodes[1].myid, False, c.now)
    assert g0.sync.out  # not all in one step
    c.pump()
    c.run(100)
    assert not g0.sync.out
    assert g1.store.count == n  # EVNEED answered with the copies
    held = [g1.store.peek(eid) for eid in g1.store.ids()]
    e0 = next(e for e in held if e is not None and e.body == b"ev0")
    assert e0.claims  # and the claims came with them
