"""Shrinking: from a failing seed to the smallest run that still fails the same way.

A run is a pure function of its SimConfig, so shrinking searches config space around
the failing one, keeping the seed: fewer fault kinds, fewer nodes, fewer workload
commands (``steps``; the workload before the cut is unchanged), a shorter faulty
phase, fewer clients and queues, a lower REPLICATE cap, then single fault episodes
left out (``skip_faults``, delta debugging over the episodes the run drew). A
candidate is kept when it still fails with the target check (by default the kind of
the original run's first failure); passes repeat until nothing shrinks any more or
the budget is spent. Candidates of one step run in parallel worker processes, and the
first that fails, in a fixed order, wins: the outcome is as deterministic as a run.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import time
from collections.abc import Callable
from multiprocessing.pool import Pool
from typing import Any

from .config import FAULT_KINDS, SimConfig, faults_spec, skip_spec
from .result import RunResult
from .sweep import _pinned_hashseed, _run_one

MIN_STEPS = 20
MIN_DURATION_S = 1


def size_of(cfg: SimConfig, episodes: int | None = None) -> str:
    """The knobs a shrink reduces, as one line."""
    live = "" if episodes is None else f", {episodes - len(cfg.skip_faults)} fault episodes"
    return (
        f"nodes {cfg.nodes}, faults {faults_spec(cfg.faults)}{live}, steps {cfg.steps}, "
        f"duration {cfg.duration_s} s, agents/node {cfg.agents_per_node}, "
        f"queues {cfg.queues}, max replicate {cfg.max_replicate}"
    )


@dataclasses.dataclass(slots=True)
class ShrinkResult:
    original: RunResult
    smallest: RunResult
    target: str  # the failure kind kept
    runs: int  # candidate runs made
    wall_s: float
    log: list[str]  # one line per accepted step

    @property
    def shrunk(self) -> bool:
        return self.smallest.config != self.original.config

    def text(self) -> str:
        o, s = self.original, self.smallest
        lines = [
            f"shrink: keeping '{self.target}' failures; {self.runs} candidate runs in "
            f"{self.wall_s:.0f} s, {len(self.log)} steps accepted",
            *(f"  {line}" for line in self.log),
            f"from: {size_of(o.config, o.stats.get('fault_episodes'))}",
            f"to:   {size_of(s.config, s.stats.get('fault_episodes'))}",
            f"  {s.summary_line()}",
            f"smallest reproducer: {s.config.replay_command()}",
        ]
        return "\n".join(lines)


class Shrinker:
    """Owns a worker pool for the candidates (``initializer`` as in sweep.run_many)."""

    def __init__(self, target: str, jobs: int | None = None,
                 initializer: Callable[..., object] | None = None,
                 initargs: tuple[object, ...] = (), max_runs: int = 300,
                 max_wall_s: float = 900.0,
                 on_step: Callable[[str], None] | None = None) -> None:
        self.target = target
        self.jobs = max(1, jobs or os.cpu_count() or 1)
        self.initializer = initializer
        self.initargs = initargs
        self.max_runs = max_runs
        self.max_wall_s = max_wall_s
        self.on_step = on_step
        self.runs = 0
        self.t0 = time.monotonic()
        self.log: list[str] = []
        self.pool: Pool | None = None

    def fails(self, r: RunResult) -> bool:
        return self.target in r.fail_counts

    def out_of_budget(self) -> bool:
        return self.runs >= self.max_runs or time.monotonic() - self.t0 > self.max_wall_s

    def first_failing(self, cands: list[SimConfig]) -> RunResult | None:
        """Run the candidates (in parallel batches); the first, in order, that fails."""
        pool = self.pool
        assert pool is not None, "first_failing runs inside shrink()"
        k = 0
        while k < len(cands):
            if self.out_of_budget():
                return None
            # never more runs than the budget has left (a batch runs whole)
            batch = cands[k:k + min(self.jobs, self.max_runs - self.runs)]
            k += len(batch)
            results = pool.map(_run_one, batch, chunksize=1)
            self.runs += len(batch)
            for r in results:
                if self.fails(r):
                    return r
        return None

    def accept(self, what: str, r: RunResult) -> RunResult:
        line = f"{what}: still fails ({self.target}={r.fail_counts[self.target]})"
        self.log.append(line)
        if self.on_step is not None:
            self.on_step(line)
        return r

    # ------------------------------------------------------------------ passes
    def _kinds(self, best: RunResult) -> RunResult | None:
        cfg = best.config
        kinds = [k for k in FAULT_KINDS if k in cfg.faults]
        if not kinds:
            return None
        cands = [dataclasses.replace(cfg, faults=frozenset(), skip_faults=frozenset())]
        cands += [dataclasses.replace(cfg, faults=cfg.faults - {k}, skip_faults=frozenset())
                  for k in kinds]
        r = self.first_failing(cands)
        if r is not None:
            gone = sorted(cfg.faults - r.config.faults)
            return self.accept(f"faults without {','.join(gone)}", r)
        return None

    def _smaller_int(self, best: RunResult, name: str, floor: int) -> RunResult | None:
        cfg = best.config
        cur: int = getattr(cfg, name)
        vals = []
        for v in (floor, cur // 4, cur // 2, cur - cur // 4):
            if floor <= v < cur and v not in vals:
                vals.append(v)
        # (one int field, named at run time)
        changes: list[dict[str, Any]] = [{name: v} for v in vals]
        r = self.first_failing([dataclasses.replace(cfg, **c) for c in changes])
        if r is not None:
            return self.accept(f"{name} {cur} -> {getattr(r.config, name)}", r)
        return None

    def _episodes(self, best: RunResult) -> RunResult | None:
        """Leave out chunks of the fault episodes still injected, halving the chunk
        size down to single episodes (ddmin's complement step)."""
        cfg = best.config
        total: int = best.stats.get("fault_episodes", 0)
        live = [e for e in range(1, total + 1) if e not in cfg.skip_faults]
        if not live:
            return None
        n = 2
        while True:
            size = max(1, len(live) // n)
            chunks = [live[i:i + size] for i in range(0, len(live), size)]
            cands = [dataclasses.replace(cfg, skip_faults=cfg.skip_faults | frozenset(c))
                     for c in chunks]
            r = self.first_failing(cands)
            if r is not None:
                left = len(live) - len(set(live) & r.config.skip_faults)
                return self.accept(
                    f"fault episodes {len(live)} -> {left} "
                    f"(skip {skip_spec(r.config.skip_faults)})", r)
            if size == 1 or self.out_of_budget():
                return None
            n *= 2

    def shrink(self, original: RunResult) -> ShrinkResult:
        ctx = multiprocessing.get_context("spawn")
        best = original
        with _pinned_hashseed(), ctx.Pool(self.jobs, initializer=self.initializer,
                                          initargs=self.initargs) as pool:
            self.pool = pool
            changed = True
            while changed and not self.out_of_budget():
                changed = False
                steps: tuple[Callable[[RunResult], RunResult | None], ...] = (
                    self._kinds,
                    lambda b: self._smaller_int(b, "nodes", 2),
                    lambda b: self._smaller_int(b, "steps", MIN_STEPS),
                    lambda b: self._smaller_int(b, "duration_s", MIN_DURATION_S),
                    lambda b: self._smaller_int(b, "agents_per_node", 1),
                    lambda b: self._smaller_int(b, "queues", 1),
                    lambda b: self._smaller_int(b, "max_replicate", 1),
                    self._episodes,
                )
                for step in steps:
                    if self.out_of_budget():
                        break
                    r = step(best)
                    if r is not None:
                        best = r
                        changed = True
            self.pool = None
        return ShrinkResult(original, best, self.target, self.runs,
                            time.monotonic() - self.t0, self.log)


def shrink(original: RunResult, target: str | None = None, jobs: int | None = None,
           initializer: Callable[..., object] | None = None, initargs: tuple[object, ...] = (),
           max_runs: int = 300, max_wall_s: float = 900.0,
           on_step: Callable[[str], None] | None = None) -> ShrinkResult:
    """Shrink a failing run. ``target``: the failure kind to keep (default: the kind
    of its first failure). Raises ValueError if the run did not fail that way."""
    if target is None:
        if not original.failures:
            raise ValueError("the run passed: nothing to shrink")
        target = original.failures[0].kind
    if target not in original.fail_counts:
        raise ValueError(f"the run has no '{target}' failure to keep "
                         f"(it has: {sorted(original.fail_counts) or 'none'})")
    sh = Shrinker(target, jobs, initializer, initargs, max_runs, max_wall_s, on_step)
    return sh.shrink(original)
