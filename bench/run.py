#!/usr/bin/env python3
"""Benchmark disquepy against Redis, in one run.

Starts a fresh redis-server and our server (both on free loopback ports),
drives them with bench/loadgen (a small C epoll load generator), and prints,
per workload, our throughput, Redis's and the ratio, plus PASS/FAIL lines for
the project's performance targets:

    produce       ADDJOB q <16-byte body> 0              vs  LPUSH q <body>
    consume       GETJOB NOHANG FROM q, then ACKJOB <id> vs  RPOP q
                  (two round trips per job: the issue's definition)
                  (both with 1 and 50 connections, unpipelined and 16-deep pipelined;
                   the consume queues are preloaded first so they never run dry)
    consume-1rtt  ACKJOB <id of job N> + GETJOB NOHANG FROM q (for job N+1) in one
                  write, one round trip per job      vs  RPOP q
                  (50 connections, unpipelined and 16 deep; no target)
    ping          PING against ours, Redis and a "floor" server (bench/floor_server.py,
                  a bare uvloop protocol that parses requests and sends canned
                  replies: the most any Python asyncio server can do here),
                  50 connections, unpipelined and 16 deep; no target
    (the 50-connection unpipelined rows of produce and consume also run against
     the floor server: the ratio it reaches is the ceiling for any Python server)
    memory        resident bytes per queued 16-byte job (VmRSS delta over 1M jobs)
    cluster       a 3-node disquepy cluster on loopback (bench/cluster.py): ADDJOB
                  REPLICATE 3 sync/async vs a 1-node REPLICATE 1 baseline, federation
                  latency, producer-on-A/consumer-on-B pipeline (no Redis side)
    spark         the Spark connector against the plain client (bench/spark.py, run
                  with the venv python: needs PySpark and Java): batch write and
                  stream read, with a server-less floor for the read
    aof           the append-only file (bench/aof.py): ADDJOB with 50 connections on
                  four fresh servers (AOF off, appendfsync no/everysec/always), raw
                  fdatasync latency, and the BGREWRITEAOF pause seen by a PING probe
                  (no Redis side)

Targets: produce and consume with 50 unpipelined connections >= 0.5x Redis; pipelined
produce (16 deep, 50 conns) >= 100k jobs/s; <= 500 bytes resident per job; and the
cluster targets (see bench/cluster.py); the aof targets (see bench/aof.py).

Examples:
    .venv/bin/python bench/run.py --quick
    .venv/bin/python bench/run.py --only produce,memory --json bench/results/run.json
    .venv/bin/python bench/run.py --quick --only ping,consume
    .venv/bin/python bench/run.py --only cluster
    .venv/bin/python bench/run.py --only aof
    .venv/bin/python bench/run.py --markdown        # table for docs/PERFORMANCE.md
    .venv/bin/python bench/run.py --quick --ours-cmd '.venv/bin/python bench/fake_disque.py'

Stdlib only.  Servers are always stopped at the end (also on Ctrl-C/SIGTERM).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __name__ == "__main__":  # bench/cluster.py imports this module as "run": share it
    sys.modules.setdefault("run", sys.modules["__main__"])

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
LOADGEN_SRC = BENCH / "loadgen.c"
LOADGEN = BENCH / "loadgen"
DEFAULT_OURS = str(ROOT / ".venv" / "bin" / "disque-server")
_VENV_PY = ROOT / ".venv" / "bin" / "python"


def venv_python() -> Path:
    """The project's virtualenv python (uvloop, the package), else this one."""
    return _VENV_PY if _VENV_PY.exists() else Path(sys.executable)


DEFAULT_FLOOR = shlex.join([str(venv_python()), str(BENCH / "floor_server.py")])

# (connections, pipeline depth) for the throughput workloads.
SHAPES = [(1, 1), (1, 16), (50, 1), (50, 16)]
SHAPES_50 = [(50, 1), (50, 16)]
# workload -> (our loadgen mode, Redis loadgen mode, preload modes or None, shapes)
WORKLOADS = {
    "produce": ("addjob", "lpush", None, SHAPES),
    "consume": ("getack", "rpop", ("addjob", "lpush"), SHAPES),
    "consume-1rtt": ("getack1", "rpop", ("addjob", "lpush"), SHAPES_50),
}
# Workloads with PASS/FAIL targets (the others are for information only).
TARGETED = ("produce", "consume")
# One line per workload, printed above the table.
LEGEND = {
    "produce": "ADDJOB q <16-byte body> 0  vs  LPUSH q <body>",
    "consume": "GETJOB NOHANG FROM q, then ACKJOB <id>: 2 round trips per job "
    "(the issue's definition; targets apply)  vs  RPOP q",
    "consume-1rtt": "ACKJOB <id of job N> + GETJOB for job N+1 in one write: "
    "1 round trip per job (no target)  vs  RPOP q",
}
FLOOR_LINE = ("floor = bare uvloop protocol, requests parsed, canned replies: the most any "
              "Python asyncio server can do here")
