"""The consumer-group workload (sim/groups.py) on the simulator: a fixed seed set under
every fault, fault-free runs, replay, and broken cores the group checker must catch."""

from __future__ import annotations

import sabotage
from simci import ALL

from disquepy.sim import SimConfig
from disquepy.sim.config import parse_faults
from disquepy.sim.sweep import Summary, run_many

# every fault, 3 and 5 nodes, three groups beside the job workload
GROUP_CI = [(seed, nodes) for nodes in (3, 5) for seed in range(1, 7)]


def test_group_seed_set_holds_under_every_fault():
    results = run_many([SimConfig(seed=s, nodes=n, faults=ALL, groups=3)
                        for s, n in GROUP_CI], jobs=2)
    bad = [r.report() for r in results if not r.ok]
    assert not bad, "\n".join(bad)
    s = Summary(results, 0)
    assert s.total("events_added") > 500 and s.total("event_deliveries") > 2000
    assert s.total("events_lost") == 0
    assert s.total("event_copies_lost") > 0  # crashes took events with them
    # keyed QADDs retried after an error or no reply: the same event, never a second
    assert s.total("idempotent_retries") > 0 and s.total("ids_ordered") > 500
    assert s.total("multi_acks") > 100  # QACKs of several IDs (sim/groups.py)
    for r in results:
        assert r.stats["phase"] == "done", r.summary_line()


def test_group_runs_without_faults_never_double_lease():
    results = run_many([SimConfig(seed=s, nodes=n, faults=parse_faults("none"), groups=3)
                        for s, n in ((1, 3), (2, 5))], jobs=2)
    for r in results:
        assert r.ok, r.report()
        assert r.stats["double_leases"] == r.stats["after_ack"] == 0, r.summary_line()
        assert r.stats["events_excused"] == 0


def test_group_run_replays_exactly():
    cfg = SimConfig(seed=4, nodes=3, faults=ALL, groups=2)
    a, b = run_many([cfg, cfg], jobs=2)
    assert a.trace_hash == b.trace_hash and a.stats == b.stats


def _caught(broken: str, check: str, faults: frozenset, seeds) -> list:
    configs = [SimConfig(seed=s, nodes=3, faults=faults, groups=3, quiesce_max_s=60)
               for s in seeds]
    with sabotage.interpreted():
        results = run_many(configs, jobs=2, initializer=sabotage.apply, initargs=(broken,),
                           stop_when=lambda r: check in r.fail_counts)
    return [r for r in results if check in r.fail_counts]


def test_checker_reports_two_consumers_of_a_group_holding_one_event():
    assert _caught("groups_every_holder_leases", "group-double-lease",
                   parse_faults("none"), range(1, 4))


def test_checker_reports_events_a_group_never_gets():
    assert _caught("groups_leases_never_end", "group-lost", parse_faults("none"), range(1, 4))


def test_checker_reports_event_ids_that_go_down():
    """Event IDs by each node's wall clock alone (no raise by the IDs seen): skewed
    clocks make an event added after another get a smaller ID."""
    assert _caught("groups_ids_by_wall_clock", "group-order", parse_faults("skew"),
                   range(1, 7))


def test_checker_reports_a_qack_that_counts_an_id_twice():
    assert _caught("groups_qack_counts_duplicates", "group-ack-count",
                   parse_faults("none"), range(1, 4))


def test_group_ids_rise_in_every_run():
    results = run_many([SimConfig(seed=s, nodes=3, faults=parse_faults("skew"), groups=3)
                        for s in (1, 2)], jobs=2)
    for r in results:
        assert r.ok, r.report()
        assert r.stats["ids_ordered"] > 100, r.summary_line()
