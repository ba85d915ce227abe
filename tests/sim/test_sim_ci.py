"""The CI seed set: 40 full runs with every fault (simci.py), well under a minute on two
cores.

Every failure must come from a core bug listed in known_bugs.OPEN (none today); a new
one fails here with its replay line. An open bug gets a strict xfail test here,
``test_known_bug_<name>_is_fixed``, asserting no CI failure matches it: it starts
passing once the bug is fixed (then delete it and its known_bugs entry).
"""

from __future__ import annotations

import pytest
from known_bugs import OPEN, explain
from simci import ci_configs

from disquepy.sim.config import FAULT_KINDS
from disquepy.sim.sweep import Summary, run_many


@pytest.fixture(scope="module")
def ci():
    return run_many(ci_configs(), jobs=2)


def test_ci_seed_set_fails_only_through_known_core_bugs(ci):
    new = []
    for r in ci:
        for f in r.failures:
            if explain(f) is None:
                new.append(f"{f!r}\n    replay: {r.config.replay_command()}")
        if sum(r.fail_counts.values()) > len(r.failures):  # some were not kept: unchecked
            new.append(
                f"seed {r.config.seed}: more failures than kept "
                f"{r.fail_counts}\n    replay: {r.config.replay_command()}"
            )
    assert not new, "failures not explained by a known core bug:\n" + "\n".join(new[:20])


def test_ci_seed_set_loses_no_job_and_exercises_every_fault(ci):
    s = Summary(ci, 0)
    assert s.total("lost") == 0
    assert s.total("jobs_added") > 5000 and s.total("jobs_delivered") > 5000
    faults = s.faults()
    for kind in FAULT_KINDS:
        assert faults[kind] > 0, kind
    assert faults["crash_power"] > 0 and s.total("aof_torn_tails") > 0
    assert s.total("restarts") == faults["crash"]
    assert s.total("excused_lost") < s.total("jobs_added") // 100  # excuses stay rare
    for r in ci:
        assert r.stats["phase"] == "done", r.summary_line()


def test_every_open_bug_has_an_xfail_test():
    names = {
        name.removeprefix("test_known_bug_").removesuffix("_is_fixed").replace("_", "-")
        for name in globals()
        if name.startswith("test_known_bug_")
    }
    assert {b.name for b in OPEN} <= names
