#!/usr/bin/env python3
"""A/B of the REPLICATE 3 ratio between source trees (e.g. a commit and a change to it).

For each tree: a 1-node server and a 3-node cluster, started from that tree's ``src``
(``python -m disquepy.server.main`` with PYTHONPATH set), all up at once. Every round
runs, tree after tree, ``ADDJOB q <16-byte body> 5000 REPLICATE 1`` on the single node
and ``... REPLICATE 3`` with the connections spread over the cluster (50 connections,
unpipelined, ``--requests`` jobs each), every row on empty nodes (DEBUG FLUSHALL). It
prints each row's rate, the round's ratio and the server CPU per job (all the row's
nodes), then each tree's medians. The first REPLICATE 3 row of each tree runs on its
fresh cluster and also gives the RSS growth per job on each node; ``--queue`` names the
queue (a realistic name shows what a job holds of it).

    .venv/bin/python bench/ab_cluster.py /tmp/base /work/main --rounds 4 --requests 60000
    git worktree add /tmp/base <commit>   # a tree to compare with (copy in the built
                                          # src/disquepy/codec/_creader*.so)

Nothing else: the full cluster benchmark with its targets is bench/cluster.py.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cluster as C  # noqa: E402  (bench/cluster.py: Nodes, addjob_row, flush_all, rss)
import run as R  # noqa: E402


def tree_cmd(tree: Path) -> str:
    return shlex.join(["env", f"PYTHONPATH={tree / 'src'}", str(R.venv_python()), "-m",
                       "disquepy.server.main"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trees", nargs="+", type=Path, help="source trees (each with src/)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--requests", type=int, default=60_000, help="ADDJOBs per row")
    ap.add_argument("--queue", default="q")
    ap.add_argument("--max-seconds", type=float, default=60.0)
    ap.add_argument("--startup-timeout", type=float, default=20.0)
    a = ap.parse_args(argv)
    for t in a.trees:
        if not (t / "src" / "disquepy").is_dir():
            ap.error(f"{t}: no src/disquepy")
    R.build_loadgen()
    scratch = Path(tempfile.mkdtemp(prefix="disquepy-ab-"))
    rows: dict[Path, list[tuple[float, float, float | None]]] = {t: [] for t in a.trees}
    with contextlib.ExitStack() as stack:
        sides = []
        for i, t in enumerate(a.trees):
            args = argparse.Namespace(ours_cmd=tree_cmd(t.resolve()),
                                      startup_timeout=a.startup_timeout,
                                      cluster_requests=a.requests, max_seconds=a.max_seconds)
            single = stack.enter_context(C.Nodes(args, scratch, f"t{i}-single", 1))
            cl = stack.enter_context(C.Nodes(args, scratch, f"t{i}-repl", C.NODES))
            sides.append((t, args, single, cl))
        for r in range(a.rounds):
            for t, args, single, cl in sides:
                C.flush_all(single.ports)
                r1 = C.addjob_row(args, single, "R1", ["REPLICATE", "1"], C.BASE_CONNS, a.queue)
                C.flush_all(cl.ports)
                rss0 = C.rss(cl.ports) if r == 0 else None
                r3 = C.addjob_row(args, cl, "R3", ["REPLICATE", "3"], C.BASE_CONNS, a.queue)
                mem = ""
                if rss0 is not None and r3["report"]["ops"]:
                    c = C.wait_copies(cl.ports, r3["report"]["ops"], C.FREE_TIMEOUT_S)
                    per = [None if x is None or y is None else (y - x) / r3["report"]["ops"]
                           for x, y in zip(rss0, C.rss(cl.ports), strict=True)]
                    mem = " | RSS per job " + ", ".join(
                        "?" if v is None else f"{v:.0f} B" for v in per) + (
                        "" if c["ok"] else f" (copies short: {c['counts']})")
                a1, a3 = r1["report"]["ops_per_sec"], r3["report"]["ops_per_sec"]
                ratio = a3 / a1 if a1 else 0.0
                rows[t].append((ratio, a3, r3["cpu_us_per_job"]))
                print(f"round {r + 1} {t}: R1 {a1:,.0f}/s, R3 {a3:,.0f}/s, ratio {ratio:.3f}, "
                      f"R3 CPU {C.fmt_cpu(r3['cpu_us_per_job'])} us/job{mem}", flush=True)
    shutil.rmtree(scratch, ignore_errors=True)
    for t, lst in rows.items():
        cpus = [c for _, _, c in lst if c is not None]
        print(f"{t}: median ratio {statistics.median(x for x, _, _ in lst):.3f} "
              f"(rounds {', '.join(f'{x:.2f}' for x, _, _ in lst)}), median R3 CPU "
              f"{statistics.median(cpus) if cpus else float('nan'):.1f} us/job")
    return 0


if __name__ == "__main__":
    sys.exit(main())
