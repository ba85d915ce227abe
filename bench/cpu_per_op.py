#!/usr/bin/env python3
"""Server CPU time per request: steadier than throughput on a shared 2-core machine.

Starts one server on a free loopback port, drives it with bench/loadgen (50
connections by default) and reads the server's CPU time (user + system, from
/proc/<pid>/stat) before and after each run of --requests requests.

    .venv/bin/python bench/cpu_per_op.py --server ours --mode addjob
    .venv/bin/python bench/cpu_per_op.py --server redis --mode lpush
    .venv/bin/python bench/cpu_per_op.py --server floor --mode ping
    .venv/bin/python bench/cpu_per_op.py --mode addjob --pipeline 16
    .venv/bin/python bench/cpu_per_op.py --src /tmp/old/src -- --appendonly yes   # A/B

``--src`` runs our server from another source tree (e.g. a git worktree of an older
commit) for A/B comparisons; arguments after ``--`` go to our server.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOADGEN = ROOT / "bench" / "loadgen"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", choices=["ours", "redis", "floor"], default="ours")
    ap.add_argument("--mode", default="addjob", help="a bench/loadgen mode")
    ap.add_argument("--conns", type=int, default=50)
    ap.add_argument("--pipeline", type=int, default=1)
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--src", help="run our server from this source tree (A/B)")
    ap.add_argument("server_args", nargs="*", help="extra arguments for our server")
    args = ap.parse_args()
    if not LOADGEN.exists():
        subprocess.run(["gcc", "-O2", "-Wall", "-o", str(LOADGEN), str(LOADGEN) + ".c"],
                       check=True)
    port = free_port()
    work = tempfile.mkdtemp(prefix="disquepy-cpu-")
    env = dict(os.environ)
    if args.server == "ours":
        env["PYTHONPATH"] = args.src or str(ROOT / "src")
        cmd = [sys.executable, "-m", "disquepy.server.main", "--port", str(port),
               *args.server_args]
    elif args.server == "redis":
        cmd = ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"]
    else:
        cmd = [sys.executable, str(ROOT / "bench" / "floor_server.py"), "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit(f"server did not start: {' '.join(cmd)}") from None
                time.sleep(0.05)
        per_op = []
        for _ in range(args.rounds):
            if args.mode in ("getack", "getack1"):  # consume modes need jobs queued first
                subprocess.run([str(LOADGEN), "--port", str(port), "--mode", "addjob",
                                "--conns", "50", "--pipeline", "16", "--requests",
                                str(args.requests), "--queue", "q"], capture_output=True,
                               check=True)
            elif args.mode == "rpop":
                subprocess.run([str(LOADGEN), "--port", str(port), "--mode", "lpush",
                                "--conns", "50", "--pipeline", "16", "--requests",
                                str(args.requests), "--queue", "q"], capture_output=True,
                               check=True)
            c0 = cpu_seconds(proc.pid)
            out = subprocess.run(
                [str(LOADGEN), "--port", str(port), "--mode", args.mode, "--conns",
                 str(args.conns), "--pipeline", str(args.pipeline), "--requests",
                 str(args.requests), "--queue", "q", "--max-seconds", "120", "--json"],
                capture_output=True, text=True, check=True)
            c1 = cpu_seconds(proc.pid)
            done = json.loads(out.stdout.strip().splitlines()[-1]).get("replies") \
                or args.requests
            per_op.append((c1 - c0) / done * 1e6)
        print(f"{args.server} {args.mode} conns={args.conns} pipeline={args.pipeline}: "
              f"server CPU per request {' '.join(f'{x:.1f}' for x in per_op)} us "
              f"(min {min(per_op):.1f})")
    finally:
        proc.kill()
        proc.wait(5)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
