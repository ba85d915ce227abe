"""Users limited to queues (``~pattern``, Redis's key patterns) on a real process, and
the role rows of docs/SECURITY.md checked command by command (issue #26, item 3)."""

from __future__ import annotations

import pytest
import redis
from support import refused

from disquepy.core import acl

CONF = """\
requirepass defaultpw
user ops on >opspw +@admin
user a-worker on >awork +@consumer ~team-a:*
user a-producer on >aprod +@producer ~team-a:*
user producer on >prodpw +@producer
user consumer on >conspw +@consumer
user viewer on >viewpw +@read
user events on >evpw +@producer +@consumer ~events-a
user killer on >killpw +@read +client|kill
"""
PASSWORDS = {"ops": "opspw", "a-worker": "awork", "a-producer": "aprod",
             "producer": "prodpw", "consumer": "conspw", "viewer": "viewpw",
             "events": "evpw", "killer": "killpw"}
FAKE_ID = "D-dcb833cf-8YL1NT17e9+wsA/09NqxscQI-05a1"  # valid shape, known nowhere


@pytest.fixture
def node(server_factory):
    return server_factory(conf=CONF)


def as_user(server, user):
    return server.client(username=user, password=PASSWORDS[user])


def test_a_consumer_of_one_team_cannot_touch_another_teams_jobs(node):
    ops, worker = as_user(node, "ops"), as_user(node, "a-worker")
    theirs = [ops.execute_command("ADDJOB", "team-b:jobs", f"b{i}", 0).decode()
              for i in range(20)]
    mine = ops.execute_command("ADDJOB", "team-a:jobs", "a", 0).decode()
    # JSCAN shows only its own queues' jobs, even asked for the other queue's
    cursor, ids = worker.execute_command("JSCAN", "COUNT", 1000)
    assert [i.decode() for i in ids] == [mine]
    assert "'team-b:jobs' queue" in refused(worker, "JSCAN", "QUEUE", "team-b:jobs")
    # the attack of the issue: ACKJOB (and the rest) every ID of the other team
    for jid in theirs:
        for cmd in (("ACKJOB", jid), ("FASTACK", jid), ("NACK", jid), ("WORKING", jid),
                    ("FAILJOB", jid), ("SHOW", jid), ("JOBSTATUS", jid)):
            assert "'team-b:jobs' queue" in refused(worker, *cmd), cmd
    assert "'team-b:jobs' queue" in refused(worker, "ACKJOB", mine, theirs[0])
    assert "'team-b:jobs' queue" in refused(worker, "GETJOB", "NOHANG", "FROM", "team-a:jobs",
                                            "team-b:jobs")
    assert "'team-b:jobs' queue" in refused(worker, "QLEN", "team-b:jobs")
    # an ID this node does not know: its queue is unknown, so no dummy ack is made
    assert "does not know the job" in refused(worker, "ACKJOB", FAKE_ID)
    assert "does not know the job" in refused(worker, "FASTACK", FAKE_ID)
    assert worker.execute_command("SHOW", FAKE_ID) is None  # reading it shows nothing
    assert ops.execute_command("QLEN", "team-b:jobs") == 20  # nothing lost
    assert [ops.execute_command("SHOW", j) is not None for j in theirs] == [True] * 20
    # its own queue works as before
    got = worker.execute_command("GETJOB", "NOHANG", "FROM", "team-a:jobs")
    assert got[0][1].decode() == mine
    assert worker.execute_command("WORKING", mine) > 0
    assert worker.execute_command("ACKJOB", mine) == 1
    names = [q.decode() for q in ops.execute_command("QSCAN", "COUNT", 1000)[1]]
    assert "team-b:jobs" in names  # QSCAN shows it only the names of its own queues
    assert [q.decode() for q in worker.execute_command("QSCAN", "COUNT", 1000)[1]] == [
        n for n in names if n.startswith("team-a:")]


def test_a_producer_adds_only_to_its_queues_and_cancels_nothing(node):
    ops, prod, aprod = (as_user(node, u) for u in ("ops", "producer", "a-producer"))
    jid = ops.execute_command("ADDJOB", "other", "x", 0, "DELAY", 60).decode()
    # "a producer's password cannot take or delete jobs": CANCEL and DELJOB included
    for c, name in ((prod, "producer"), (aprod, "a-producer")):
        for cmd in (("CANCEL", jid), ("DELJOB", jid), ("GETJOB", "NOHANG", "FROM", "other"),
                    ("ACKJOB", jid), ("QFLUSH", "other")):
            assert f"no permissions to run the '{cmd[0].lower()}' command" in refused(
                c, *cmd), (name, cmd)
    assert ops.execute_command("SHOW", jid) is not None
    assert aprod.execute_command("ADDJOB", "team-a:x", "ok", 0)
    assert "'other' queue" in refused(aprod, "ADDJOB", "other", "no", 0)
    assert "'team-b:x' queue" in refused(aprod, "QADD", "team-b:x", 60, "no")


