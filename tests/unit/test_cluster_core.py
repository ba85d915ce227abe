"""The cluster state machine: several pure nodes, a virtual clock, a routed bus."""

from __future__ import annotations

import pytest
from clusterharness import Cluster
from nodeharness import Error


@pytest.fixture
def c3():
    c = Cluster(3)
    c.meet_all()
    return c


def states(c, jid):
    return [None if j is None else j.state_name.decode() for j in c.jobs_everywhere(jid)]


def test_meet_one_learns_all_by_gossip():
    c = Cluster(5)
    c.meet_all()  # only node 0 was told about the others
    for i, n in enumerate(c.nodes):
        assert n.size == 5 and n.reachable == 4, (i, n.members.peers)
    hello = c.cmd(3, "HELLO")
    assert hello[0] == 1 and len(hello) == 2 + 5
    assert all(entry[3] == b"1" for entry in hello[2:])
    assert all(n.ip == "127.0.0.1" for n in c.nodes)  # learned from MEET / PING / PONG


def test_cluster_info_and_nodes(c3):
    info = c3.cmd(0, "CLUSTER", "INFO").decode()
    assert "cluster_known_nodes:3" in info and "cluster_reachable_nodes:2" in info
    lines = c3.cmd(1, "CLUSTER", "NODES").decode().splitlines()
    assert len(lines) == 3 and sum("myself" in ln for ln in lines) == 1
    assert c3.cmd(0, "CLUSTER", "MYID") == c3.nodes[0].myid_b


def test_default_replicate_is_min_3_cluster_size(c3):
    assert c3.cmd(0, "ADDJOB", "q", "b", 0) == "BLOCKED"  # synchronous by default
    c3.run(100)
    jid = c3.outbox(0)[0][1]
    assert states(c3, jid).count("queued") == 1
    assert states(c3, jid).count("active") == 2


def test_sync_replication_replies_after_copies(c3):
    consumer = c3.nodes[0].new_client(now=c3.now)
    r = c3.cmd(0, "ADDJOB", "q", "b", 5000, "REPLICATE", 3, client=consumer)
    assert r == "BLOCKED"
    c3.run(20)
    out = c3.outbox(0)
    assert len(out) == 1 and out[0][1].startswith(b"D-")
    jid = out[0][1]
    assert sorted(states(c3, jid)) == ["active", "active", "queued"]
    show = c3.cmd(0, "SHOW", jid)
    d = dict(zip(show[::2], show[1::2], strict=True))
    assert len(d[b"nodes-delivered"]) == 3


def test_copies_share_node_lists_and_queue_names(c3):
    """Each job keeps its node lists and queue name; jobs replicated to the same nodes
    share one object for each, as the origin's own jobs do, instead of holding what the
    bus decoded for them (a replica's job cost 961 bytes instead of 539 without this)."""
    clients = [c3.nodes[0].new_client(now=c3.now) for _ in range(6)]
    for cl in clients:
        assert c3.cmd(0, "ADDJOB", "jobs_email_outbound", "b", 5000, "REPLICATE", 3,
                      client=cl) == "BLOCKED"
    c3.run(20)
    jids = [reply for _, reply in c3.outbox(0)]
    assert len(jids) == 6
    origin, replicas = c3.nodes[0], c3.nodes[1:]
    for node in (origin, *replicas):
        jobs = [node.jobs.get(j) for j in jids]
        assert all(j is not None for j in jobs)
        first = jobs[0]
        assert len(first.delivered) == 3
        assert all(j.delivered is first.delivered for j in jobs), node.port
        assert all(j.queue is first.queue for j in jobs), node.port
    # who confirmed a copy is forgotten once the job is replicated (Disque's SHOW)
    assert all(origin.jobs.get(j).confirmed == () for j in jids)


def test_norepl_when_not_enough_nodes(c3):
    assert c3.cmd(0, "ADDJOB", "q", "b", 0, "REPLICATE", 4) == (
        "NOREPL Not enough reachable nodes for the requested replication level")


