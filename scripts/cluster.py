#!/usr/bin/env python3
"""Start a local disquepy cluster on consecutive ports, join it, and keep it running.

    python scripts/cluster.py --nodes 3 --port 7711

Each node runs in var/cluster/<port>/ (its nodes.conf and log live there). Ctrl-C,
SIGTERM or SIGHUP stop every node; if this script is killed outright (kill -9), its
nodes die with it (parent-death signal, Linux).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--port", type=int, default=7711)
    ap.add_argument("--dir", default=str(ROOT / "var" / "cluster"))
    ap.add_argument("--wait", type=float, default=20.0, help="seconds to wait for the join")
    args = ap.parse_args()
    ports = [args.port + i for i in range(args.nodes)]
    # Checked before anything starts: a node already on one of these ports (`make run`)
    # would answer our PING and be MEETed into this cluster, left with ghost peers.
    busy = busy_port(ports)
    if busy is not None:
        print(f"port {busy} is already in use (a `make run` node?): stop what holds it, "
              f"or pick other ports with `make cluster PORT=<first port>`", file=sys.stderr)
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
        print(f"cluster of {len(ports)} nodes up on ports {', '.join(map(str, ports))} "
              f"(bus on port+10000); logs in {args.dir}. Ctrl-C to stop.")
        print(f"try: redis-cli -p {ports[0]} ADDJOB q hello 0  then  "
              f"redis-cli -p {ports[-1]} GETJOB FROM q")
        while all(p.poll() is None for p in procs):
            time.sleep(0.5)
        print("a node exited; stopping the others")
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