def test_roles_grant_the_consumer_group_commands_on_their_queues(node):
    ev, prod, cons, view = (as_user(node, u) for u in ("events", "producer", "consumer",
                                                         "viewer"))
    eid = prod.execute_command("QADD", "events-a", 60, "hello")  # @producer: QADD
    got = cons.execute_command("QGET", "events-a", "g1")  # @consumer: QGET, QACK...
    assert got[0] == eid
    assert cons.execute_command("QWORKING", "events-a", "g1", eid) == 1
    assert cons.execute_command("QACK", "events-a", "g1", eid) == 1
    assert cons.execute_command("QDEAD", "events-a", "g1") == []
    assert view.execute_command("QSTATUS", "events-a")  # @read: QSTATUS, QINFO
    assert view.execute_command("QINFO", "events-a")
    assert "'qget' command" in refused(view, "QGET", "events-a", "g1")
    assert "'qadd' command" in refused(cons, "QADD", "events-a", 60, "x")
    # limited to events-a: every group command naming another queue is refused
    assert ev.execute_command("QADD", "events-a", 60, "mine")
    for cmd in (("QADD", "events-b", 60, "x"), ("QGET", "events-b", "g"),
                ("QACK", "events-b", "g", eid), ("QWORKING", "events-b", "g", eid),
                ("QDEAD", "events-b", "g"), ("QNOTIFY", "g", "0.01", "events-a", "events-b"),
                ("QSTATUS", "events-b"), ("QINFO", "events-a", "events-b")):
        assert "'events-b' queue" in refused(ev, *cmd), cmd
    assert ev.execute_command("QNOTIFY", "g9", "0.01", "events-a") == b"events-a"


def test_client_kill_can_be_granted_alone(node):
    killer, viewer, ops = (as_user(node, u) for u in ("killer", "viewer", "ops"))
    victim = as_user(node, "consumer")
    victim.execute_command("CLIENT", "SETNAME", "victim")
    vid = victim.execute_command("CLIENT", "ID")
    assert "'client|kill' command" in refused(viewer, "CLIENT", "KILL", "ID", vid)
    assert "'client|list' command" in refused(killer, "CLIENT", "LIST")
    assert killer.execute_command("CLIENT", "KILL", "ID", vid) == 1
    assert b"name=victim" not in ops.execute_command("CLIENT", "LIST")
    assert killer.execute_command("CLIENT", "KILL", "USER", "nobody") == 0
    with pytest.raises(redis.exceptions.ResponseError, match="No such client"):
        killer.execute_command("CLIENT", "KILL", "10.9.9.9:1")


# a call of each command a role may run, arity-correct, that neither blocks nor
# changes what the next rows need
SAMPLE = {
    "show": ("SHOW", FAKE_ID), "qlen": ("QLEN", "q"), "qstat": ("QSTAT", "q"),
    "qpeek": ("QPEEK", "q", 1), "qscan": ("QSCAN",), "jscan": ("JSCAN",),
    "jobstatus": ("JOBSTATUS", FAKE_ID), "info": ("INFO", "server"), "hello": ("HELLO",),
    "ping": ("PING",), "echo": ("ECHO", "x"), "time": ("TIME",), "command": ("COMMAND",
                                                                             "COUNT"),
    "select": ("SELECT", 0), "qstatus": ("QSTATUS", "q"), "qinfo": ("QINFO", "q"),
    "client|setname": ("CLIENT", "SETNAME", "x"), "client|getname": ("CLIENT", "GETNAME"),
    "client|setinfo": ("CLIENT", "SETINFO", "lib-name", "x"), "client|id": ("CLIENT", "ID"),
    "client|reply": ("CLIENT", "REPLY", "ON"),
    "acl|whoami": ("ACL", "WHOAMI"), "acl|cat": ("ACL", "CAT"),
    "addjob": ("ADDJOB", "q", "x", 0), "qadd": ("QADD", "q", 60, "x"),
    "getjob": ("GETJOB", "NOHANG", "FROM", "q"), "ackjob": ("ACKJOB", FAKE_ID),
    "fastack": ("FASTACK", FAKE_ID), "acktoken": ("ACKTOKEN", "t"), "nack": ("NACK", FAKE_ID),
    "working": ("WORKING", FAKE_ID), "failjob": ("FAILJOB", FAKE_ID),
    "qget": ("QGET", "q", "g"), "qack": ("QACK", "q", "g", "x"),
    "qworking": ("QWORKING", "q", "g", "x"), "qnotify": ("QNOTIFY", "g", "0.01", "q"),
    "qdead": ("QDEAD", "q", "g"),
    "cancel": ("CANCEL", FAKE_ID), "deljob": ("DELJOB", FAKE_ID),
    "enqueue": ("ENQUEUE", FAKE_ID), "dequeue": ("DEQUEUE", FAKE_ID),
    "pause": ("PAUSE", "q", "state"), "qflush": ("QFLUSH", "nothing-here"),
    "client|list": ("CLIENT", "LIST"), "acl|list": ("ACL", "LIST"),
    "acl|users": ("ACL", "USERS"), "config": ("CONFIG", "GET", "port"),
    "cluster": ("CLUSTER", "MYID"), "slowlog": ("SLOWLOG", "LEN"),
    "latency": ("LATENCY", "LATEST"), "joboutcomes": ("JOBOUTCOMES",),
    "jobmetrics": ("JOBMETRICS",),
}


@pytest.mark.parametrize("user,role", [("producer", "producer"), ("consumer", "consumer"),
                                       ("viewer", "read")])
def test_each_row_of_the_role_table_holds_on_a_live_node(node, user, role):
    """Every command the table (acl.role_table, generated into SECURITY.md) gives the
    role runs (no NOPERM); every other command of SAMPLE is refused."""
    c = as_user(node, user)
    c.response_callbacks.clear()  # the raw replies (COMMAND COUNT is no COMMAND list)
    granted = acl.CATEGORIES[role]
    assert granted - {"quit", "auth"} <= SAMPLE.keys()  # every row is tried
    for name, cmd in SAMPLE.items():
        try:
            c.execute_command(*cmd)
            ok = True
        except redis.exceptions.NoPermissionError:
            ok = False
        except redis.exceptions.ResponseError:
            ok = True  # refused for another reason: the role let it run
        assert ok == (name in granted), (user, name)
