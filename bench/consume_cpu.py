#!/usr/bin/env python3
"""Server CPU per consumed job on a node holding many jobs, ours against C Disque.

    .venv/bin/python bench/consume_cpu.py                    # 1M jobs, 3 alternating rounds
    .venv/bin/python bench/consume_cpu.py --jobs 200000 --rounds 5
    .venv/bin/python bench/consume_cpu.py --against /tmp/old/src   # + another tree (A/B)

Each round, on each side: a fresh server, ``--jobs`` jobs added by bench/loadgen
(50 connections, 16-deep), then consumed by one connection doing
``GETJOB NOHANG COUNT 100`` with the previous reply's ACKJOB pipelined (loadgen's
``getack1``); the figure is the server's CPU (user + system, /proc) over the consume
run divided by the jobs acked. CPU per job, not the rate: on a shared machine the rate
moves with the neighbours' load, the CPU a job costs much less. The make bench row of
the same workload consumes 100k jobs from a server that ran other workloads before;
this one isolates the consume path at the size where its cache misses show.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from servers import Fleet, alternate, build_loadgen, find_disque_c, loadgen


def one(kind: str, jobs: int, src: Path | None = None) -> dict:
    with Fleet() as fleet:
        s = fleet.start(kind, src=src)
        fill = loadgen([s], "addjob", 50, 16, jobs)
        if fill["problem"]:
            return {"problem": "preload: " + fill["problem"]}
        rep = loadgen([s], "getack1", 1, 1, jobs, args=("NOHANG", "COUNT", "100"))
        rep["cpu_us_per_job"] = rep["server_cpu_us"] * rep["ops"] / max(rep.get("acked", 0), 1)
        return rep


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--against", type=Path, metavar="SRC",
                    help="also run our server from this source tree (side 'against')")
    a = ap.parse_args(argv)
    build_loadgen()
    sides = {"ours": lambda: one("ours", a.jobs)}
    if a.against is not None:
        sides["against"] = lambda: one("ours", a.jobs, a.against.resolve())
    if find_disque_c() is not None:
        sides["c"] = lambda: one("c", a.jobs)
    res = alternate(a.rounds, sides)
    print(f"| side | CPU µs per consumed job, {a.jobs:,} jobs (rounds) | median | jobs/s |")
    print("|---|---|---:|---:|")
    for side, reps in res.items():
        bad = [r["problem"] for r in reps if r.get("problem")]
        if bad:
            print(f"| {side} | problem: {bad[0]} | | |")
            continue
        cpu = [r["cpu_us_per_job"] for r in reps]
        rate = statistics.median(r["ops_per_sec"] for r in reps)
        print(f"| {side} | {', '.join(f'{x:.2f}' for x in cpu)} | "
              f"{statistics.median(cpu):.2f} | {rate:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
