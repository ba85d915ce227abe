#!/usr/bin/env python3
"""Start a local disquepy cluster on consecutive ports, join it, and keep it running.

    python scripts/cluster.py --nodes 3 --port 7711       # `make cluster`
    python scripts/cluster.py --nodes 1 --web 8000 --worker disquepy.worker.example:handle
                                                          # `make run`: Disqueue's whole flow

Each node runs in <dir>/<port>/ (its nodes.conf and log live there). ``--web PORT`` also
starts ``disque-web`` (the HTTP API, dashboard and /metrics, needs the ``web`` extra) in
front of the nodes, and ``--worker MODULE:FUNCTION`` a ``disque-worker`` running that
handler on the HTTP API's queues (``--worker-queues``, every priority), their logs in
<dir>.

The script supervises what it started: a process that exits (a node killed to watch a
failover, a crashed worker) is reported and, after ``--restart-delay`` seconds, started
again (a node from its own directory, so it rejoins with its nodes.conf); the others keep
running meanwhile. A process that keeps dying is given up on after 5 starts in a
minute. Ctrl-C, SIGTERM or SIGHUP stop every process; if this script is killed outright
(kill -9), they die with it (parent-death signal, Linux).
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
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from disquepy.chaos.cluster import _bindable, die_with_parent  # noqa: E402

RESTARTS_PER_MINUTE = 5


def command(port: int, line: str, timeout: float = 2.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(line.encode() + b"\r\n")
        return s.recv(65536)


def busy_port(ports: list[int], offset: int = 10000) -> int | None:
    """The first of the client ports (or their bus ports) something already holds."""
    return next((p for p in [*ports, *(p + offset for p in ports)]
                 if not _bindable("127.0.0.1", p)), None)


class Child:
    """One supervised process: how to start it, and what became of it."""

    def __init__(self, name: str, argv: list[str], cwd: Path, log: Path,
                 env: dict[str, str]) -> None:
        self.name, self.argv, self.cwd, self.log, self.env = name, argv, cwd, log, env
        self.proc: subprocess.Popen | None = None
        self.starts: deque[float] = deque(maxlen=RESTARTS_PER_MINUTE)
        self.due: float | None = None  # when to start it again
        self.given_up = False

    def start(self) -> None:
        with open(self.log, "ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(self.argv, cwd=self.cwd, stdout=log,
                                         stderr=subprocess.STDOUT, env=self.env,
                                         preexec_fn=die_with_parent)
        self.starts.append(time.monotonic())
        self.due = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def supervise(self, delay: float) -> None:
        """Notice an exit (once) and restart when due, within the restart budget."""
        now = time.monotonic()
        if self.given_up or self.alive():
            return
        if self.due is None:
            code = self.proc.returncode if self.proc else None
            how = f"killed by signal {-code}" if code and code < 0 else f"status {code}"
            recent = len(self.starts) == RESTARTS_PER_MINUTE and now - self.starts[0] < 60
            if delay <= 0 or recent:
                why = "--restart-delay 0" if delay <= 0 else \
                    f"{RESTARTS_PER_MINUTE} starts in a minute; see {self.log}"
                print(f"{self.name} exited ({how}); not restarting it ({why})", flush=True)
                self.given_up = True
                return
            print(f"{self.name} exited ({how}; its log: {self.log}); the others keep "
                  f"running; restarting it in {delay:g} s", flush=True)
            self.due = now + delay
        elif now >= self.due:
            self.start()
            print(f"{self.name} restarted (pid {self.proc.pid})", flush=True)

    def stop(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)

    def wait(self) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def wait_until(check, deadline: float, step: float = 0.1) -> bool:
    """Poll ``check()`` until it is true (True) or ``deadline`` (monotonic) passes."""
    while time.monotonic() < deadline:
        try:
            if check():
                return True
        except OSError:
            pass
        time.sleep(step)
    return False


def http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2):
        return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--port", type=int, default=7711)
    ap.add_argument("--dir", default=str(ROOT / "var" / "cluster"))
    ap.add_argument("--wait", type=float, default=20.0, help="seconds to wait for the join")
    ap.add_argument("--web", type=int, default=None, metavar="PORT",
                    help="also start disque-web (API, dashboard, /metrics) on this port")
    ap.add_argument("--worker", default=None, metavar="MODULE:FUNCTION",
                    help="also start a disque-worker running this handler (imported from "
                         "the current directory or PYTHONPATH)")
    ap.add_argument("--worker-queues", default="default", metavar="Q1,Q2",
                    help="the worker's queues (the HTTP API's logical queues: every "
                         "priority of each)")
    ap.add_argument("--restart-delay", type=float, default=10.0, metavar="SECONDS",
                    help="start a process that exited again after this long (0: never)")
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
    base = Path(args.dir)
    # the user's directory on the path: `--worker myworker:handle` finds ./myworker.py
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT / "src"), os.getcwd(), *filter(None, [os.environ.get("PYTHONPATH")])]))
    seeds = ",".join(f"127.0.0.1:{p}" for p in ports)
    children: list[Child] = []

    def stop(signum, frame):  # `kill` or a closed terminal stops the nodes as Ctrl-C does
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    try:
        for p in ports:
            d = base / str(p)
            d.mkdir(parents=True, exist_ok=True)
            children.append(Child(f"node {p}", [sys.executable, "-m", "disquepy.server.main",
                                                "--port", str(p)], d, d / "disque.log", env))
            children[-1].start()
        deadline = time.monotonic() + args.wait
        for p in ports:
            if not wait_until(lambda p=p: command(p, "PING").startswith(b"+PONG"), deadline):
                print(f"node on port {p} did not start; see {base}/{p}/disque.log")
                return 1
        for p in ports[1:]:
            command(ports[0], f"CLUSTER MEET 127.0.0.1 {p}")
        joined = f"cluster_reachable_nodes:{len(ports) - 1}"
        if not wait_until(lambda: all(joined in command(p, "CLUSTER INFO").decode("latin-1")
                                      for p in ports), deadline, 0.2):
            print("the nodes did not all see each other in time:")
            print("\n".join(command(p, "CLUSTER INFO").decode("latin-1") for p in ports))
            return 1
        if args.web is not None:
            children.append(Child("disque-web", [sys.executable, "-m", "disquepy.web",
                                                 "--port", str(args.web), "--nodes", seeds],
                                  base, base / f"web-{args.web}.log", env))
            children[-1].start()
            if not wait_until(lambda: http_ok(f"http://127.0.0.1:{args.web}/healthz"),
                              deadline + 30) or not children[-1].alive():
                print(f"disque-web did not start; see {children[-1].log}")
                return 1
        if args.worker is not None:
            children.append(Child("worker", [sys.executable, "-m", "disquepy.worker",
                                             args.worker, "--queues", args.worker_queues,
                                             "--nodes", seeds, "--concurrency", "4"],
                                  base, base / "worker.log", env))
            children[-1].start()
        what = (f"cluster of {len(ports)} nodes up on ports {', '.join(map(str, ports))}"
                if len(ports) > 1 else f"node up on port {ports[0]}")
        print(f"{what} (bus on port+10000); logs in {base}. Ctrl-C to stop.")
        if args.web is not None:
            url = f"http://127.0.0.1:{args.web}"
            print(f"dashboard: {url}/   API docs: {url}/docs   metrics: {url}/metrics")
        if args.worker is not None:
            print(f"worker: {args.worker} on {args.worker_queues} (every priority), log in "
                  f"{base}/worker.log; your own handler: make run HANDLER=module:function")
        if args.web is not None:
            print(f"try: curl -X POST {url}/jobs -H 'Content-Type: application/json' "
                  """-d '{"payload": {"msg": "urgent"}, "priority": "high"}'""")
        else:
            print(f"try: redis-cli -p {ports[0]} ADDJOB q hello 0  then  "
                  f"redis-cli -p {ports[-1]} GETJOB FROM q")
        sys.stdout.flush()
        while any(c.alive() or not c.given_up for c in children):
            for c in children:
                c.supervise(args.restart_delay)
            time.sleep(0.2)
        print("every process exited; stopping")
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        for c in children:
            c.stop()
        for c in children:
            c.wait()


if __name__ == "__main__":
    sys.exit(main())
