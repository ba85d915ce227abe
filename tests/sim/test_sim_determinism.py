"""A run is a pure function of its config: same seed, same trace hash."""

from __future__ import annotations

import os
import subprocess
import sys

from disquepy.sim import SimConfig, parse_faults, run
from disquepy.sim.sweep import run_many

SHORT = dict(nodes=3, faults=parse_faults("all"), duration_s=10, steps=800)


def test_same_seed_twice_gives_the_same_trace():
    a = run(SimConfig(seed=11, **SHORT))
    b = run(SimConfig(seed=11, **SHORT))
    assert a.trace_hash == b.trace_hash
    assert a.stats == b.stats and a.faults == b.faults and a.events == b.events
    assert a.stats["deliveries"] > 50 and a.faults["crash"] + a.faults["partition"] > 0


def test_different_seeds_give_different_traces():
    assert run(SimConfig(seed=1, **SHORT)).trace_hash != run(SimConfig(seed=2, **SHORT)).trace_hash


def test_replay_line_reproduces_a_sweep_run_exactly():
    cfg = SimConfig(seed=5, **SHORT)
    swept = run_many([cfg, cfg], jobs=2)
    assert swept[0].trace_hash == swept[1].trace_hash
    cmd = cfg.replay_command().split()
    assert cmd[:3] == ["python", "-m", "disquepy.sim"]
    out = subprocess.run(
        [sys.executable, *cmd[1:]],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=os.path.dirname(__file__),
    )
    assert f"hash {swept[0].trace_hash[:12]}" in out.stdout, out.stdout + out.stderr


def _hash_under(hashseed: str) -> str:
    code = (
        "from disquepy.sim import SimConfig, parse_faults, run;"
        "print(run(SimConfig(seed=7, nodes=5, faults=parse_faults('all'), duration_s=8,"
        " steps=1000)).trace_hash)"
    )
    env = dict(os.environ, PYTHONHASHSEED=hashseed)
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=True,
    )
    return out.stdout.strip()


def test_core_does_not_depend_on_the_hash_seed():
    assert _hash_under("1") == _hash_under("2")
