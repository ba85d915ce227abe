"""The fixed CI seed set: 20 seeds on 3 nodes (fsync everysec, always and no in turn)
and 20 on 5 nodes (everysec), every fault kind, the default run length; plus the seeds
that found bugs (REGRESSION_SEEDS)."""

from __future__ import annotations

from disquepy.sim import SimConfig, parse_faults

ALL = parse_faults("all")
POLICIES = ("everysec", "always", "no")
CI_SEEDS = [(seed, 3) for seed in range(1, 21)] + [(seed, 5) for seed in range(1, 21)]
# seeds that found bugs, kept as regressions: (seed, nodes, fsync)
REGRESSION_SEEDS = [
    (6067, 5, "always"),  # a stale YOURJOBS re-created a delivered RETRY 0 job
    (6120, 5, "always"),  # the same, by another path of duplicated frames
]


def ci_configs() -> list:
    return [
        SimConfig(
            seed=seed,
            nodes=nodes,
            faults=ALL,
            fsync=POLICIES[seed % 3] if nodes == 3 else "everysec",
        )
        for seed, nodes in CI_SEEDS
    ] + [SimConfig(seed=seed, nodes=nodes, faults=ALL, fsync=fsync)
         for seed, nodes, fsync in REGRESSION_SEEDS]