# --only names; "consume" selects both consume rows.
ONLY_NAMES = ("produce", "consume", "consume-1rtt", "ping", "memory", "cluster", "aof", "spark")
ONLY_ALIASES = {"consume": {"consume", "consume-1rtt"}}
BODY_SIZE = 16

# The project's targets.
TARGET_RATIO = 0.5  # produce/consume with 50 conns, as a fraction of Redis
TARGET_PIPELINED_PRODUCE = 100_000  # jobs/s, 16 deep, 50 conns
TARGET_BYTES_PER_JOB = 500


class HarnessError(RuntimeError):
    """Something prevented the benchmark itself from running."""


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# loadgen
# --------------------------------------------------------------------------


def build_loadgen() -> None:
    """(Re)build bench/loadgen when missing or older than its source."""
    if LOADGEN.exists() and LOADGEN.stat().st_mtime >= LOADGEN_SRC.stat().st_mtime:
        return
    cmd = ["gcc", "-O2", "-Wall", "-o", str(LOADGEN), str(LOADGEN_SRC)]
    log("building loadgen: " + " ".join(cmd))
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise HarnessError("loadgen build failed:\n" + r.stderr)


def loadgen_cmd(
    port: int,
    mode: str,
    conns: int,
    pipeline: int,
    requests: int,
    queue: str,
    max_seconds: float,
    *,
    ports: list[int] | None = None,
    extra: tuple[str, ...] | list[str] = (),
    addjob_timeout: int | None = None,
    max_empty: int | None = None,
) -> list[str]:
    """The loadgen command line for one run.

    ports: spread the connections round-robin over these ports (--ports)
    instead of `port`; extra: arguments appended to ADDJOB, or put in place
    of NOHANG in GETJOB (--arg); addjob_timeout: ADDJOB's <ms-timeout>
    (default 0); max_empty: --max-empty (default 3).
    """
    cmd = [
        str(LOADGEN),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    if ports:
        cmd += ["--ports", ",".join(str(p) for p in ports)]
    for a in extra:
        cmd += ["--arg", a]
    if addjob_timeout is not None:
        cmd += ["--addjob-timeout", str(addjob_timeout)]
    if max_empty is not None:
        cmd += ["--max-empty", str(max_empty)]
    cmd += [
        "--mode",
        mode,
        "--conns",
        str(conns),
        "--pipeline",
        str(pipeline),
        "--requests",
        str(requests),
        "--queue",
        queue,
        "--body-size",
        str(BODY_SIZE),
        "--max-seconds",
        str(max_seconds),
        "--json",
    ]
    return cmd


def run_loadgen(
    port: int,
    mode: str,
    conns: int,
    pipeline: int,
    requests: int,
    queue: str,
    max_seconds: float,
    **opts,
) -> dict:
    """Run one loadgen pass and return its JSON report (opts: see loadgen_cmd).

    A loadgen that fails outright (e.g. connection refused) is turned into a
    report with ops=0 and the failure as its first error, so one broken
    workload does not stop the whole benchmark.
    """
    cmd = loadgen_cmd(port, mode, conns, pipeline, requests, queue, max_seconds, **opts)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=max_seconds + 30)
    except subprocess.TimeoutExpired:
        return failed_report(mode, conns, pipeline, requests, "loadgen did not exit in time")
    return parse_loadgen_output(r.returncode, r.stdout, r.stderr, mode, conns, pipeline, requests)


def parse_loadgen_output(
    rc: int, stdout: str, stderr: str, mode: str, conns: int, pipeline: int, requests: int
) -> dict:
    """A loadgen's JSON report, or a failed report carrying its last stderr line."""
    if rc != 0 or not stdout.strip():
        msg = (stderr.strip() or f"loadgen exited with {rc}").splitlines()[-1]
        return failed_report(mode, conns, pipeline, requests, msg)
    return json.loads(stdout)


def failed_report(mode: str, conns: int, pipeline: int, requests: int, why: str) -> dict:
    return {
        "mode": mode,
        "conns": conns,
        "pipeline": pipeline,
        "requests": requests,
        "ops": 0,
        "replies": 0,
        "elapsed_s": 0.0,
        "ops_per_sec": 0.0,
        "lat_us": {"p50": 0, "p99": 0, "max": 0, "mean": 0},
        "errors": 1,
        "first_error": why,
        "null_replies": 0,
        "conn_failures": 0,
        "drained": False,
        "timed_out": False,
        "complete": False,
        "failed": True,
    }


