"""Bus messages are checked once, at the boundary (messages.parse): what breaks the
format is refused, counted and logged; a handler that raises is a bug that propagates."""

from __future__ import annotations

import pytest
from clusterharness import Cluster

from disquepy.core import messages as M

SID = "a" * 40
JID = b"D-" + b"0" * 8 + b"-" + b"A" * 24 + b"-" + b"0001"


def wire_job(**over):
    f = dict(jid=JID, queue=b"q", body=b"x", ctime=1, ttl=60, delay=0, retry=10, repl=2,
             nacks=0, adeliv=0, delivered=[SID])
    f.update(over)
    return list(f.values())


def test_parse_decodes_a_good_message():
    mtype, sid, port, flags, fields = M.parse([M.REPLJOB, SID, 7711, 0, wire_job()])
    assert (mtype, sid, port, flags) == (M.REPLJOB, SID, 7711, 0)
    assert fields[0][0] == JID and fields[0][10] == (SID,)


@pytest.mark.parametrize(("msg", "why"), [
    ([99, SID, 7711, 0], "unknown message type"),
    ([M.PING, "nothex", 7711, 0, [], ""], "bad node ID"),
    ([M.PING, SID, 70000, 0, [], ""], "bad sender port"),
    ([M.REPLJOB, SID, 7711, 0, wire_job(nacks=2**64 - 1)], "bad job"),  # #18's timer crash
    ([M.REPLJOB, SID, 7711, 0, wire_job(ttl=0)], "bad job"),
    ([M.REPLJOB, SID, 7711, 0], "bad item count"),
    ([M.PING, SID, 7711, 0, [[SID, "127.0.0.1", 1, 0]] * (M.MAX_GOSSIP + 1), ""], "gossip"),
    ([M.GOTACK, SID, 7711, 0, JID, 1], "bad GOTACK"),
    ([M.QUEUED, SID, 7711, 0, JID, 7], "QUEUED increment"),
    ([M.PAUSE, SID, 7711, 0, b"q", 4], "PAUSE flags"),
    ([M.DELJOB, SID, 7711, 0, JID, ["x"]], "bad node ID"),
    ("garbage", "not a message"),
])
def test_parse_refuses(msg, why):
    with pytest.raises(M.Malformed, match=why):
        M.parse(msg)


def test_malformed_messages_are_counted_and_logged_once_a_second():
    c = Cluster(2)
    c.meet_all()
    node = c.nodes[0]
    peer = c.nodes[1].myid
    before = node.stats.bus_malformed
    node.take_outputs()
    for _ in range(5):
        node.handle_message([M.QUEUED, peer, 7712, 0, JID, 99], "127.0.0.1", c.now)
    logs = node.take_outputs().logs
    assert node.stats.bus_malformed == before + 5
    assert len(logs) == 1 and logs[0][0] == "warning" and "QUEUED increment" in logs[0][1]
    node.handle_message([M.BATCH, peer, 7712, 0, [[M.BATCH, peer, 7712, 0, []]]],
                        "127.0.0.1", c.now + 1500)
    logs = node.take_outputs().logs
    assert node.stats.bus_malformed == before + 6
    assert "nested BATCH" in logs[0][1] and "(4 more since the last report)" in logs[0][1]
    assert b"bus_malformed_messages:%d" % (before + 6) in c.cmd(0, "INFO", "stats")


def test_a_handler_that_raises_is_not_taken_for_bad_input(monkeypatch):
    c = Cluster(2)
    c.meet_all()

    def broken(p, fields, now):
        raise KeyError("a bug")

    node = c.nodes[0]
    monkeypatch.setitem(node._handlers, M.WORKING, broken)
    with pytest.raises(KeyError):
        node.handle_message([M.WORKING, c.nodes[1].myid, 7712, 0, JID], "127.0.0.1", c.now)
    assert node.stats.bus_malformed == 0
