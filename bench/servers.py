"""The one place the benchmarks start servers and drive load.

- ``Fleet``: starts our node, real C Disque (the anchor), Redis, and 3-node clusters of
  ours and of C Disque, each process in its own scratch directory on free loopback
  ports (port + 10000, the cluster bus, free too); stops every one of them on exit,
  also on Ctrl-C (and on SIGTERM once ``stop_on_sigterm()`` is installed).
- ``loadgen()``: one run of bench/loadgen (C, epoll; built here when missing or stale),
  with the server CPU and the generator's own CPU over the run.
- ``alternate()``: sides measured in alternating rounds of the same run; each side keeps
  its median, and a ratio is the median of the rounds' ratios (the machine's speed
  drifts within minutes: only runs of the same minutes are compared).

Imported by bench/run.py, bench/spark.py and bench/client.py; imports none of them.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import redis

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT / "tests"))
from support import free_port  # noqa: E402  (tests/support.py: a port with port+10000 free)

LOADGEN_SRC = BENCH / "loadgen.c"
LOADGEN = BENCH / "loadgen"
BODY_SIZE = 16
REMEET_S = 3.0  # Fleet.cluster meets again a node node 0 does not list by then
# C Disque 1.0-rc1 beside the checkout (../shared/anchors/...), or beside its parent
# (a git worktree one level down); DISQUE_C=/path overrides.
ANCHOR = Path("shared/anchors/disque/disque-server")


def find_disque_c() -> Path | None:
    env = os.environ.get("DISQUE_C")
    if env:
        return Path(env) if os.access(env, os.X_OK) else None
    for base in (ROOT.parent, ROOT.parent.parent):
        if os.access(base / ANCHOR, os.X_OK):
            return base / ANCHOR
    return None


class HarnessError(RuntimeError):
    """Something prevented a benchmark from running (not a slow result)."""


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def argv_for(kind: str, port: int, workdir: Path, extra: list[str]) -> list[str]:
    """The command line of one server: kind is ours, c (C Disque), floor or redis."""
    if kind == "ours":
        return [sys.executable, "-m", "disquepy.server.main", "--port", str(port), *extra]
    if kind == "c":
        exe = find_disque_c()
        if exe is None:
            raise HarnessError("C Disque not found")
        return [str(exe), "--port", str(port), "--dir", str(workdir), "--appendonly", "no",
                *extra]
    if kind == "floor":  # bench/floor.py: a do-nothing uvloop server, the shell's floor
        return [sys.executable, str(BENCH / "floor.py"), "--port", str(port)]
    if kind == "redis":
        return ["redis-server", "--port", str(port), "--dir", str(workdir), "--save", "",
                "--appendonly", "no", *extra]
    raise ValueError(kind)


class Server:
    """One server process, in its own process group and scratch directory."""

    def __init__(self, kind: str, name: str, workdir: Path, extra: list[str],
                 src: Path | None = None) -> None:
        self.kind, self.name, self.workdir = kind, name, workdir
        self.src = src or ROOT / "src"  # ours: the package tree it runs (an A/B's other side)
        self.port = free_port()
        self.argv = argv_for(kind, self.port, workdir, extra)
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 20.0) -> Server:
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONPATH=str(self.src))
        with open(self.workdir / "server.log", "wb") as out:
            try:
                self.proc = subprocess.Popen(self.argv, cwd=self.workdir, stdout=out,
                                             stderr=subprocess.STDOUT, env=env,
                                             stdin=subprocess.DEVNULL, start_new_session=True)
            except OSError as e:
                raise HarnessError(f"cannot start {self.name}: {e}") from e
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise HarnessError(f"{self.name} exited with {self.proc.returncode} at start:"
                                   f"\n{self.log_tail()}")
            with contextlib.suppress(redis.RedisError, OSError):
                if self.client(timeout=1).ping():
                    return self
            time.sleep(0.05)
        raise HarnessError(f"{self.name} did not answer PING in {timeout:.0f} s:\n"
                           f"{self.log_tail()}")

    def client(self, timeout: float = 30.0) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, protocol=2,
                           socket_timeout=timeout)

    def call(self, *args):
        c = self.client()
        try:
            return c.execute_command(*args)
        finally:
            c.close()

    def info_int(self, section: str, field: str) -> int:
        return int(self.call("INFO", section)[field])

    def flush(self) -> None:
        self.call(*(("FLUSHALL",) if self.kind == "redis" else ("DEBUG", "FLUSHALL")))

    def log_tail(self, n: int = 10) -> str:
        try:
            lines = (self.workdir / "server.log").read_text(errors="replace").splitlines()
        except OSError:
            return "    (no log)"
        return "\n".join("    " + ln for ln in lines[-n:])

    def rss(self) -> int:
        """Resident bytes (VmRSS)."""
        assert self.proc is not None
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def cpu(self) -> float:
        """User + system CPU seconds of the process (all its threads) so far."""
        user, system = self.cpu_split()
        return user + system

    def cpu_split(self) -> tuple[float, float]:
        """(user, system) CPU seconds of the process (all its threads) so far: user is
        the work (ours: Python and the core; the syscalls' share is system)."""
        assert self.proc is not None
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        return int(fields[11]) / tick, int(fields[12]) / tick

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL it if it lingers."""
        if self.proc is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=5)
                break
            except subprocess.TimeoutExpired:
                continue
        self.proc = None


class Fleet:
    """Every server of a run; all are stopped when the ``with`` block ends, however."""

    def __init__(self, scratch: Path | None = None) -> None:
        self.own_scratch = scratch is None
        self.scratch = scratch or Path(tempfile.mkdtemp(prefix="disquepy-bench-"))
        self.servers: list[Server] = []

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc) -> None:
        for s in reversed(self.servers):
            s.stop()
        self.servers.clear()
        if self.own_scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def start(self, kind: str, extra: list[str] | tuple[str, ...] = (),
              src: Path | None = None) -> Server:
        name = f"{kind}{len(self.servers)}"
        for attempt in range(3):  # a port can be taken between the check and the bind
            s = Server(kind, name, self.scratch / f"{name}-{attempt}", list(extra), src)
            self.servers.append(s)
            try:
                return s.start()
            except HarnessError as e:
                s.stop()
                self.servers.remove(s)
                if attempt == 2 or "in use" not in str(e).lower():
                    raise
        raise AssertionError("unreachable")

    def cluster(self, kind: str, n: int = 3, extra: list[str] | tuple[str, ...] = (),
                timeout: float = 30.0, meet_ports: list[int] | None = None,
                per_node: list[list[str]] | None = None, src: Path | None = None
                ) -> list[Server]:
        """n nodes joined by CLUSTER MEET; ready when HELLO on each lists n nodes, all
        with priority 1 (reachable). ``per_node``: arguments of each node on top of
        ``extra``; ``meet_ports``: the port each is met at (default its port; with
        ``tls-cluster``, its ``tls-port``); ``src``: as for start()."""
        nodes = [self.start(kind, [*extra, *(per_node[i] if per_node else [])], src)
                 for i in range(n)]
        ports = meet_ports or [s.port for s in nodes]
        for port in ports[1:]:
            nodes[0].call("CLUSTER", "MEET", "127.0.0.1", port)
        deadline = time.monotonic() + timeout
        remeet = time.monotonic() + REMEET_S
        hellos: list = []
        while time.monotonic() < deadline:
            hellos = [s.call("HELLO") for s in nodes]
            if all(len(h) == 2 + n and all(e[3] in (b"1", 1) for e in h[2:]) for h in hellos):
                return nodes
            if time.monotonic() >= remeet:
                # a MEET's handshake that times out (a loaded host) is dropped, not
                # retried, by C Disque as by Redis Cluster: meet who node 0 lacks again
                known = {e[0] for e in hellos[0][2:]}
                for h, port in zip(hellos[1:], ports[1:], strict=True):
                    if h[1] not in known:
                        nodes[0].call("CLUSTER", "MEET", "127.0.0.1", port)
                remeet = time.monotonic() + REMEET_S
            time.sleep(0.1)
        seen = "; ".join(f"{s.name}: " + ", ".join(f"{_text(e[0])[:8]} prio {_text(e[3])}"
                                                   for e in h[2:])
                         for s, h in zip(nodes, hellos, strict=False))  # (none: no time)
        raise HarnessError(f"{kind} cluster did not converge in {timeout:.0f} s ({seen})")


def _text(v: object) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def tree_cpu(pid: int) -> float:
    """CPU seconds of process ``pid`` and every live descendant (user + system, and the
    children each has waited for: RQ's per-job forks)."""
    total = 0.0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")
            for t in os.listdir(f"/proc/{p}/task"):
                todo += [int(c) for c in
                         Path(f"/proc/{p}/task/{t}/children").read_text().split()]
        except (OSError, ValueError):
            continue
    return total


def stop_on_sigterm() -> None:
    """SIGTERM raises KeyboardInterrupt, so every ``Fleet`` stops its servers."""
    def handler(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if inherited ignored


# ----------------------------------------------------------------------- load


def build_loadgen() -> None:
    if LOADGEN.exists() and LOADGEN.stat().st_mtime >= LOADGEN_SRC.stat().st_mtime:
        return
    cmd = ["gcc", "-O2", "-Wall", "-o", str(LOADGEN), str(LOADGEN_SRC)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise HarnessError("loadgen build failed:\n" + r.stderr)


def loadgen_argv(ports: list[int], mode: str, conns: int, pipeline: int, requests: int,
                 queue: str = "q", args: tuple[str, ...] = (), addjob_timeout: int = 0,
                 max_seconds: float = 60.0, group: str | None = None) -> list[str]:
    cmd = [str(LOADGEN), "--ports", ",".join(map(str, ports)), "--mode", mode,
           "--conns", str(conns), "--pipeline", str(pipeline), "--requests", str(requests),
           "--queue", queue, "--body-size", str(BODY_SIZE), "--max-seconds", str(max_seconds),
           "--addjob-timeout", str(addjob_timeout), "--json"]
    if group is not None:  # qget, xread: connection i reads as the i-th (mod n) group
        cmd += ["--group", group]
    for a in args:
        cmd += ["--arg", a]
    return cmd


def loadgen(servers: list[Server], mode: str, conns: int, pipeline: int, requests: int,
            **kw) -> dict:
    """One loadgen run against ``servers`` (connections spread round-robin). Adds
    ``server_cpu_us`` (server CPU per op, all servers), ``server_user_us`` (its user
    part), ``gen_busy`` (the generator's CPU / elapsed: near 1.0, the generator bounds
    the rate) and ``problem``."""
    argv = loadgen_argv([s.port for s in servers], mode, conns, pipeline, requests, **kw)
    split0 = [s.cpu_split() for s in servers]
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    try:
        r = subprocess.run(argv, capture_output=True, text=True,
                           timeout=kw.get("max_seconds", 60.0) + 30)
        rep = json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else None
        why = (r.stderr.strip() or f"loadgen exited with {r.returncode}").splitlines()[-1]
    except subprocess.TimeoutExpired:
        rep, why = None, "loadgen did not exit in time"
    wall = time.monotonic() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    split1 = [s.cpu_split() for s in servers]
    if rep is None:
        return {"ops": 0, "ops_per_sec": 0.0, "problem": why, "argv": argv}
    ops = rep["ops"] or 1
    user = sum(b[0] - a[0] for a, b in zip(split0, split1, strict=True))
    system = sum(b[1] - a[1] for a, b in zip(split0, split1, strict=True))
    rep["server_cpu_us"] = (user + system) / ops * 1e6
    rep["server_user_us"] = user / ops * 1e6
    gen = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    rep["gen_busy"] = gen / max(wall, 1e-9)
    probs = []
    if rep.get("errors"):
        probs.append(f"{rep['errors']} errors, first: {rep.get('first_error', '')!r}")
    if rep.get("timed_out"):
        probs.append("stopped by --max-seconds")
    if not rep.get("complete"):
        probs.append(f"{rep['ops']} of {requests} done")
    rep["problem"] = "; ".join(probs)
    rep["argv"] = argv
    return rep


def alternate(rounds: int, sides: dict[str, Callable[[], dict]]) -> dict[str, list[dict]]:
    """Run every side once per round, in turn; return each side's reports."""
    out: dict[str, list[dict]] = {k: [] for k in sides}
    for _ in range(rounds):
        for k, fn in sides.items():
            out[k].append(fn())
    return out


def median_rate(reps: list[dict]) -> float:
    return statistics.median(r["ops_per_sec"] for r in reps)


def median_ratio(a: list[dict], b: list[dict]) -> float | None:
    """The median of the rounds' ratios a/b."""
    rr = [x["ops_per_sec"] / y["ops_per_sec"] for x, y in zip(a, b, strict=True)
          if y["ops_per_sec"]]
    return statistics.median(rr) if rr else None
