"""``python -m disquepy.chaos``: Jepsen-like fault runs against real disque-server processes.

    python -m disquepy.chaos --seed 7 --duration 25
    python -m disquepy.chaos --seed 1 --runs 3 --duration 60 --json chaos.json

Each run starts a cluster of real nodes (appendfsync always) on loopback behind a
fault-injecting bus proxy, runs producers, consumers and a seeded nemesis (kill -9
and restart, SIGSTOP, partitions, delay, loss, connection cuts) for --duration
seconds, heals, drains every queue, and checks the history: lost, unexpected,
RETRY 0 delivered twice, unacked, acked but not collected; duplicates are counted.
The fault schedule and every client decision come from the seed (the processes'
timing does not). Exit status: 0 all runs clean, 1 a violation, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from .nemesis import KINDS, parse_kinds
from .run import ChaosConfig, ChaosResult, run


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m disquepy.chaos", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=None,
                   help="seed of the (first) run; default: a random one, printed")
    p.add_argument("--runs", type=int, default=1, help="runs, with seeds seed, seed+1, ...")
    p.add_argument("--nodes", type=int, default=5)
    p.add_argument("--duration", type=float, default=25.0, help="seconds of faults per run")
    p.add_argument("--faults", default="all",
                   help=f"all, none, or a comma list of: {', '.join(KINDS)}")
    p.add_argument("--timeout", type=float, default=0.0,
                   help="overall limit per run in seconds (default: duration + 240)")
    p.add_argument("--json", metavar="PATH", help="write the runs' summary here")
    p.add_argument("--workdir", help="put the node directories here (kept)")
    p.add_argument("--keep", action="store_true", help="keep node directories of clean runs")
    p.add_argument("--sabotage-lose", type=int, default=0, metavar="N",
                   help="delete N added jobs behind the checker's back (it must fail)")
    p.add_argument("--groups", type=int, default=0, metavar="N",
                   help="also run N consumer groups (QADD/QGET/QACK, 2 consumers each) "
                        "and check them (docs/GROUPS.md)")
    p.add_argument("--sabotage-lose-events", type=int, default=0, metavar="N",
                   help="with --groups: QFLUSH N added events behind the checker's back "
                        "(it must fail)")
    p.add_argument("-v", "--verbose", action="store_true", help="log every fault")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        kinds = parse_kinds(args.faults)
        if not 3 <= args.nodes <= 9:
            raise ValueError("--nodes must be in 3..9")
        if args.duration <= 0 or args.runs < 1:
            raise ValueError("--duration and --runs must be positive")
        if not 0 <= args.groups <= 16:
            raise ValueError("--groups must be in 0..16")
        if args.sabotage_lose_events and not args.groups:
            raise ValueError("--sabotage-lose-events needs --groups")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.seed is None:
        import random

        args.seed = random.SystemRandom().randrange(1, 1_000_000)
    results = []
    for k in range(args.runs):
        workdir = f"{args.workdir}/run{k}" if args.workdir else None
        cfg = ChaosConfig(seed=args.seed + k, nodes=args.nodes, duration=args.duration,
                          faults=kinds, timeout=args.timeout, lose_jobs=args.sabotage_lose,
                          groups=args.groups, lose_events=args.sabotage_lose_events,
                          workdir=workdir, keep=args.keep)
        print(f"chaos run {k + 1}/{args.runs}: seed {cfg.seed} "
              f"(replay: {cfg.replay_command()})", flush=True)
        try:
            r = run(cfg)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM; every node was stopped on the way out
            print(f"interrupted; replay: {cfg.replay_command()}", file=sys.stderr)
            return 130
        results.append(r)
        print(r.text(), flush=True)
    if len(results) > 1:
        print(summary_text(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": [r.to_json() for r in results],
                       "totals": totals(results)}, f, indent=2, default=repr)
        print(f"summary written to {args.json}")
    return 0 if all(r.ok for r in results) else 1


def totals(results: list[ChaosResult]) -> dict[str, Any]:
    """Sums over runs (rates recomputed): a JSON object (counts, rates, and the faults'
    and groups' sums as objects, hence Any)."""
    out: dict[str, Any] = {"runs": len(results), "failed": sum(1 for r in results if not r.ok),
                 "fault_seconds": sum(r.config.duration for r in results)}
    for key in ("adds_sent", "jobs_added", "retry0_added", "jobs_delivered", "alo_delivered",
                "deliveries", "acked", "duplicates", "duplicates_unrequested", "lost",
                "unexpected", "at_most_once", "unacked", "not_collected", "leftover"):
        out[key] = sum(r.counts.get(key, 0) for r in results)
    alo = out["alo_delivered"]
    out["duplicate_rate"] = round(out["duplicates"] / alo, 5) if alo else 0.0
    out["duplicate_rate_unrequested"] = (
        round(out["duplicates_unrequested"] / alo, 5) if alo else 0.0)
    faults: dict[str, int] = {}
    for r in results:
        for k, v in r.faults.items():
            faults[k] = faults.get(k, 0) + v
    out["faults"] = faults
    groups: dict[str, int] = {}
    for r in results:
        for k, v in r.group_counts.items():
            if k != "groups":
                groups[k] = groups.get(k, 0) + v
    if groups:
        out["groups"] = groups
    return out


def summary_text(results: list[ChaosResult]) -> str:
    t = totals(results)
    f = " ".join(f"{k}={v}" for k, v in t["faults"].items() if v)
    return "\n".join([
        f"total: {t['runs']} runs, {t['fault_seconds']:g} s of faults, {t['failed']} failed",
        f"  faults: {f}",
        f"  jobs added {t['jobs_added']} ({t['retry0_added']} RETRY 0), delivered "
        f"{t['jobs_delivered']}, deliveries {t['deliveries']}",
        f"  lost {t['lost']}, unexpected {t['unexpected']}, RETRY 0 twice {t['at_most_once']}, "
        f"unacked {t['unacked']}, not collected {t['not_collected']}",
        f"  duplicate rate {100 * t['duplicate_rate']:.2f}% "
        f"({100 * t['duplicate_rate_unrequested']:.2f}% not requested)",
    ] + ([_groups_total(t["groups"])] if "groups" in t else []))


def _groups_total(g: dict[str, int]) -> str:
    return (f"  groups: {g['events_added']} events with an ID, {g['deliveries']} deliveries, "
            f"lost {g['lost']} (excused {g['lost_excused']}), group missed "
            f"{g['group_missed']}, unexpected {g['unexpected']}, double leases healthy "
            f"{g['double_lease_healthy']} / under faults {g['double_leases_faults']}, "
            f"after ack {g['after_ack']}")
