"""Consumer groups in the real-process fault suite (``--groups``): the checker on
hand-made histories (each violation it must catch), a short seeded run of real
processes under kill -9, pauses and bus partitions, and the checker catching events
flushed behind its back."""

from __future__ import annotations

import json

import pytest
from test_chaos_run import _run_cli

from disquepy.chaos.checker import ADD_OK
from disquepy.chaos.groups import GroupHistory, Lease, check_groups, group_names
from disquepy.chaos.run import ChaosConfig, ChaosRun

G = group_names(2)  # cg0, cg1
R = 3


def added(h: GroupHistory, contents: bytes, eid: bytes, t: float = 0.0) -> None:
    rec = h.add_sent(contents, b"gq0", 0, t)
    rec.outcome, rec.eid = ADD_OK, eid


def got(h: GroupHistory, contents: bytes, eid: bytes, group: bytes, t: float, ex: float = 2.0,
        ack_after: float | None = 0.1, consumer: str = "c") -> Lease:
    ls = Lease(eid, contents, group, consumer, 0, t, t + 0.01, ex)
    if ack_after is not None:
        ls.t_ack, ls.ack = t + ack_after, 1
    h.leases.append(ls)
    return ls


def clean() -> GroupHistory:
    h = GroupHistory()
    added(h, b"a", b"EA")
    added(h, b"b", b"EB")
    for g in G:
        got(h, b"a", b"EA", g, 1.0)
        got(h, b"b", b"EB", g, 2.0)
    return h


def test_clean_history_passes():
    rep = check_groups(clean(), G, R, [], float("-inf"))
    assert rep.ok, rep.violations
    assert rep.counts["events_added"] == 2 and rep.counts["deliveries"] == 4


def test_event_no_group_got_is_lost_unless_r_nodes_were_killed_after_its_qadd():
    h = clean()
    added(h, b"c", b"EC", t=5.0)
    rep = check_groups(h, G, R, [(6.0, 0), (7.0, 1)], float("-inf"))
    assert rep.violations == {"lost": 1} and rep.examples["lost"][0][1] == b"EC"
    # R distinct nodes killed after the QADD was sent: every copy may be gone
    rep = check_groups(h, G, R, [(6.0, 0), (7.0, 1), (8.0, 1), (9.0, 4)], float("-inf"))
    assert rep.ok and rep.counts["lost_excused"] == 1
    assert rep.counts["events_after_r_kills"] == 3  # a and b too (sent at 0)
    # kills before the QADD excuse nothing
    rep = check_groups(h, G, R, [(1.0, 0), (2.0, 1), (3.0, 2)], float("-inf"))
    assert rep.violations == {"lost": 1}
    # nodes with their events on disk (the chaos cluster's AOF): no kill excuses a loss
    rep = check_groups(h, G, R, [(6.0, 0), (7.0, 1), (8.0, 1), (9.0, 4)], float("-inf"),
                       durable=True)
    assert rep.violations == {"lost": 1} and rep.counts["events_after_r_kills"] == 0


def test_a_group_missing_an_event_another_group_got_fails():
    h = clean()
    added(h, b"c", b"EC")
    got(h, b"c", b"EC", G[0], 3.0)
    rep = check_groups(h, G, R, [], float("-inf"))
    assert rep.violations == {"group_missed": 1}
    assert rep.examples["group_missed"][0][2] == [G[1]]


def test_unknown_contents_or_another_id_are_unexpected():
    h = clean()
    got(h, b"zz", b"EZ", G[0], 3.0)
    got(h, b"a", b"EX", G[1], 3.0)
    rep = check_groups(h, G, R, [], float("-inf"))
    assert rep.violations == {"unexpected": 2}


def test_overlapping_leases_fail_when_healthy_and_are_counted_under_faults():
    h = clean()
    # consumer x holds EA in cg0 from 10.01 until 12 (EX 2, no ack); y gets it at 11.01
    got(h, b"a", b"EA", G[0], 10.0, ex=2.0, ack_after=None, consumer="x")
    got(h, b"a", b"EA", G[0], 11.0, consumer="y")
    rep = check_groups(h, G, R, [], float("-inf"))
    assert rep.violations == {"double_lease_healthy": 1}
    rep = check_groups(h, G, R, [], 100.0)  # the network healed at 100: under faults
    assert rep.ok and rep.counts["double_leases_faults"] == 1


def test_a_redelivery_after_the_lease_ended_or_was_acked_is_no_double_lease():
    h = clean()
    got(h, b"a", b"EA", G[0], 10.0, ex=1.0, ack_after=None, consumer="x")  # ends 11.0
    got(h, b"a", b"EA", G[0], 11.1, ack_after=0.2, consumer="y")  # acked at 11.3
    got(h, b"a", b"EA", G[0], 11.5, consumer="x")
    rep = check_groups(h, G, R, [], float("-inf"))
    assert rep.ok, rep.violations
    assert rep.counts["redeliveries"] == 3 and rep.counts["after_ack"] == 3
    # one group's leases never collide with another's
    got(h, b"a", b"EA", G[1], 10.0, ex=5.0, ack_after=None)
    assert check_groups(h, G, R, [], float("-inf")).ok


@pytest.fixture(scope="module")
def group_run(tmp_path_factory):
    run = ChaosRun(ChaosConfig(seed=11, duration=20.0, groups=2,
                               faults=("kill", "pause", "partition", "cut"),
                               workdir=str(tmp_path_factory.mktemp("chaosgroups"))))
    return run, run.run()


@pytest.mark.timeout(400)
def test_groups_keep_their_promises_under_kill_pause_and_partitions(group_run):
    run, r = group_run
    g = r.group_counts
    assert r.faults["kill"] > 0 and r.faults["partition"] > 0, r.faults
    assert g["events_added"] > 150 and g["deliveries"] > 2 * g["events_added"] * 0.9, r.text()
    for k in ("lost", "group_missed", "unexpected", "double_lease_healthy"):
        assert g[k] == 0, r.text()
    assert not r.problems and r.ok, r.text()
    assert "--groups 2" in r.config.replay_command()
    assert all(not n.alive() for n in run.cluster.nodes)


@pytest.mark.timeout(300)
def test_checker_reports_events_flushed_behind_its_back(tmp_path):
    """Sabotage: events that got an ID are QFLUSHed before any consumer reads their
    queue: the run must report exactly those as lost and exit 1."""
    out = tmp_path / "summary.json"
    p = _run_cli("--seed", "5", "--duration", "4", "--faults", "none", "--groups", "2",
                 "--sabotage-lose-events", "3", "--json", str(out),
                 "--workdir", str(tmp_path / "nodes"))
    assert p.returncode == 1, p.stdout + p.stderr
    run = json.loads(out.read_text())["runs"][0]
    assert run["violations"] == {"groups_lost": 3}, run["violations"]
    assert run["group_counts"]["lost"] == 3
    assert "sabotage-event" in run["group_examples"]["lost"][0]
    assert "VIOLATION groups_lost: 3" in p.stdout


def test_sabotage_events_needs_groups():
    p = _run_cli("--sabotage-lose-events", "2", timeout=30)
    assert p.returncode == 2 and "needs --groups" in p.stderr