def test_norepl_timeout_cleans_copies(c3):
    c3.partition({0, 1}, {2})
    c3.run(c3.nodes[0].config.cluster_node_timeout * 3)  # node 2 becomes unreachable
    assert c3.nodes[0].reachable == 1
    c3.heal()
    # reachable again only after pings: replicate to 3 while node 2 is cut again
    c3.run(3000)
    c3.partition({0}, {1, 2})
    cl = c3.nodes[0].new_client(now=c3.now)
    r = c3.cmd(0, "ADDJOB", "q", "b", 300, "REPLICATE", 3, client=cl)
    assert r == "BLOCKED"
    c3.run(400)
    out = c3.outbox(0)
    assert out and out[0][1] == ("NOREPL Timeout reached before replicating to the requested "
                                 "number of nodes")
    assert len(c3.nodes[0].jobs) == 0


def test_async_replicates_in_background(c3):
    jid = c3.cmd(0, "ADDJOB", "q", "b", 0, "REPLICATE", 3, "ASYNC")
    assert jid.startswith(b"D-")
    c3.run(50)
    assert sorted(states(c3, jid)) == ["active", "active", "queued"]


def test_ack_frees_job_on_every_node(c3):
    jid = c3.cmd(0, "ADDJOB", "q", "b", 0, "REPLICATE", 3, "ASYNC")
    c3.run(50)
    got = c3.cmd(0, "GETJOB", "FROM", "q")
    assert got[0][1] == jid
    assert c3.cmd(0, "ACKJOB", jid) == 1
    c3.run(100)
    assert states(c3, jid) == [None, None, None]


def test_ack_on_a_node_without_the_job_via_dummy_ack():
    c = Cluster(4)
    c.meet_all()
    jid = c.cmd(0, "ADDJOB", "q", "b", 0, "REPLICATE", 2, "ASYNC")
    c.run(50)
    holders = [i for i, j in enumerate(c.jobs_everywhere(jid)) if j is not None]
    other = next(i for i in range(4) if i not in holders)
    assert c.cmd(other, "ACKJOB", jid) == 0  # unknown here: a dummy ack is kept
    c.run(5000)
    assert states(c, jid) == [None] * 4


def test_fastack_deletes_everywhere(c3):
    jid = c3.cmd(0, "ADDJOB", "q", "b", 0, "REPLICATE", 3, "ASYNC")
    c3.run(50)
    assert c3.cmd(1, "FASTACK", jid) == 1
    c3.run(20)
    assert states(c3, jid) == [None, None, None]


def test_fastack_reaches_a_copy_the_acking_node_did_not_know(c3):
    """A replica moved a copy to a third node by federation (YOURJOBS): the origin
    does not know that node, the replica does and forwards the FASTACK's DELJOB."""
    from disquepy.core import messages as M

    jid = c3.cmd(0, "ADDJOB", "q", "b", 0, "REPLICATE", 2, "ASYNC")
    c3.run(50)
    r = next(i for i in (1, 2) if c3.nodes[i].jobs.get(jid) is not None)
    t = 3 - r
    rn, tn = c3.nodes[r], c3.nodes[t]
    job = rn.jobs.get(jid)
    job.delivered = (*job.delivered, tn.myid)  # what _send_jobs records when exporting
    tn.handle_message([M.YOURJOBS, rn.myid, rn.port, 0, [M.job_to_wire(job)]], "127.0.0.1",
                      c3.now)
    assert tn.jobs.get(jid) is not None and tn.myid not in c3.nodes[0].jobs.get(jid).delivered
    assert c3.cmd(0, "FASTACK", jid) == 1
    c3.run(20)
    assert states(c3, jid) == [None, None, None]


def test_a_node_whose_consumer_left_is_no_longer_pushed_jobs(c3):
    """Node 0's consumer asked for jobs and timed out; node 2's consumer waits now. A
    new job on node 1 must go to node 2, not to node 0's remembered request."""
    gone = c3.new_client(0)
    assert c3.cmd(0, "GETJOB", "TIMEOUT", 300, "FROM", "q", client=gone) == "BLOCKED"
    c3.run(600)
    assert c3.outbox(0) == [(gone, None)]  # timed out
    waiting = c3.new_client(2)
    assert c3.cmd(2, "GETJOB", "TIMEOUT", 5000, "FROM", "q", client=waiting) == "BLOCKED"
    c3.run(50)
    jid = c3.cmd(1, "ADDJOB", "q", "x", 0, "REPLICATE", 1)
    c3.run(200)
    got = c3.outbox(2)
    assert got and got[0][0] is waiting and got[0][1][0][1] == jid
    assert c3.cmd(0, "QLEN", "q") == 0


