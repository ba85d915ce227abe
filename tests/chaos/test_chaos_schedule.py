"""The nemesis schedule: a pure function of the seed, every kind early, bounded."""

from __future__ import annotations

import pytest

from disquepy.chaos.nemesis import KINDS, parse_kinds, schedule


def test_same_seed_same_schedule_other_seed_other():
    a = schedule(7, 5, 25.0, KINDS, 2)
    assert a == schedule(7, 5, 25.0, KINDS, 2)
    assert a != schedule(8, 5, 25.0, KINDS, 2)


@pytest.mark.parametrize("seed", range(1, 30))
def test_every_kind_in_the_first_half_and_limits_kept(seed):
    faults = schedule(seed, 5, 25.0, KINDS, 2)
    for kind in KINDS:
        first = [f.at for f in faults if f.kind == kind]
        assert first and min(first) <= 20.0, kind
    assert all(0 <= f.at <= f.end <= 25.0 for f in faults)
    # never more than two nodes killed or paused at once, never one node twice
    outs = [f for f in faults if f.kind in ("kill", "pause")]
    for f in outs:
        overlapping = [g for g in outs if g.at <= f.at < g.end]
        assert len(overlapping) <= 2
        assert len({g.params[0] for g in overlapping}) == len(overlapping)
    # partitions never overlap, and a partition never blocks a node from itself
    parts = [f for f in faults if f.kind == "partition"]
    for p, q in zip(parts, parts[1:], strict=False):
        assert p.end <= q.at
    for p in parts:
        pairs = p.params[-1]
        assert pairs and all(s != d for s, d in pairs)
        assert all((d, s) in pairs for s, d in pairs)  # both directions


def test_bridge_talks_to_both_sides():
    for seed in range(200):
        for f in schedule(seed, 5, 25.0, ("partition",), 2):
            shape, _mode, a, b, bridge, pairs = f.params
            if shape == "bridge":
                assert bridge not in a and bridge not in b
                assert not any(bridge in pair for pair in pairs)
                assert a and b
                return
    raise AssertionError("no bridge partition in 200 seeds")


def test_parse_kinds():
    assert parse_kinds("all") == KINDS
    assert parse_kinds("none") == ()
    assert parse_kinds("loss,kill") == ("kill", "loss")
    with pytest.raises(ValueError, match="unknown fault kind"):
        parse_kinds("meteor")
