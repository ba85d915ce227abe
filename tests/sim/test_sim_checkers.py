"""The checkers catch a broken core: each sabotage (tests/sim/sabotage.py, applied in
the simulator's worker processes only) must be reported, by the check named here,
on the CI seeds (five-node runs, in order, stopping at the first detection)."""

from __future__ import annotations

import pytest
import sabotage
from simci import ALL

from disquepy.sim import SimConfig
from disquepy.sim.sweep import run_many

FIVE_NODE_CI_SEEDS = range(1, 16)

CASES = [
    ("gotjob_without_copy", "lost"),  # the brief's example: replicas ack without a copy
    ("gotjob_without_copy", "replication"),
    ("handler_raises", "exception"),  # a bug in a bus handler is not taken for bad input
    ("reload_requeues_at_most_once", "at-most-once"),
    ("delivery_cancels_retry", "stuck"),
    ("requeue_refused", "timer-loop"),
    ("gc_keeps_acked_jobs", "not-collected"),
    ("fetch_resets_counters", "counters"),
    ("unregister_leaks_memory", "memory"),
]


@pytest.mark.parametrize(("broken", "check"), CASES, ids=[f"{b}-{c}" for b, c in CASES])
def test_checker_reports_broken_core(broken, check):
    configs = [SimConfig(seed=s, nodes=5, faults=ALL) for s in FIVE_NODE_CI_SEEDS]
    with sabotage.interpreted():
        results = run_many(
            configs,
            jobs=2,
            initializer=sabotage.apply,
            initargs=(broken,),
            stop_when=lambda r: check in r.fail_counts,
        )
    found = [r for r in results if check in r.fail_counts]
    assert found, f"{broken}: no '{check}' failure in {[r.summary_line() for r in results]}"
    example = next(f for f in found[0].failures if f.kind == check)
    assert example.message  # says what went wrong, with a replay line in the report
    assert "replay: python -m disquepy.sim --seed" in found[0].report()


def test_sound_core_is_not_reported_on_the_same_seed():
    """The detections above come from the sabotage: the same seed is clean otherwise
    (up to the open core bugs of known_bugs)."""
    from known_bugs import explain

    r = run_many([SimConfig(seed=2, nodes=5, faults=ALL)], jobs=1)[0]
    assert all(explain(f) is not None for f in r.failures), r.report()