def test_a_stale_yourjobs_never_brings_back_a_delivered_at_most_once_job(c3):
    """A duplicated (or late) YOURJOBS frame arriving after a RETRY 0 job was delivered
    and acked must not create and queue the job again (simulator seeds 6067, 6120 with
    --fsync always: delivered twice)."""
    from disquepy.core import messages as M

    jid = c3.cmd(0, "ADDJOB", "q", "b", 0, "REPLICATE", 1, "RETRY", 0)
    n0, n1 = c3.nodes[0], c3.nodes[1]
    wire = M.job_to_wire(n0.jobs.get(jid))
    frame = [M.YOURJOBS, n0.myid, n0.port, 0, [wire]]
    n1.handle_message(frame, "127.0.0.1", c3.now)  # the job moves to node 1
    assert c3.cmd(1, "GETJOB", "NOHANG", "FROM", "q")[0][1] == jid
    assert c3.cmd(1, "ACKJOB", jid) == 1
    c3.run(3000)
    assert n1.jobs.get(jid) is None
    n1.handle_message(frame, "127.0.0.1", c3.now)  # the same frame again
    assert n1.jobs.get(jid) is None and c3.cmd(1, "QLEN", "q") == 0


def test_unacked_job_requeued_once_cluster_wide(c3):
    jid = c3.cmd(0, "ADDJOB", "q", "b", 0, "REPLICATE", 3, "RETRY", 2, "ASYNC")
    c3.run(50)
    c3.cmd(0, "GETJOB", "FROM", "q")
    c3.run(4000)
    st = states(c3, jid)
    assert st.count("queued") == 1, st
    assert max(j.adeliv for j in c3.jobs_everywhere(jid)) >= 1


def test_queued_dedup_rule_lets_one_copy_win(c3):
    from disquepy.core.replication import _xor_rank

    jid = c3.cmd(0, "ADDJOB", "q", "b", 0, "REPLICATE", 3, "ASYNC")
    c3.run(50)
    c3.cmd(0, "GETJOB", "FROM", "q")
    assert c3.cmd(1, "ENQUEUE", jid) == 1 and c3.cmd(2, "ENQUEUE", jid) == 1
    assert c3.cmd(0, "NACK", jid) == 1  # node 0 queues again and broadcasts QUEUED
    c3.run(50)
    st = states(c3, jid)
    assert st[0] == "queued"
    for i in (1, 2):
        wins = _xor_rank(c3.nodes[0].myid, jid) > _xor_rank(c3.nodes[i].myid, jid)
        assert st[i] == ("active" if wins else "queued"), (i, st)


def test_partitioned_copies_each_requeue_then_stay_at_least_once(c3):
    jid = c3.cmd(0, "ADDJOB", "q", "b", 0, "REPLICATE", 3, "RETRY", 2, "ASYNC")
    c3.run(50)
    c3.cmd(0, "GETJOB", "FROM", "q")
    c3.partition({0}, {1}, {2})  # WILLQUEUE can't reach anybody: each side re-queues
    c3.run(2600)
    assert states(c3, jid).count("queued") == 3
    c3.heal()
    c3.run(2000)
    got = [c3.cmd(i, "GETJOB", "NOHANG", "FROM", "q") for i in range(3)]
    assert all(g and g[0][1] == jid for g in got)  # delivered, possibly more than once
    assert c3.cmd(0, "ACKJOB", jid) == 1
    c3.run(3000)
    assert states(c3, jid) == [None, None, None]


def test_working_propagates(c3):
    jid = c3.cmd(0, "ADDJOB", "q", "b", 0, "REPLICATE", 3, "RETRY", 2, "ASYNC")
    c3.run(50)
    c3.cmd(0, "GETJOB", "FROM", "q")
    for _ in range(6):
        c3.run(1000)
        assert c3.cmd(0, "WORKING", jid) == 2
    assert "queued" not in states(c3, jid)


def test_nack_counts_on_all_copies(c3):
    jid = c3.cmd(0, "ADDJOB", "q", "b", 0, "REPLICATE", 3, "ASYNC")
    c3.run(50)
    c3.cmd(0, "GETJOB", "FROM", "q")
    assert c3.cmd(0, "NACK", jid) == 1
    c3.run(50)
    assert [j.nacks for j in c3.jobs_everywhere(jid)] == [1, 1, 1]


