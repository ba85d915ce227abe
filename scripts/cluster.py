#!/usr/bin/env python3
"""Start a local disquepy cluster on consecutive ports, join it, and keep it running.

    python scripts/cluster.py --nodes 3 --port 7711
    python scripts/cluster.py --nodes 1 --web 8000     # `make run`: a node and the dashboard

Each node runs in var/cluster/<port>/ (its nodes.conf and log live there). ``--web PORT``
also starts ``disque-web`` (the HTTP API, dashboard and /metrics, needs the ``web``
extra) in front of the nodes, its log in the same directory. Ctrl-C, SIGTERM or SIGHUP
stop every process; if this script is killed outright (kill -9), they die with it
(parent-death signal, Linux).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from disquepy.chaos.cluster import _bindable, die_with_parent  # noqa: E402


def command(port: int, line: str, timeout: float = 2.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(line.encode() + b"\r\n")
        return s.recv(65536)


def busy_port(ports: list[int], offset: int = 10000) -> int | None:
    """The first of the client ports (or their bus ports) something already holds."""
    return next((p for p in [*ports, *(p + offset for p in ports)]
                 if not _bindable("127.0.0.1", p)), None)


def start_web(port: int, nodes: list[int], logdir: Path) -> subprocess.Popen:
    """``disque-web`` on 127.0.0.1:port in front of the nodes, logging to logdir."""
    log = open(logdir / f"web-{port}.log", "ab")  # noqa: SIM115 - lives as long as it
    return subprocess.Popen(
        [sys.executable, "-m", "disquepy.web", "--port", str(port),
         "--nodes", ",".join(f"127.0.0.1:{p}" for p in nodes)],
        stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent,
        env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))


def web_ready(port: int, proc: subprocess.Popen, deadline: float) -> bool:
    """Wait (until ``deadline``, monotonic) for disque-web to answer; False if it exited."""
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/openapi.json", timeout=2):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--port", type=int, default=7711)
    ap.add_argument("--dir", default=str(ROOT / "var" / "cluster"))
    ap.add_argument("--wait", type=float, default=20.0, help="seconds to wait for the join")
    ap.add_argument("--web", type=int, default=None, metavar="PORT",
                    help="also start disque-web (API, dashboard, /metrics) on this port")
    args = ap.parse_args()
    ports = [args.port + i for i in range(args.nodes)]
    # Checked before anything starts: a node already on one of these ports (`make run`)
    # would answer our PING and be MEETed into this cluster, left with ghost peers.
    busy = busy_port(ports)
    if busy is None and args.web is not None and not _bindable("127.0.0.1", args.web):
        busy = args.web
    if busy is not None:
        print(f"port {busy} is already in use (a `make run` node?): stop what holds it, "
              f"or pick other ports with `make cluster PORT=<first port>` "
              f"(`make run PORT=... WEB_PORT=...`)", file=sys.stderr)
        return 2
    procs = []

    def stop(signum, frame):  # `kill` or a closed terminal stops the nodes as Ctrl-C does
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    try:
        for p in ports:
            d = Path(args.dir) / str(p)
            d.mkdir(parents=True, exist_ok=True)
            log = open(d / "disque.log", "ab")  # noqa: SIM115 - lives as long as the node
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "disquepy.server.main", "--port", str(p)],
                cwd=d, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent,
                env=dict(os.environ, PYTHONPATH=str(ROOT / "src"))))
        deadline = time.monotonic() + args.wait
        for p in ports:
            while True:
                try:
                    if command(p, "PING").startswith(b"+PONG"):
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    print(f"node on port {p} did not start; see {args.dir}/{p}/disque.log")
                    return 1
                time.sleep(0.1)
        for p in ports[1:]:
            command(ports[0], f"CLUSTER MEET 127.0.0.1 {p}")
        while True:
            info = [command(p, "CLUSTER INFO").decode(errors="replace") for p in ports]
            if all(f"cluster_reachable_nodes:{len(ports) - 1}" in i for i in info):
                break
            if time.monotonic() > deadline:
                print("the nodes did not all see each other in time:")
                print("\n".join(info))
                return 1
            time.sleep(0.2)
        if args.web is not None:
            procs.append(start_web(args.web, ports, Path(args.dir)))
            if not web_ready(args.web, procs[-1], deadline + 30):
                print(f"disque-web did not start; see {args.dir}/web-{args.web}.log")
                return 1
        what = (f"cluster of {len(ports)} nodes up on ports {', '.join(map(str, ports))}"
                if len(ports) > 1 else f"node up on port {ports[0]}")
        print(f"{what} (bus on port+10000); logs in {args.dir}. Ctrl-C to stop.")
        if args.web is not None:
            url = f"http://127.0.0.1:{args.web}"
            print(f"dashboard: {url}/   API docs: {url}/docs   metrics: {url}/metrics")
            print(f"try: curl -X POST {url}/jobs -H 'Content-Type: application/json' "
                  """-d '{"payload": {"to": "ann@example.net"}, "priority": "high"}'""")
        else:
            print(f"try: redis-cli -p {ports[0]} ADDJOB q hello 0  then  "
                  f"redis-cli -p {ports[-1]} GETJOB FROM q")
        while all(p.poll() is None for p in procs):
            time.sleep(0.5)
        print("a process exited; stopping the others")
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    sys.exit(main())
