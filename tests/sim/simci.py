"""The fixed CI seed set: 20 seeds on 3 nodes (fsync everysec, always and no in turn)
and 20 on 5 nodes (everysec), every fault kind, the default run length."""

from __future__ import annotations

from disquepy.sim import SimConfig, parse_faults

ALL = parse_faults("all")
POLICIES = ("everysec", "always", "no")
CI_SEEDS = [(seed, 3) for seed in range(1, 21)] + [(seed, 5) for seed in range(1, 21)]


def ci_configs() -> list:
    return [
        SimConfig(
            seed=seed,
            nodes=nodes,
            faults=ALL,
            fsync=POLICIES[seed % 3] if nodes == 3 else "everysec",
        )
        for seed, nodes in CI_SEEDS
    ]