def test_federation_serves_blocked_consumer_fast(c3):
    consumer = c3.new_client(2)
    assert c3.cmd(2, "GETJOB", "FROM", "fq", client=consumer) == "BLOCKED"
    c3.run(20)
    jid = c3.cmd(0, "ADDJOB", "fq", "work", 0, "REPLICATE", 1)
    c3.run(20)  # pushed to the node that asked: no polling delay
    out = c3.outbox(2)
    assert out == [(consumer, [[b"fq", jid, b"work"]])]
    assert c3.cmd(2, "ACKJOB", jid) == 1
    c3.run(100)
    assert states(c3, jid) == [None, None, None]
    assert c3.cmd(2, "QSTAT", "fq")[11] == [c3.nodes[0].myid_b]  # import-from


def test_federation_moves_many_jobs_to_where_consumers_are(c3):
    ids = [c3.cmd(0, "ADDJOB", "m", f"j{i}", 0, "REPLICATE", 1) for i in range(50)]
    got = []
    for _ in range(200):
        r = c3.cmd(1, "GETJOB", "NOHANG", "COUNT", 10, "FROM", "m")
        if r:
            got += [j[1] for j in r]
        c3.run(30)
        if len(got) == 50:
            break
    assert sorted(got) == sorted(ids)


def test_pause_bcast(c3):
    assert c3.cmd(0, "PAUSE", "pq", "in", "bcast") == b"in"
    c3.run(20)
    assert all(c3.cmd(i, "PAUSE", "pq", "state") == b"in" for i in range(3))
    assert c3.cmd(1, "ADDJOB", "pq", "x", 0) == "PAUSED Queue paused in input, try later"


def test_failure_detection_and_recovery():
    c = Cluster(3, node_timeout=1000)
    c.meet_all()
    c.down.add(2)
    c.run(4000)
    assert "fail" in c.cmd(0, "CLUSTER", "NODES").decode()
    assert c.nodes[0].reachable == 1
    assert [e[3] for e in c.cmd(0, "HELLO")[2:] if e[0] == c.nodes[2].myid_b] == [b"100"]
    c.down.discard(2)
    c.run(3000)
    assert c.nodes[0].reachable == 2 and "fail" not in c.cmd(0, "CLUSTER", "NODES").decode()


def test_leaving_node_behaviour():
    c = Cluster(4)
    c.meet_all()
    waiting = c.new_client(3)
    assert c.cmd(3, "GETJOB", "FROM", "lq", client=waiting) == "BLOCKED"
    assert c.cmd(3, "CLUSTER", "LEAVING", "yes") == b"OK"
    assert c.outbox(3)[0][1] == ("LEAVING This node is leaving the cluster, please connect "
                                 "to a different one")
    c.run(200)
    assert c.cmd(0, "HELLO")[2:] and any(
        e[3] == b"100" for e in c.cmd(0, "HELLO")[2:] if e[0] == c.nodes[3].myid_b)
    cl = c.new_client(3)
    assert c.cmd(3, "ADDJOB", "lq", "x", 0, "REPLICATE", 2, client=cl) == "BLOCKED"
    c.run(50)
    jid = c.outbox(3)[0][1]
    assert c.nodes[3].jobs.get(jid) is None  # external replication: no local copy
    assert sum(j is not None for j in c.jobs_everywhere(jid)) == 2
    assert c.cmd(3, "GETJOB", "FROM", "other") == (
        "LEAVING This node is leaving the cluster, please connect to a different one")
    assert c.cmd(3, "CLUSTER", "LEAVING") == b"yes"


def test_nodes_conf_round_trip(c3):
    text = c3.nodes[1].members.nodes_conf_text()
    from clusterharness import Cluster as C

    fresh = C(1).nodes[0]
    assert fresh.members.load_nodes_conf(text, c3.now) == c3.nodes[1].myid
    assert set(fresh.members.peers) == set(c3.nodes[1].members.peers)


