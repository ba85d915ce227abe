"""Shrinking a failing seed: with a deliberately broken core (sabotage.py, applied in
the worker processes only), the shrunk run still fails the same way, is smaller, and
replays exactly from its printed line; the sound core passes it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import sabotage
from simci import ALL

from disquepy.sim import SimConfig
from disquepy.sim.config import parse_skip
from disquepy.sim.shrink import shrink
from disquepy.sim.sweep import run_many

ROOT = Path(__file__).resolve().parents[2]
BROKEN = ("gotjob_without_copy",)  # replicas confirm copies they do not keep


def run_broken(cfg: SimConfig):
    with sabotage.interpreted():
        return run_many([cfg], 1, initializer=sabotage.apply, initargs=BROKEN)[0]


@pytest.fixture(scope="module")
def shrunk():
    # (a seed whose broken run loses jobs: the core decides which do, seed 7 lost some
    # until federation kept its broadcast back-off per queue, issue #29)
    original = run_broken(SimConfig(seed=8, nodes=5, faults=ALL))
    assert "lost" in original.fail_counts, original.report()
    with sabotage.interpreted():
        return shrink(original, target="lost", jobs=2, initializer=sabotage.apply,
                      initargs=BROKEN, max_runs=80)


@pytest.mark.timeout(600)
def test_shrunk_run_still_loses_jobs_and_is_smaller(shrunk):
    o, s = shrunk.original.config, shrunk.smallest.config
    assert shrunk.shrunk and shrunk.log
    assert "lost" in shrunk.smallest.fail_counts
    assert s.seed == o.seed and s.faults <= o.faults
    assert s.nodes <= o.nodes and s.steps <= o.steps and s.duration_s <= o.duration_s
    assert (s.nodes, s.steps, s.duration_s, len(s.faults)) < (
        o.nodes, o.steps, o.duration_s, len(o.faults)) or s.skip_faults
    # fewer workload operations actually ran
    assert shrunk.smallest.stats["adds_sent"] < shrunk.original.stats["adds_sent"]
    assert shrunk.runs <= 80
    text = shrunk.text()
    assert f"smallest reproducer: {s.replay_command()}" in text


@pytest.mark.timeout(600)
def test_shrunk_run_replays_exactly_and_the_sound_core_passes_it(shrunk):
    s = shrunk.smallest
    again = run_broken(s.config)
    assert again.trace_hash == s.trace_hash and "lost" in again.fail_counts
    sound = run_many([s.config], 1)[0]
    assert "lost" not in sound.fail_counts, sound.report()


@pytest.mark.timeout(120)
def test_replay_line_round_trips_through_the_command_line():
    cfg = SimConfig(seed=4, nodes=3, faults=ALL, duration_s=8, steps=300, agents_per_node=2,
                    queues=1, max_replicate=2, skip_faults=frozenset({1, 3}))
    line = cfg.replay_command()
    assert "--skip-faults 1,3" in line and "--agents-per-node 2" in line
    assert "--queues 1" in line
    want = run_many([cfg], 1)[0]
    argv = line.split()[3:]  # after "python -m disquepy.sim"
    p = subprocess.run([sys.executable, "-m", "disquepy.sim", *argv], capture_output=True,
                       text=True, timeout=100,
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    assert f"hash {want.trace_hash[:12]}" in p.stdout, p.stdout + p.stderr


def test_skipping_an_episode_changes_the_run_but_not_the_others_draws():
    base = SimConfig(seed=2, nodes=5, faults=ALL, duration_s=15, steps=1000)
    full, skipped = run_many([base, SimConfig(**{**_fields(base), "skip_faults":
                                                 frozenset({1})})], 2)
    assert full.stats["fault_episodes"] >= 2
    assert full.trace_hash != skipped.trace_hash
    assert parse_skip("5, 2") == frozenset({2, 5}) and parse_skip("") == frozenset()
    with pytest.raises(ValueError):
        parse_skip("0")


def _fields(cfg: SimConfig) -> dict:
    return {f: getattr(cfg, f) for f in cfg.__dataclass_fields__}


def test_shrink_refuses_a_passing_run_and_cli_says_so():
    ok = run_many([SimConfig(seed=3, nodes=3, duration_s=5, steps=200)], 1)[0]
    assert ok.ok
    with pytest.raises(ValueError, match="nothing to shrink"):
        shrink(ok)
    p = subprocess.run([sys.executable, "-m", "disquepy.sim", "--seed", "3", "--nodes", "3",
                        "--duration", "5", "--steps", "200", "--shrink"], capture_output=True,
                       text=True, timeout=100, env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    assert p.returncode == 0 and "nothing to shrink" in p.stdout