def problems(rep: dict) -> str:
    """A short description of what went wrong in a loadgen report ('' if fine)."""
    out = []
    if rep.get("errors"):
        out.append(f"{rep['errors']} errors, first: {rep.get('first_error', '')!r}")
    if rep.get("timed_out"):
        out.append("stopped by --max-seconds (partial)")
    if rep.get("drained"):
        out.append("queue ran dry / no jobs returned")
    if rep.get("mode") == "getack1" and rep.get("received", 0) > rep.get("ops", 0):
        out.append(f"{rep['received'] - rep['ops']} jobs received but not acked")
    if not rep.get("complete") and not out:
        out.append(f"only {rep.get('ops', 0)} of {rep.get('requests')} done")
    return "; ".join(out)


# --------------------------------------------------------------------------
# Server processes
# --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def resp_ping(port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            return s.recv(64).startswith(b"+")
    except OSError:
        return False


class Server:
    """A server process in its own session/process group and scratch dir."""

    def __init__(self, name: str, argv: list[str], port: int, workdir: Path) -> None:
        self.name, self.argv, self.port = name, argv, port
        self.workdir = workdir
        self.logpath = workdir / f"{name}.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float) -> None:
        log(f"starting {self.name}: {shlex.join(self.argv)}")
        with open(self.logpath, "wb") as logf:
            try:
                self.proc = subprocess.Popen(
                    self.argv,
                    cwd=self.workdir,
                    stdout=logf,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            except OSError as e:
                raise HarnessError(f"cannot start {self.name} ({self.argv[0]}): {e}") from e
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise HarnessError(
                    f"{self.name} exited with code {self.proc.returncode} "
                    f"during startup; log tail:\n{self.log_tail()}"
                )
            if resp_ping(self.port):
                return
            time.sleep(0.1)
        raise HarnessError(
            f"{self.name} did not answer PING on port {self.port} within "
            f"{timeout:.0f}s; log tail:\n{self.log_tail()}"
        )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n: int = 15) -> str:
        try:
            lines = self.logpath.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join("    " + ln for ln in lines[-n:]) or "    (empty log)"

    def rss_bytes(self) -> int:
        """VmRSS of the server and all its descendants (a wrapper may fork)."""
        assert self.proc is not None
        return sum(vmrss(p) for p in [self.proc.pid, *descendants(self.proc.pid)])

    def stop(self) -> None:
        """SIGTERM the server's process group, SIGKILL it if it lingers."""
        if self.proc is None:
            return
        pgid = self.proc.pid  # start_new_session: the group is ours alone
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=wait)
                # The leader is gone; make sure no child of it survives.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)
                break
            except subprocess.TimeoutExpired:
                continue
        self.proc = None


def vmrss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


class Servers:
    """Starts Redis and ours together; always stops both."""

    def __init__(self, args, scratch: Path, tag: str, floor: bool = False) -> None:
        ports: set[int] = set()
        while len(ports) < 3:
            ports.add(free_port())
        rport, oport, fport = sorted(ports)
        rdir, odir = scratch / f"redis-{tag}", scratch / f"ours-{tag}"
        rdir.mkdir()
        odir.mkdir()
        redis_argv = [
            *absolutize(args.redis_cmd),
            "--port",
            str(rport),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(rdir),
        ]
        ours_argv = [*absolutize(args.ours_cmd), "--port", str(oport)]
        self.redis = Server("redis", redis_argv, rport, rdir)
        self.ours = Server("ours", ours_argv, oport, odir)
        self.floor: Server | None = None
        if floor:
            fdir = scratch / f"floor-{tag}"
            fdir.mkdir()
            floor_argv = [*absolutize(args.floor_cmd), "--port", str(fport)]
            self.floor = Server("floor", floor_argv, fport, fdir)
        self.timeout = args.startup_timeout

    def all(self) -> list[Server]:
        return [s for s in (self.redis, self.ours, self.floor) if s is not None]

    def __enter__(self) -> Servers:
        try:
            for s in self.all():
                s.start(self.timeout)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for s in reversed(self.all()):
            s.stop()


# --------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------


def bench_throughput(args, srv: Servers, workload: str) -> list[dict]:
    """Run one workload in each of its (conns, pipeline) shapes against both servers."""
    ours_mode, redis_mode, preload, shapes = WORKLOADS[workload]
    sides = [
        ("ours", srv.ours, ours_mode, preload and preload[0]),
        ("redis", srv.redis, redis_mode, preload and preload[1]),
    ]
    rows = []
    for conns, pipe in shapes:
        # the targeted shape also runs against the floor server: the ceiling of any
        # Python RESP server on this machine for the same requests
        floor = srv.floor is not None and (conns, pipe) == (50, 1)
        extra = [("floor", srv.floor, ours_mode, preload and preload[0])] if floor else []
        row = measure(args, workload, sides + extra, conns, pipe)
        if floor:
            row["floor_ratio"] = ratio(row["floor"]["ops_per_sec"], row["redis"]["ops_per_sec"])
        print_row(row)
        rows.append(row)
    return rows


