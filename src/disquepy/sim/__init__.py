"""A deterministic cluster simulator for the pure core (see docs/RELIABILITY.md).

``run(SimConfig(seed=..., nodes=..., faults=parse_faults("all")))`` builds a world of
unmodified Node cores with skewed clocks, simulated disks and a faulty network, drives
a seeded workload through it, checks the guarantees, and returns a RunResult whose
``trace_hash`` fingerprints the run. ``python -m disquepy.sim`` is the command line.
"""

from .config import FAULT_KINDS, FSYNC_POLICIES, SimConfig, parse_faults
from .result import RunResult
from .world import World, run

__all__ = [
    "FAULT_KINDS",
    "FSYNC_POLICIES",
    "RunResult",
    "SimConfig",
    "World",
    "parse_faults",
    "run",
]