def test_malformed_messages_are_ignored(c3):
    n = c3.nodes[0]
    bad_job = [b"X" * 40, b"q", b"b", 1, 60, 0, 1, 1, 0, 0, ["Z" * 40]]
    for msg in ([99, "x", 1, 0], [1, c3.nodes[1].myid, 7712, 0, "junk"],
                [10, c3.nodes[1].myid, 7712, 0, [b"short"]], [], [1],
                [10, c3.nodes[1].myid, 7712, 0, bad_job],
                [3, "G" * 40, 7799, 0, [], "127.0.0.1"]):
        n.handle_message(msg, "127.0.0.1", c3.now)
    assert isinstance(c3.cmd(0, "PING"), bytes)
    assert len(n.jobs) == 0 and len(n.members.peers) == 2  # nothing bad was taken in
    assert not isinstance(c3.cmd(0, "ADDJOB", "q", "b", 0), Error)


def test_acks_reach_a_partitioned_copy_soon_after_the_heal():
    c = Cluster(3, node_timeout=1000)
    c.meet_all()
    jid = c.cmd(0, "ADDJOB", "q", "b", 0, "REPLICATE", 3, "ASYNC")
    c.run(50)
    c.partition({0, 1}, {2})
    c.run(20_000)  # GC back-off grows to 16 s meanwhile
    c.cmd(0, "GETJOB", "FROM", "q")
    assert c.cmd(0, "ACKJOB", jid) == 1
    c.run(40_000)
    assert c.jobs_everywhere(jid)[2] is not None  # still cut off: its copy stays
    c.heal()
    c.run(3000)  # node 2 answers pings again: GC resumes at once
    assert states(c, jid) == [None, None, None]


def test_importing_node_does_not_export_back(c3):
    consumer = c3.new_client(1)
    c3.cmd(1, "GETJOB", "FROM", "pp", client=consumer)
    c3.run(20)
    jid = c3.cmd(0, "ADDJOB", "pp", "x", 0, "REPLICATE", 1)
    c3.run(20)
    assert c3.outbox(1)[0][1][0][1] == jid  # imported from node 0
    c3.cmd(1, "NACK", jid)  # queued again on node 1
    c3.cmd(0, "GETJOB", "NOHANG", "FROM", "pp")  # node 0 asks: node 1 imports, refuses
    c3.run(100)
    assert states(c3, jid)[1] == "queued"


def test_batched_messages_are_handled_in_order(c3):
    from disquepy.core import messages as M

    n0, n1 = c3.nodes[0], c3.nodes[1]
    jid = c3.cmd(0, "ADDJOB", "bq", "b", 0, "REPLICATE", 2, "ASYNC")
    c3.run(50)
    holder = 1 if n1.jobs.get(jid) is not None else 2
    hdr = [n0.myid, n0.port, 0]
    batch = [M.BATCH, *hdr, [[M.WORKING, *hdr, jid], [M.DELJOB, *hdr, jid],
                             [M.BATCH, *hdr, []], "junk"]]
    c3.nodes[holder].handle_message(batch, "127.0.0.1", c3.now)
    assert c3.nodes[holder].jobs.get(jid) is None  # DELJOB, after WORKING, was applied


def test_working_on_an_acked_copy_keeps_its_garbage_collection(c3):
    jid = c3.cmd(0, "ADDJOB", "q", "b", 0, "REPLICATE", 3, "RETRY", 5, "ASYNC")
    c3.run(50)
    c3.partition({0}, {1, 2})
    c3.cmd(0, "GETJOB", "FROM", "q")
    assert c3.cmd(0, "ACKJOB", jid) == 1
    assert c3.cmd(0, "WORKING", jid) == 5  # no error, as in Disque
    show = c3.cmd(0, "SHOW", jid)
    d = dict(zip(show[::2], show[1::2], strict=True))
    assert d[b"state"] == b"acked" and d[b"next-requeue-within"] is None
    c3.heal()
    c3.run(5000)
    assert states(c3, jid) == [None, None, None]


