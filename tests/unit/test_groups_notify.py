"""QNOTIFY across the cluster, in process (core/groups/notify.py): a peer tells a
watching node that events are available only when it could lease one (it decides
for it), so a holder that has not yet heard of a lease does not wake a consumer for
an event already taken."""

from __future__ import annotations

from clusterharness import Cluster


def qadd(c: Cluster, i: int, body: str) -> bytes:
    """QADD on node i, its ID once replicated."""
    cl = c.new_client(i)
    assert c.cmd(i, "QADD", "q", 60, body, client=cl) == "BLOCKED"
    c.run(50)
    out = [d for who, d in c.outbox(i) if who is cl]
    assert len(out) == 1 and isinstance(out[0], bytes), out
    return out[0]


def test_a_holder_behind_on_a_lease_does_not_wake_a_watching_consumer():
    c = Cluster(3)
    c.meet_all()
    eid = qadd(c, 0, "x")
    store = c.nodes[0].groups.store
    auth_id = store.authority_of(store.holders_at(*store.locate(eid)))
    auth = next(i for i, n in enumerate(c.nodes) if n.myid == auth_id)
    b, other = [i for i in range(3) if i != auth]
    for i in range(3):  # every node holds a copy
        assert c.nodes[i].groups.store.locate(eid)[0] is not None
    # the authority's messages to the third holder are slow: it hears of the lease last
    held: list = []
    real = c.route

    def route(i, per):
        if i == auth and c.nodes[other].myid in per:
            per = dict(per)
            held.append({c.nodes[other].myid: per.pop(c.nodes[other].myid)})
        real(i, per)

    c.route = route
    getter = c.new_client(b)
    assert c.cmd(b, "QGET", "q", "g", "EX", 0, client=getter) == "BLOCKED"  # asked of auth
    c.run(20)
    got = [d for who, d in c.outbox(b) if who is getter]
    assert got and got[0][0] == eid
    assert held  # the lease's EVSTATE to the third holder is still on its way
    waiter = c.new_client(b)
    assert c.cmd(b, "QNOTIFY", "g", 5, "q", client=waiter) == "BLOCKED"
    c.run(50)  # the EVWATCH reaches both peers; the third still sees the event untaken
    assert [d for who, d in c.outbox(b) if who is waiter] == []
    c.route = real
    for per in held:
        real(auth, per)
    c.run(50)
    assert [d for who, d in c.outbox(b) if who is waiter] == []
    waker = c.new_client(other)
    c.cmd(other, "QADD", "q", 60, "y", client=waker)  # a new event wakes it
    c.run(50)
    assert [d for who, d in c.outbox(b) if who is waiter] == [b"q"]