def bench_ping(args, srv: Servers) -> list[dict]:
    """PING against ours, Redis and the floor server, 50 connections."""
    assert srv.floor is not None
    sides = [
        (name, server, "ping", None)
        for name, server in (("ours", srv.ours), ("redis", srv.redis), ("floor", srv.floor))
    ]
    rows = []
    for conns, pipe in SHAPES_50:
        row = measure(args, "ping", sides, conns, pipe)
        row["floor_ratio"] = ratio(row["floor"]["ops_per_sec"], row["redis"]["ops_per_sec"])
        print_ping_row(row)
        rows.append(row)
    return rows


def measure(args, workload: str, sides: list, conns: int, pipe: int) -> dict:
    """One (conns, pipeline) shape of a workload against every side.

    sides: (name, server, loadgen mode, preload mode or None).  With --repeat K
    the servers take turns K times and the run with the median throughput is
    kept for each (the machine may be noisy).
    """
    n = args.requests
    queue = f"bench:{workload}:c{conns}:p{pipe}"
    row: dict = {"workload": workload, "conns": conns, "pipeline": pipe, "requests": n}
    runs: dict[str, list[dict]] = {name: [] for name, *_ in sides}
    for _ in range(args.repeat):
        for side, server, mode, pmode in sides:
            if pmode:
                # Fill the queue with margin so consumption never runs dry.
                amount = n + conns * pipe * 2
                pre = run_loadgen(server.port, pmode, 50, 16, amount, queue, args.max_seconds)
                if pre["ops"] < amount:
                    row[f"{side}_preload_problem"] = (
                        f"preload ({pmode}) stored {pre['ops']} of {amount}: {problems(pre)}"
                    )
            rep = run_loadgen(server.port, mode, conns, pipe, n, queue, args.max_seconds)
            if not server.alive():
                rep["errors"] = rep.get("errors", 0) + 1
                rep["first_error"] = rep.get("first_error") or (
                    f"{server.name} server died; log tail:\n{server.log_tail()}"
                )
            runs[side].append(rep)
    for side in runs:
        ordered = sorted(runs[side], key=lambda r: r["ops_per_sec"])
        row[side] = dict(ordered[len(ordered) // 2])
        row[side]["runs_ops_per_sec"] = [r["ops_per_sec"] for r in runs[side]]
        # Errors anywhere count, not only in the median run.
        bad = next((r for r in runs[side] if r.get("errors")), None)
        if bad and not row[side].get("errors"):
            row[side]["errors"] = bad["errors"]
            row[side]["first_error"] = bad["first_error"]
    row["ratio"] = ratio(row["ours"]["ops_per_sec"], row["redis"]["ops_per_sec"])
    return row


def bench_memory(args, scratch: Path) -> dict:
    """Resident bytes per queued 16-byte job, on fresh servers."""
    jobs = args.memory_jobs
    res: dict = {"jobs": jobs, "body_size": BODY_SIZE}
    with Servers(args, scratch, "memory") as srv:
        for side, server, mode in (("ours", srv.ours, "addjob"), ("redis", srv.redis, "lpush")):
            time.sleep(0.5)  # let startup allocations settle
            before = server.rss_bytes()
            rep = run_loadgen(
                server.port, mode, 50, 16, jobs, "bench:memory", max(args.max_seconds, 120)
            )
            time.sleep(1.0)
            after = server.rss_bytes()
            stored = rep["ops"]
            res[side] = {
                "rss_before": before,
                "rss_after": after,
                "jobs_stored": stored,
                "bytes_per_job": (after - before) / stored if stored else None,
                "problem": problems(rep),
                "load_ops_per_sec": rep["ops_per_sec"],
            }
    o, r = res["ours"]["bytes_per_job"], res["redis"]["bytes_per_job"]
    res["ratio"] = o / r if o is not None and r else None
    return res


def sub_bench(name: str):
    """The runner of the benchmark kept in its own module: (args, scratch) -> results."""
    if name == "spark":
        return bench_spark
    import aof  # bench/aof.py and bench/cluster.py import this module back as "run"
    import cluster

    return {"aof": aof.bench_aof, "cluster": cluster.bench_cluster}[name]


def bench_spark(args, scratch: Path) -> dict:
    """bench/spark.py in a subprocess (PySpark and its JVM stay out of this process);
    its output goes straight through; its JSON (with its targets) comes back."""
    out = scratch / "spark.json"
    cmd = [str(venv_python()), str(BENCH / "spark.py"),
           "--json", str(out), *(["--quick"] if args.quick else [])]
    print(f"\nspark: {shlex.join(cmd)}", flush=True)
    proc = subprocess.Popen(cmd, cwd=ROOT)
    try:
        rc = proc.wait(timeout=args.spark_timeout)
    except subprocess.TimeoutExpired as e:
        raise HarnessError(f"bench/spark.py did not finish in {args.spark_timeout} s") from e
    finally:
        if proc.poll() is None:  # timed out or interrupted: let it stop its server and JVM
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    if rc != 0 or not out.exists():
        raise HarnessError(f"bench/spark.py exited with status {rc}")
    return json.loads(out.read_text())


def ratio(a: float, b: float) -> float | None:
    return a / b if b else None


# --------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------

HEADER = (
    f"{'workload':<12} {'conns':>5} {'pipe':>4} | {'ours/s':>9} {'p50us':>6} {'p99us':>6} | "
    f"{'redis/s':>9} {'p50us':>6} {'p99us':>6} | {'ratio':>6}"
)
PING_HEADER = (
    f"{'conns':>5} {'pipe':>4} | {'ours/s':>9} {'p50us':>6} {'p99us':>6} | "
    f"{'redis/s':>9} {'p50us':>6} {'p99us':>6} | {'floor/s':>9} {'p50us':>6} {'p99us':>6} | "
    f"{'ours/redis':>10} {'floor/redis':>11}"
)


def fmt_ratio(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}x"


def fmt_side(rep: dict) -> str:
    lat = rep["lat_us"]
    return f"{rep['ops_per_sec']:>9.0f} {lat['p50']:>6.0f} {lat['p99']:>6.0f}"


def print_problems(row: dict, sides: tuple[str, ...]) -> None:
    for side in sides:
        if row.get(f"{side}_preload_problem"):
            print(f"    ! {side}: {row[f'{side}_preload_problem']}")
        p = problems(row[side])
        if p:
            print(f"    ! {side}: {p}", flush=True)


def print_row(row: dict) -> None:
    print(
        f"{row['workload']:<12} {row['conns']:>5} {row['pipeline']:>4} | "
        f"{fmt_side(row['ours'])} | {fmt_side(row['redis'])} | {fmt_ratio(row['ratio']):>6}"
        + (f" | floor {row['floor']['ops_per_sec']:.0f}/s = {fmt_ratio(row['floor_ratio'])}"
           if "floor" in row else ""),
        flush=True,
    )
    print_problems(row, ("ours", "redis", "floor") if "floor" in row else ("ours", "redis"))


def print_legend(workloads: list[str]) -> None:
    for w in workloads:
        print(f"  {w:<12}  {LEGEND[w]}")
    print()


def print_ping_header() -> None:
    print(f"\nping: PING, ours vs redis vs floor ({FLOOR_LINE})")
    print(PING_HEADER)
    print("-" * len(PING_HEADER), flush=True)


def print_ping_row(row: dict) -> None:
    print(
        f"{row['conns']:>5} {row['pipeline']:>4} | {fmt_side(row['ours'])} | "
        f"{fmt_side(row['redis'])} | {fmt_side(row['floor'])} | "
        f"{fmt_ratio(row['ratio']):>10} {fmt_ratio(row['floor_ratio']):>11}",
        flush=True,
    )
    print_problems(row, ("ours", "redis", "floor"))


def print_memory(mem: dict) -> None:
    print(
        f"\nmemory: resident bytes per queued {mem['body_size']}-byte job "
        f"({mem['jobs']:,} jobs, 50 conns, pipeline 16)"
    )
    for side in ("ours", "redis"):
        m = mem[side]
        bpj = "n/a" if m["bytes_per_job"] is None else f"{m['bytes_per_job']:.1f}"
        print(
            f"  {side:<5}  {bpj:>8} B/job   (RSS {m['rss_before'] / 2**20:.1f} -> "
            f"{m['rss_after'] / 2**20:.1f} MiB, {m['jobs_stored']:,} jobs stored)"
        )
        if m["problem"]:
            print(f"    ! {side}: {m['problem']}")
    print(f"  ratio  {fmt_ratio(mem['ratio'])} (ours / redis)")


def evaluate_targets(rows: list[dict], mem: dict | None) -> list[dict]:
    """PASS/FAIL for each project target that this run measured."""
    targets = []

    def ok(rep: dict) -> bool:  # a measurement we trust enough to pass
        return rep["ops"] > 0 and not rep.get("errors") and not rep.get("failed")

    for row in rows:
        if row["conns"] != 50 or row["workload"] not in TARGETED:
            continue
        o = row["ours"]
        # The ratio target is for 50 unpipelined connections (where real Disque is at
        # about 1.0x); pipelined produce has its own absolute target (Disque: ~0.2x).
        if row["pipeline"] == 1:
            name = f"{row['workload']} 50 conns unpipelined >= {TARGET_RATIO}x Redis"
            passed = ok(o) and row["ratio"] is not None and row["ratio"] >= TARGET_RATIO
            note = problems(o)
            fr = row.get("floor_ratio")
            if fr is not None:
                note = "; ".join(x for x in (note, f"ceiling here: the floor server reaches "
                                             f"{fmt_ratio(fr)}") if x)
            targets.append(
                {
                    "name": name,
                    "value": row["ratio"],
                    "pass": passed,
                    "shown": fmt_ratio(row["ratio"]),
                    "note": note,
                    "floor_ratio": fr,
                }
            )
        if row["workload"] == "produce" and row["pipeline"] == 16:
            v = o["ops_per_sec"]
            targets.append(
                {
                    "name": f"produce 50 conns pipeline 16 >= {TARGET_PIPELINED_PRODUCE:,} jobs/s",
                    "value": v,
                    "pass": ok(o) and v >= TARGET_PIPELINED_PRODUCE,
                    "shown": f"{v:,.0f} jobs/s",
                    "note": problems(o),
                }
            )
    if mem is not None:
        v = mem["ours"]["bytes_per_job"]
        targets.append(
            {
                "name": f"<= {TARGET_BYTES_PER_JOB} bytes resident per queued job",
                "value": v,
                "pass": v is not None and v <= TARGET_BYTES_PER_JOB and not mem["ours"]["problem"],
                "shown": "n/a" if v is None else f"{v:.0f} B/job",
                "note": mem["ours"]["problem"],
            }
        )
    return targets


def print_targets(targets: list[dict]) -> None:
    print("\ntargets:")
    if not targets:
        print("  (none for the workloads run)")
    for t in targets:
        note = f"  ({t['note']})" if t["note"] else ""
        print(f"  {'PASS' if t['pass'] else 'FAIL'}  {t['name']}: {t['shown']}{note}")


def markdown(results: dict) -> str:
    m = results["meta"]
    out = [
        f"### Benchmark run {m['date']}",
        "",
        f"- Machine: {m['nproc']} CPUs (`nproc`), {m['cpu']}, {m['os']}",
        f"- Python {m['python']}; {m['redis_version']}",
        f"- Command: `{m['command']}`",
        f"- {m['requests']:,} requests per throughput run"
        + (f", median of {m['repeat']} runs" if m["repeat"] > 1 else "")
        + f"; {BODY_SIZE}-byte bodies; load from bench/loadgen (C, epoll) on the same machine",
        "",
    ]
    if results["rows"]:
        out += [
            "| Workload | Conns | Pipeline | disquepy ops/s | p50 µs | p99 µs "
            "| Redis ops/s | p50 µs | p99 µs | Ratio |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for row in results["rows"]:
            o, r = row["ours"], row["redis"]
            flag = " ⚠" if problems(o) else ""
            out.append(
                f"| {row['workload']} | {row['conns']} | {row['pipeline']} "
                f"| {o['ops_per_sec']:,.0f}{flag} | {o['lat_us']['p50']:.0f} "
                f"| {o['lat_us']['p99']:.0f} | {r['ops_per_sec']:,.0f} "
                f"| {r['lat_us']['p50']:.0f} | {r['lat_us']['p99']:.0f} "
                f"| {fmt_ratio(row['ratio'])} |"
            )
        legend = (
            "produce = ADDJOB vs LPUSH; consume = GETJOB NOHANG, then ACKJOB: two round trips "
            "per job (jobs/s) vs RPOP"
        )
        if any(r["workload"] == "consume-1rtt" for r in results["rows"]):
            legend += (
                "; consume-1rtt = ACKJOB of job N sent with the GETJOB for job N+1 in one write: "
                "one round trip per job (jobs/s, no target) vs RPOP"
            )
        out += ["", legend + ".", ""]
        floors = [r for r in results["rows"] if "floor" in r]
        if floors:
            out += [
                "Floor server (bench/floor_server.py: requests parsed, canned replies, nothing "
                "else), 50 connections unpipelined, same requests: "
                + ", ".join(f"{r['workload']} {r['floor']['ops_per_sec']:,.0f}/s = "
                            f"{fmt_ratio(r['floor_ratio'])} of Redis" for r in floors)
                + ": the ceiling of any Python asyncio server here.",
                "",
            ]
    if results.get("ping"):
        out += [
            f"PING, 50 connections ({FLOOR_LINE}):",
            "",
            "| Pipeline | disquepy ops/s | p50 µs | p99 µs | Redis ops/s | p50 µs | p99 µs "
            "| floor ops/s | p50 µs | p99 µs | disquepy/Redis | floor/Redis |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for row in results["ping"]:
            cells = []
            for side in ("ours", "redis", "floor"):
                rep, lat = row[side], row[side]["lat_us"]
                flag = " ⚠" if problems(rep) else ""
                cells.append(
                    f"{rep['ops_per_sec']:,.0f}{flag} | {lat['p50']:.0f} | {lat['p99']:.0f}"
                )
            out.append(
                f"| {row['pipeline']} | {' | '.join(cells)} "
                f"| {fmt_ratio(row['ratio'])} | {fmt_ratio(row['floor_ratio'])} |"
            )
        out.append("")
    mem = results.get("memory")
    if mem:

        def b(side):
            v = mem[side]["bytes_per_job"]
            return "n/a" if v is None else f"{v:.0f}"

        out += [
            f"Resident memory per queued {BODY_SIZE}-byte job ({mem['jobs']:,} jobs): "
            f"disquepy {b('ours')} B, Redis {b('redis')} B, ratio {fmt_ratio(mem['ratio'])}.",
            "",
        ]
    cl = results.get("cluster")
    if cl and "error" not in cl:
        import cluster

        out += cluster.markdown(cl)
    elif cl:
        out += [f"Cluster benchmark: error: {cl['error'].splitlines()[0]}", ""]
    ab = results.get("aof")
    if ab and "error" not in ab:
        import aof

        out += aof.markdown(ab)
    elif ab:
        out += [f"AOF benchmark: error: {ab['error'].splitlines()[0]}", ""]
    sp = results.get("spark")
    if sp and "error" not in sp:
        b, r = sp["best"], sp["ratios"]
        out += [
            f"Spark connector (bench/spark.py, {sp['rows']:,} rows/jobs, {sp['conns']} "
            "connections, best round): batch write with keys "
            f"{b['spark_write']:,.0f} vs {b['plain_write_keys']:,.0f} rows/s "
            f"({fmt_ratio(r['write_keys'])}); stream read, default options, "
            f"{b['spark_read_running']:,.0f} vs {b['plain_read']:,.0f} jobs/s "
            f"({fmt_ratio(r['read_running'])}; floor {fmt_ratio(r['floor_running'])}); with "
            f"maxJobsPerTrigger {sp['per_trigger']:,}: {b['spark_read_capped_running']:,.0f} "
            f"({fmt_ratio(r['read_capped_running'])}; floor "
            f"{fmt_ratio(r['floor_capped_running'])}).",
            "",
        ]
    if results["targets"]:
        out += ["| Target | Result | |", "|---|---|---|"]
        for t in results["targets"]:
            out.append(f"| {t['name']} | {t['shown']} | {'PASS' if t['pass'] else 'FAIL'} |")
        out.append("")
    problems_seen = [
        f"- {r['workload']} c{r['conns']} p{r['pipeline']}: {problems(r['ours'])}"
        for r in results["rows"] + (results.get("ping") or [])
        if problems(r["ours"])
    ]
    if problems_seen:
        out += ["⚠ runs with problems:", *problems_seen, ""]
    return "\n".join(out)


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def display_path(p: str) -> str:
    """p relative to the current directory when it lies below it."""
    rel = os.path.relpath(p)
    return p if rel.startswith("..") else rel


def meta(args) -> dict:
    cpu = "unknown CPU"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    try:
        rv = subprocess.run(
            [*shlex.split(args.redis_cmd), "--version"], capture_output=True, text=True, timeout=10
        ).stdout.split()
        redis_version = "Redis " + next(w[2:] for w in rv if w.startswith("v="))
    except (OSError, StopIteration, subprocess.SubprocessError):
        redis_version = "Redis (unknown version)"
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": cpu,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "redis_version": redis_version,
        "command": shlex.join([display_path(sys.executable), *sys.argv]),
        "ours_cmd": args.ours_cmd,
        "floor_cmd": args.floor_cmd if args.only & {*WORKLOADS, "ping"} else None,
        "requests": args.requests,
        "repeat": args.repeat,
    }


def parse_args(argv=None):
    import aof  # bench/aof.py (imports this module back as "run")
    import cluster  # bench/cluster.py (imports this module back as "run")

    ap = argparse.ArgumentParser(
        description="Benchmark disquepy against Redis.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--ours-cmd",
        default=DEFAULT_OURS,
        help="command that starts our server; '--port N' is appended (default: %(default)s)",
    )
    ap.add_argument("--redis-cmd", default="redis-server", help="redis-server binary")
    ap.add_argument(
        "--floor-cmd",
        default=DEFAULT_FLOOR,
        help="command that starts the floor server for the ping workload; '--port N' is "
        "appended (default: %(default)s)",
    )
    ap.add_argument(
        "--quick", action="store_true", help="smoke run: 10k requests per run, 100k jobs for memory"
    )
    ap.add_argument(
        "--requests",
        type=int,
        help="requests (jobs) per throughput run (default 100000, 10000 with --quick)",
    )
    ap.add_argument(
        "--memory-jobs",
        type=int,
        help="jobs for the memory test (default 1000000, 100000 with --quick)",
    )
    ap.add_argument(
        "--only",
        default="produce,consume,ping,memory,cluster,aof,spark",
        help=f"comma-separated subset of {','.join(ONLY_NAMES)} "
        "(consume selects consume and consume-1rtt)",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        help="run each throughput workload K times per server, alternating, "
        "and keep the median (default 1; aof: 3)",
    )
    ap.add_argument(
        "--max-seconds",
        type=float,
        default=60.0,
        help="time bound of each loadgen run (partial results after it)",
    )
    ap.add_argument("--startup-timeout", type=float, default=20.0)
    ap.add_argument("--json", metavar="PATH", help="write all results as JSON to PATH")
    ap.add_argument(
        "--markdown",
        action="store_true",
        help="also print a markdown section for docs/PERFORMANCE.md",
    )
    ap.add_argument("--strict", action="store_true", help="exit 1 if any target FAILs")
    cluster.add_args(ap)
    aof.add_args(ap)
    ap.add_argument(
        "--spark-timeout",
        type=float,
        default=1800.0,
        help="time bound of the spark benchmark, seconds (default 1800)",
    )
    args = ap.parse_args(argv)
    cluster.finish_args(ap, args)
    aof.finish_args(ap, args)  # args.aof_repeat: --repeat, or 3 when not given
    if args.repeat is None:
        args.repeat = 1
    if args.requests is None:
        args.requests = 10_000 if args.quick else 100_000
    if args.memory_jobs is None:
        args.memory_jobs = 100_000 if args.quick else 1_000_000
    args.only = {w.strip() for w in args.only.split(",") if w.strip()}
    unknown = args.only - set(ONLY_NAMES)
    if unknown:
        ap.error(f"--only: unknown workload(s) {', '.join(sorted(unknown))}")
    args.only = set().union(*(ONLY_ALIASES.get(w, {w}) for w in args.only))
    if args.requests <= 0 or args.memory_jobs <= 0 or args.repeat <= 0:
        ap.error("--requests, --memory-jobs and --repeat must be positive")
    return args


def on_sigterm(signum, frame):
    """Turn SIGTERM into KeyboardInterrupt so the finally blocks stop the servers."""
    raise KeyboardInterrupt


def absolutize(cmd: str) -> list[str]:
    """Split a command line; arguments naming existing relative paths become
    absolute, since servers run in their own scratch directory."""
    return [
        os.path.abspath(a) if "/" in a and not a.startswith("-") and Path(a).exists() else a
        for a in shlex.split(cmd)
    ]


def main(argv=None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, on_sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if inherited as ignored
    results: dict = {
        "meta": meta(args),
        "rows": [],
        "ping": [],
        "memory": None,
        "cluster": None,
        "aof": None,
        "spark": None,
        "targets": [],
    }
    sub_failed = False
    scratch = Path(tempfile.mkdtemp(prefix="disquepy-bench-"))
    try:
        build_loadgen()
        needs_redis = args.only & {*WORKLOADS, "ping", "memory"}
        if needs_redis and not shutil.which(shlex.split(args.redis_cmd)[0]):
            raise HarnessError(f"{args.redis_cmd} not found (apt-get install redis-server)")
        throughput = [w for w in WORKLOADS if w in args.only]
        ping = "ping" in args.only
        if throughput or ping:
            with Servers(args, scratch, "throughput", floor=True) as srv:
                floor = f"; floor port {srv.floor.port}" if srv.floor else ""
                print(
                    f"ours: {args.ours_cmd} (port {srv.ours.port}); "
                    f"redis port {srv.redis.port}{floor}; {args.requests:,} requests per run\n"
                )
                if throughput:
                    print_legend(throughput)
                    print(HEADER)
                    print("-" * len(HEADER), flush=True)
                for w in throughput:
                    results["rows"] += bench_throughput(args, srv, w)
                if ping:
                    print_ping_header()
                    results["ping"] = bench_ping(args, srv)
        if "memory" in args.only:
            results["memory"] = bench_memory(args, scratch)
            print_memory(results["memory"])
        results["targets"] = evaluate_targets(results["rows"], results["memory"])
        # the benchmarks in their own modules: each reports its own targets; one that
        # could not run reports that instead, and makes the exit status 2
        for name in ("cluster", "aof", "spark"):
            if name not in args.only:
                continue
            try:
                res = results[name] = sub_bench(name)(args, scratch)
                if res.get("failed"):
                    log(f"\nbench: {name} benchmark: {res['failed']}")
                    sub_failed = True
            except HarnessError as e:
                log(f"\nbench: {name} benchmark failed: {e}")
                res = results[name] = {"error": str(e)}
                sub_failed = True
            results["targets"] += res.get("targets") or [{
                "name": f"{name} benchmark ran", "value": None, "pass": False,
                "shown": "error", "note": (res.get("error") or res.get("failed") or "").split("\n")[0],
            }]
        print_targets(results["targets"])
        if args.markdown:
            print("\n" + markdown(results))
    except HarnessError as e:
        log(f"\nbench: error: {e}")
        return 2
    except KeyboardInterrupt:
        log("\nbench: interrupted; servers stopped")
        return 130
    finally:
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
            log(f"results written to {args.json}")
        shutil.rmtree(scratch, ignore_errors=True)
    if sub_failed:
        return 2
    if args.strict and not all(t["pass"] for t in results["targets"]):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
