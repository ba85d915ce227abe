"""``python -m disquepy.sim``: run one seed (``--seed``) or sweep many (``--seeds``).

    python -m disquepy.sim --seeds 1000 --nodes 5 --faults all
    python -m disquepy.sim --seed 53 --nodes 5 --faults all --fsync everysec \\
        --duration 30 --steps 3000
    python -m disquepy.sim --seed 53 --nodes 5 --faults all --shrink

Exit status 0 when every run passed every check, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys

from .config import (
    DEFAULT_DURATION_S,
    DEFAULT_FSYNC,
    DEFAULT_NODES,
    DEFAULT_STEPS,
    FAULT_KINDS,
    FSYNC_POLICIES,
    SimConfig,
    parse_faults,
    parse_skip,
)
from .sweep import HASHSEED, Summary, sweep


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m disquepy.sim",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument("--seed", type=int, help="run this one seed and report it in detail")
    which.add_argument("--seeds", type=int, help="sweep this many seeds (from --first)")
    p.add_argument("--first", type=int, default=1, help="first seed of a sweep (default 1)")
    p.add_argument("--nodes", type=int, default=DEFAULT_NODES)
    p.add_argument(
        "--faults", default="all", help=f"none, all, or a comma list of: {', '.join(FAULT_KINDS)}"
    )
    p.add_argument(
        "--fsync",
        choices=FSYNC_POLICIES,
        default=DEFAULT_FSYNC,
        help="the nodes' appendfsync policy",
    )
    p.add_argument(
        "--duration",
        type=int,
        default=DEFAULT_DURATION_S,
        help="seconds (simulated) of workload with faults",
    )
    p.add_argument(
        "--steps",
        type=int,
        default=DEFAULT_STEPS,
        help="client commands in the faulty phase, at most",
    )
    p.add_argument("--max-replicate", type=int, default=3)
    p.add_argument("--agents-per-node", type=int, default=3, help="clients per node")
    p.add_argument("--queues", type=int, default=3, help="queues the workload uses")
    p.add_argument("--groups", type=int, default=0,
                   help="consumer groups of the event workload (0: jobs only)")
    p.add_argument(
        "--skip-faults",
        default="",
        metavar="LIST",
        help="fault episodes (1, 2, ... in the order drawn) to leave out, e.g. 2,5",
    )
    p.add_argument(
        "--shrink",
        action="store_true",
        help="with --seed: if it fails, search for the smallest run failing the same way "
        "and print its replay line",
    )
    p.add_argument(
        "--shrink-check",
        metavar="KIND",
        help="the failure kind a shrunk run must keep (default: the first failure's)",
    )
    p.add_argument(
        "--shrink-runs", type=int, default=300, help="at most this many candidate runs"
    )
    p.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="worker processes for a sweep"
    )
    p.add_argument(
        "--check-determinism",
        action="store_true",
        help="run every seed twice and compare the trace hashes",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="one line per seed")
    return p


def _pin_hashseed(argv: list[str]) -> None:
    """Re-run under PYTHONHASHSEED=0 (see sweep.py): a replay is then exact even if
    something iterates a set of strings."""
    if os.environ.get("PYTHONHASHSEED") != HASHSEED:
        env = dict(os.environ, PYTHONHASHSEED=HASHSEED)
        os.execve(sys.executable, [sys.executable, "-m", "disquepy.sim", *argv], env)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    try:
        faults = parse_faults(args.faults)
        base = dict(
            nodes=args.nodes,
            faults=faults,
            fsync=args.fsync,
            duration_s=args.duration,
            steps=args.steps,
            max_replicate=args.max_replicate,
            agents_per_node=args.agents_per_node,
            queues=args.queues,
            skip_faults=parse_skip(args.skip_faults),
            groups=args.groups,
        )
        SimConfig(**base)
        if args.shrink and args.seed is None:
            raise ValueError("--shrink needs --seed")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    _pin_hashseed(argv)
    if args.shrink:
        return _shrink(SimConfig(seed=args.seed, **base), args)
    if args.seed is not None:
        seeds = [args.seed]
    else:
        seeds = list(range(args.first, args.first + (args.seeds or 1)))
    configs = [SimConfig(seed=s, **base) for s in seeds]
    if args.check_determinism:
        configs = [c for c in configs for _ in (0, 1)]
    verbose = args.verbose or args.seed is not None
    summary = sweep(
        configs, args.jobs, on_result=(lambda r: print(r.report(), flush=True)) if verbose else None
    )
    results = summary.results
    bad_determinism = []
    if args.check_determinism:
        pairs = list(zip(results[::2], results[1::2], strict=True))
        bad_determinism = [a.config.seed for a, b in pairs if a.trace_hash != b.trace_hash]
        summary = Summary([a for a, _ in pairs], summary.wall_s)
    if args.seed is not None:
        r = summary.results[0]
        print(f"stats: {r.stats}")
        print(f"replay: {r.config.replay_command()}")
    else:
        print(summary.text())
    if args.check_determinism:
        print(
            f"determinism: {len(summary.results) - len(bad_determinism)} of "
            f"{len(summary.results)} seeds gave the same trace hash twice"
            + (f"; differing: {bad_determinism}" if bad_determinism else "")
        )
    return 0 if not summary.failed and not bad_determinism else 1


def _shrink(cfg: SimConfig, args: argparse.Namespace) -> int:
    """Run the seed; if it fails, shrink it. Exit 1 when it failed (shrunk or not)."""
    from .shrink import shrink
    from .sweep import run_many

    r = run_many([cfg], 1)[0]
    print(r.report(), flush=True)
    if r.ok:
        print(f"seed {cfg.seed} passes: nothing to shrink")
        return 0
    try:
        res = shrink(
            r,
            target=args.shrink_check,
            jobs=args.jobs,
            max_runs=args.shrink_runs,
            on_step=lambda line: print(f"  shrink: {line}", flush=True),
        )
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(res.text())
    return 1
