"""What one simulated run is: every knob, and the command line that replays it.

A run is a pure function of its :class:`SimConfig`: the seed feeds one RNG per node,
one for the network, one for the faults and one for the workload (see
:func:`split_rng`), so the same config always produces the same trace.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

FAULT_KINDS = ("loss", "dup", "delay", "partition", "crash", "clog", "skew")
FSYNC_POLICIES = ("always", "everysec", "no")

DEFAULT_NODES = 5
DEFAULT_DURATION_S = 30  # sim seconds of workload with faults on
DEFAULT_STEPS = 3000  # client commands in the faulty phase (whichever limit comes first)
DEFAULT_FSYNC = "everysec"


def parse_faults(spec: str) -> frozenset[str]:
    """``all``, ``none`` or a comma list of :data:`FAULT_KINDS`."""
    kinds: set[str] = set()
    for word in spec.replace(" ", "").split(","):
        if word in ("", "none"):
            continue
        if word == "all":
            kinds.update(FAULT_KINDS)
        elif word in FAULT_KINDS:
            kinds.add(word)
        else:
            raise ValueError(
                f"unknown fault kind {word!r} (choose from none, all, {', '.join(FAULT_KINDS)})"
            )
    return frozenset(kinds)


def faults_spec(kinds: frozenset[str]) -> str:
    if not kinds:
        return "none"
    if kinds == frozenset(FAULT_KINDS):
        return "all"
    return ",".join(k for k in FAULT_KINDS if k in kinds)


@dataclass(frozen=True, slots=True)
class SimConfig:
    seed: int = 1
    nodes: int = DEFAULT_NODES
    faults: frozenset[str] = field(default_factory=lambda: frozenset(FAULT_KINDS))
    fsync: str = DEFAULT_FSYNC
    duration_s: int = DEFAULT_DURATION_S
    steps: int = DEFAULT_STEPS
    max_replicate: int = 3  # REPLICATE is drawn from 1..min(nodes, max_replicate)
    agents_per_node: int = 3
    queues: int = 3
    node_timeout: int = 2000  # cluster-node-timeout, ms
    quiesce_max_s: int = 420  # faults off: run until settled, at most this long
    wall_limit_s: float = 300.0  # a run taking longer than this (real time) fails
    max_events: int = 5_000_000  # a run processing more events than this fails
    # fault episodes (1-based, in firing order) drawn but not injected: how a shrunk
    # schedule leaves out single partitions, crashes, clogs and loss bursts
    skip_faults: frozenset[int] = frozenset()
    # consumer groups: this many groups consume events next to the job workload
    # (sim/groups.py); 0 runs the job workload alone
    groups: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.nodes <= 64:
            raise ValueError("nodes must be in 1..64")
        if self.fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync must be one of {', '.join(FSYNC_POLICIES)}")
        if self.duration_s <= 0 or self.steps <= 0:
            raise ValueError("duration and steps must be positive")
        if not 0 <= self.groups <= 16:
            raise ValueError("groups must be in 0..16")
        if self.agents_per_node < 1 or self.queues < 1 or self.max_replicate < 1:
            raise ValueError("agents per node, queues and max replicate must be positive")

    def replay_command(self) -> str:
        """The one line that replays this run exactly."""
        cmd = (
            f"python -m disquepy.sim --seed {self.seed} --nodes {self.nodes} "
            f"--faults {faults_spec(self.faults)} --fsync {self.fsync} "
            f"--duration {self.duration_s} --steps {self.steps}"
        )
        if self.max_replicate != 3:
            cmd += f" --max-replicate {self.max_replicate}"
        if self.agents_per_node != 3:
            cmd += f" --agents-per-node {self.agents_per_node}"
        if self.queues != 3:
            cmd += f" --queues {self.queues}"
        if self.skip_faults:
            cmd += f" --skip-faults {skip_spec(self.skip_faults)}"
        if self.groups:
            cmd += f" --groups {self.groups}"
        return cmd


def parse_skip(spec: str) -> frozenset[int]:
    """``3,5,9`` (fault episode numbers, from 1) or an empty string."""
    out = set()
    for word in spec.replace(" ", "").split(","):
        if not word:
            continue
        if not word.isdigit() or int(word) < 1:
            raise ValueError(f"bad fault episode number {word!r} (1, 2, ...)")
        out.add(int(word))
    return frozenset(out)


def skip_spec(skip: frozenset[int]) -> str:
    return ",".join(str(k) for k in sorted(skip))


def split_rng(seed: int, *names: object) -> random.Random:
    """An independent RNG for one part of the world. String seeds go through SHA-512
    (random's version 2 seeding), so streams do not depend on PYTHONHASHSEED."""
    return random.Random(":".join(str(x) for x in (seed, *names)))
