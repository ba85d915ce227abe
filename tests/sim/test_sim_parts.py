"""The simulator's parts: clocks, disk, network, replies, config and command line."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from disquepy.core import aofrecords as aof
from disquepy.sim.clock import T0, NodeClock
from disquepy.sim.config import SimConfig, faults_spec, parse_faults
from disquepy.sim.disk import Disk
from disquepy.sim.network import BLACKHOLE, DROP, Network, Partition
from disquepy.sim.replies import ErrorReply, decode

JID = b"D-dcb833cf-8YL1NT17e9+wsA/09NqxscQI-05a1"


@given(st.integers(-5000, 5000), st.integers(-999, 999), st.integers(0, 10**8))
def test_clock_is_monotonic_and_global_time_inverts_it(offset, ppm, x):
    c = NodeClock(T0, offset, ppm)
    t = T0 + x
    assert c.node_time(t + 1) >= c.node_time(t)
    w = c.node_time(t)
    g = c.global_time(w)
    assert c.node_time(g) >= w and (g == T0 or c.node_time(g - 1) < w)


def _loadjob(n: int) -> bytes:
    jid = JID[:-4] + b"%04x" % (n * 2 + 1)
    return aof.encode_loadjob([jid, b"q", b"body", 1, 60, 0, 1, 1, 0, 0, [], 1, 0, 0])


def test_disk_always_syncs_every_record():
    d = Disk("always", T0)
    d.append([_loadjob(1)], T0)
    d.crash(power=True, now=T0, rng=random.Random(1))
    assert len(d.load()) == 1 and d.records_lost == 0


def test_disk_everysec_loses_the_last_second_on_power_loss_only():
    for power, kept in ((True, 1), (False, 3)):
        d = Disk("everysec", T0)
        d.append([_loadjob(1)], T0)
        d.append([_loadjob(2)], T0 + 1000)  # the second's sync takes record 1 first
        d.append([_loadjob(3)], T0 + 1500)
        d.crash(power=power, now=T0 + 1800, rng=random.Random(3))
        assert len(d.load()) == kept


def test_disk_torn_tail_is_truncated_on_load():
    torn = 0
    for seed in range(20):
        d = Disk("no", T0)
        d.append([_loadjob(1), _loadjob(2)], T0)
        d.crash(power=True, now=T0 + 10, rng=random.Random(seed))
        size = len(d.durable)
        assert d.load() == [] and len(d.durable) == 0
        torn += size > 0
    assert torn  # some crashes left a partial record behind


def test_disk_live_ids_follow_deljob():
    d = Disk("always", T0)
    rec = _loadjob(1)
    jid = aof.scan(rec).records[0][2][0]
    d.append([rec], T0)
    assert d.live_ids() == {jid}
    d.append([aof.encode_deljob(jid)], T0)
    assert d.live_ids() == set()


def test_network_links_are_fifo_without_the_delay_fault():
    net = Network(random.Random(1))
    net.mean_ms = 50
    for k in range(200):
        net.transmit(T0, 0, 1, 0, b"%d" % k)
    frames = [net.pop()[5] for _ in range(200)]
    assert frames == [b"%d" % k for k in range(200)]
    net.fifo = False
    for k in range(200):
        net.transmit(T0, 0, 1, 0, b"%d" % k)
    assert [net.pop()[5] for _ in range(200)] != frames  # reordered


def test_network_loss_dup_and_backlog():
    net = Network(random.Random(2))
    net.loss, net.dup = 0.5, 0.5
    for _ in range(1000):
        net.transmit(T0, 0, 1, 0, b"x")
    st_ = net.stats
    assert 400 < st_.lost < 600 and 150 < st_.duplicated < 350
    assert len(net.heap) == 1000 - st_.lost + st_.duplicated
    for k in range(6000):
        net.hold(0, 1, b"%d" % k)
    q = net.take_backlog(0, 1)
    assert len(q) == 5000 and q[0] == b"1000" and net.stats.held_overflow == 1000


def test_partition_shapes():
    p = Partition([0, 1, -1], DROP, "bridge")
    assert p.cut(0, 1) and not p.cut(0, 2) and not p.cut(1, 2)
    net = Network(random.Random(3))
    net.partition = Partition([0, 1], BLACKHOLE, "isolate")
    assert net.cut(0, 1) and net.link_possible(0, 1) and not net.drops_when_cut(0, 1)


def test_reply_decoder():
    assert decode(b"+OK\r\n") == b"OK"
    assert isinstance(decode(b"-NOREPL x\r\n"), ErrorReply)
    assert decode(b"*2\r\n$1\r\na\r\n:3\r\n") == [b"a", 3]
    assert decode(b"*-1\r\n") is None and decode(b"_\r\n") is None


def test_faults_spec_round_trips():
    assert faults_spec(parse_faults("all")) == "all"
    assert faults_spec(parse_faults("none")) == "none"
    assert faults_spec(parse_faults("crash,loss")) == "loss,crash"
    with pytest.raises(ValueError):
        parse_faults("meteor")
    assert "--faults all" in SimConfig(seed=3).replay_command()


def test_cli_single_seed_and_bad_options():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "disquepy.sim",
            "--seed",
            "4",
            "--nodes",
            "2",
            "--faults",
            "none",
            "--duration",
            "5",
            "--steps",
            "200",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "seed 4: ok" in out.stdout and "replay: python -m disquepy.sim --seed 4" in out.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "disquepy.sim", "--faults", "meteor"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "unknown fault kind" in bad.stderr


def test_a_reply_of_the_wrong_shape_is_a_protocol_failure_not_a_crash():
    """A GETJOB answered by a status line (a core bug the checkers must report): the
    run records a protocol failure and goes on, as for an undecodable reply."""
    from disquepy.sim.workload import Pending
    from disquepy.sim.world import World

    w = World(SimConfig(seed=1, nodes=1, faults=frozenset()))
    a = w.workload.agents[0]
    a.pending = Pending("get", 0, w.now)
    w.workload.reply(a, 0, b"+OK\r\n")
    assert w.checker.counts == {"protocol": 1}
    assert "odd get reply" in w.checker.failures[0].message
    assert a.pending is None and a.next_at < float("inf")  # the agent goes on