def test_import_rate_in_qstat_and_qscan(c3):
    consumer = c3.new_client(1)
    for _ in range(30):  # a consumer on node 1, jobs produced on node 0, for a while
        c3.cmd(1, "GETJOB", "TIMEOUT", 500, "FROM", "imp", client=consumer)
        c3.cmd(0, "ADDJOB", "imp", "x", 0, "REPLICATE", 1)
        c3.run(40)
        for _c, reply in c3.outbox(1):
            if reply:
                c3.cmd(1, "ACKJOB", reply[0][1])
    c3.run(1000)
    st = c3.cmd(1, "QSTAT", "imp")
    d = dict(zip(st[::2], st[1::2], strict=True))
    assert d[b"import-rate"] > 0 and d[b"import-from"] == [c3.nodes[0].myid_b]
    assert c3.cmd(1, "QSCAN", "BUSYLOOP", "IMPORTRATE", 1)[1] == [b"imp"]
    assert c3.cmd(0, "QSCAN", "BUSYLOOP", "IMPORTRATE", 1)[1] == []


def test_dummy_ack_for_a_job_nobody_knows_is_collected():
    c = Cluster(3)
    c.meet_all()
    fake = b"D-12345678-" + b"Q" * 24 + b"-05a1"  # at-least-once ID, no such job anywhere
    assert c.cmd(1, "ACKJOB", fake) == 0
    assert c.nodes[1].jobs.get(fake) is not None  # the dummy ack is held...
    c.run(3000)
    assert c.nodes[1].jobs.get(fake) is None  # ...until every node said it doesn't know it


def test_producer_answered_when_a_copy_is_acked_before_replication_completes(c3):
    c3.partition({0, 1}, {2})  # node 2 still looks reachable: replication to 3 waits
    producer = c3.new_client(0)
    assert c3.cmd(0, "ADDJOB", "w", "b", 10_000, "REPLICATE", 3, "RETRY", 1,
                  client=producer) == "BLOCKED"
    c3.run(30)
    jid = next(iter(c3.nodes[1].jobs.values())).id  # node 1's copy
    c3.cmd(0, "WORKING", jid)  # a stray WORKING must not stop the replication timer
    c3.run(1500)  # node 1's copy re-queues after its retry
    got = c3.cmd(1, "GETJOB", "NOHANG", "FROM", "w")
    assert got and got[0][1] == jid
    assert c3.cmd(1, "ACKJOB", jid) == 1
    c3.run(100)
    assert c3.outbox(0) == [(producer, jid)]


def test_jobs_still_being_replicated_are_never_queued():
    from disquepy.core.job import WAIT_REPL, Job

    c = Cluster(1)
    n = c.nodes[0]
    job = Job(b"D-12345678-" + b"R" * 24 + b"-05a1", b"q", b"b", 1, 60, 3, 0, 5)
    job.state, job.qtime = WAIT_REPL, 1
    n.store.register(job)
    assert n.store.enqueue(job, c.now) is False and job.state == WAIT_REPL


def test_node_ids_from_wire_validates_and_shares_the_strings():
    from disquepy.core.ids import node_ids_from_wire

    a, b = "ab" * 20, "cd" * 20
    first = node_ids_from_wire([a, b])
    again = node_ids_from_wire(["".join(["ab"] * 20), "".join(["cd"] * 20)])  # new objects
    assert first == again == (a, b)
    assert all(x is y for x, y in zip(first, again, strict=True))
    assert node_ids_from_wire([]) == ()
    for bad in (["AB" * 20], ["ab" * 19], [b"ab" * 20], [1], [[a]], [a, None]):
        assert node_ids_from_wire(bad) is None, bad


def test_a_producer_gone_during_a_synchronous_addjob_takes_the_job_with_it(c3):
    """Issue #29 item 3, as C Disque: the producer was never told the job's ID (it may
    add it again), so the job is deleted here and on the nodes it was sent to."""
    c3.partition([0], [1, 2])  # the copies cannot be confirmed
    producer = c3.new_client(0)
    assert c3.cmd(0, "ADDJOB", "q", "b", 10_000, "REPLICATE", 3, client=producer) == "BLOCKED"
    c3.run(200)
    [jid] = [j.id for j in c3.nodes[0].jobs.values()]
    assert c3.nodes[0].jobs.get(jid).state_name == b"wait-repl"
    c3.heal()
    c3.nodes[0].client_closed(producer)
    assert c3.nodes[0].jobs.get(jid) is None and not c3.nodes[0].repl.waiting
    c3.run(500)
    assert c3.jobs_everywhere(jid) == [None, None, None]
    assert c3.outbox(0) == []  # nobody left to answer
