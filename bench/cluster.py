#!/usr/bin/env python3
"""Benchmark a 3-node disquepy cluster on loopback.

Workloads (each a table row; PASS/FAIL lines for the project's targets):

  a. baseline   ADDJOB q <16-byte body> 5000 REPLICATE 1, 50 connections,
                unpipelined, against a fresh 1-node server: the denominator.
  b. replicate  ADDJOB q <body> 5000 REPLICATE 3 (synchronous: the reply comes
                once 3 copies exist), 50 connections spread evenly over the 3
                nodes, unpipelined; then the same with ASYNC.
                Target: sync >= 0.5x baseline.
     floor      the baseline and sync rows again on floor nodes
                (bench/floor_cluster.py: the same REPLJOB/GOTJOB message flow
                with nothing stored or checked): the ceiling of the sync row,
                and the floor's own REPLICATE 3 vs REPLICATE 1 ratio.
  c. federation latency, consumer on node B, producer on node A:
     - one job at a time: the consumer blocks in GETJOB TIMEOUT 5000 FROM fq,
       the producer sends ADDJOB fq <body> 5000 REPLICATE 1; from just before
       the ADDJOB is sent to the arrival of the GETJOB reply.
     - first job to an idle node: the same on a fresh queue name after 3 s
       idle, a few times (median).  Target: < 100 ms.
     - under steady traffic: a producer process adds to fq2 at a steady rate
       (200 jobs/s), the consumer loops GETJOB + ACKJOB; latency from the send
       time embedded in each body (time.monotonic_ns()).  Target: median < 5 ms.
  d. pipeline   producers on A (ADDJOB REPLICATE 1; then ADDJOB with the
                default replication), consumers on B (blocking GETJOB, then
                ACKJOB), 10 + 10 connections, a fixed number of jobs; jobs/s =
                jobs acked on B / elapsed.  Then INFO registered_jobs must go
                back to 0 on every node (acks propagated) within a bounded wait.

(a), (b) and the floor rows run on a fresh 1-node server, a fresh cluster and the
floor nodes, all up, taking turns --cluster-repeat times (default 3; each row keeps its
median run, and the ratio is the median of the rounds' ratios). Every row starts on
empty nodes (DEBUG FLUSHALL), and after each cluster row every node must hold a copy of
each job the row added; the first sync row also reports RSS growth per job held.
(c) and (d) run on another cluster; every job consumed is acked. Nodes are
`disque-server --port P --cluster-node-timeout 5000`, each in its own scratch
directory, joined with CLUSTER MEET sent to the first node; the cluster is ready when
HELLO on every node lists 3 nodes with priority 1. All processes are stopped at the
end, also on Ctrl-C/SIGTERM; every wait is bounded.

    .venv/bin/python bench/cluster.py --quick
    .venv/bin/python bench/cluster.py --markdown --json bench/results/cluster.json
    .venv/bin/python bench/run.py --only cluster

Stdlib only (a small RESP client below); the load comes from bench/loadgen.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import multiprocessing
import os
import random
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

if __name__ == "__main__":  # one module object whether run or imported
    sys.modules.setdefault("cluster", sys.modules["__main__"])

import run as R  # noqa: E402  (bench/run.py: loadgen, Server, reporting helpers)

NODES = 3
NODE_TIMEOUT_MS = 5000  # --cluster-node-timeout
ADD_TIMEOUT_MS = 5000  # ADDJOB <ms-timeout>
BASE_CONNS = 50  # (a) and (b)
PIPE_CONNS = 10  # (d): producers on A, and as many consumers on B
STEADY_RATE = 200  # jobs/s in the steady-traffic latency test
STEADY_WARMUP_S = 1.0  # steady-traffic samples sent in the first second are dropped
IDLE_WAIT_S = 3.0  # how long the consumer sits idle before the first job
CONVERGE_TIMEOUT_S = 30.0
FREE_TIMEOUT_S = 30.0  # registered_jobs back to 0
PORT_RANGE = (20000, 29999)  # clients; the bus is at port + 10000 (30000-39999)

# Targets.
TARGET_SYNC_RATIO = 0.5  # REPLICATE 3 sync vs single-node REPLICATE 1
TARGET_STEADY_MEDIAN_MS = 5.0
TARGET_IDLE_MS = 100.0


class RespError(Exception):
    """An error reply."""


# --------------------------------------------------------------------------
# A minimal RESP client (blocking, one request at a time)
# --------------------------------------------------------------------------


class Resp:
    def __init__(self, port: int, timeout: float = 15.0) -> None:
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rf = self.sock.makefile("rb")

    def send(self, *args) -> None:
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            if isinstance(a, int):
                a = b"%d" % a
            elif isinstance(a, str):
                a = a.encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))

    def read(self):
        """One reply; an error reply is returned as a RespError (not raised)."""
        line = self.rf.readline()
        if not line.endswith(b"\r\n"):
            raise ConnectionError(f"connection to port {self.port} closed")
        t, rest = line[:1], line[1:-2]
        if t == b"+":
            return rest
        if t == b"-":
            return RespError(rest.decode(errors="replace"))
        if t == b":":
            return int(rest)
        if t == b"_":
            return None
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.rf.read(n + 2)
            if len(data) != n + 2:
                raise ConnectionError(f"connection to port {self.port} closed")
            return data[:-2]
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise ConnectionError(f"bad reply from port {self.port}: {line[:80]!r}")

    def call(self, *args):
        self.send(*args)
        r = self.read()
        if isinstance(r, RespError):
            raise r
        return r

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.rf.close()
            self.sock.close()


def info(c: Resp, section: str) -> dict[str, str]:
    text = c.call("INFO", section).decode()
    return dict(ln.split(":", 1) for ln in text.splitlines() if ":" in ln)


def info_ints(ports: list[int], section: str, field: str) -> list[int | None]:
    """An integer INFO field of each node, None where it could not be read."""
    out: list[int | None] = []
    for p in ports:
        try:
            c = Resp(p, timeout=5)
            try:
                out.append(int(info(c, section)[field]))
            finally:
                c.close()
        except (OSError, RespError, KeyError, ValueError):
            out.append(None)
    return out


def registered_jobs(ports: list[int]) -> list[int | None]:
    return info_ints(ports, "jobs", "registered_jobs")


def rss(ports: list[int]) -> list[int | None]:
    return info_ints(ports, "memory", "used_memory_rss")


def round_ratios(row: dict, base: dict) -> tuple[list, float | None]:
    """Each round's ratio of ``row`` to ``base`` and their median."""
    rr = [R.ratio(x, b) for x, b in zip(row["runs_ops_per_sec"], base["runs_ops_per_sec"],
                                        strict=True)]
    known = [x for x in rr if x is not None]
    return rr, statistics.median(known) if known else None


def flush_all(ports: list[int]) -> None:
    """DEBUG FLUSHALL on every node: each throughput row starts from empty nodes, so a
    row's rate does not depend on how many jobs the rows before it left behind."""
    for p in ports:
        c = Resp(p, timeout=30)
        try:
            c.call("DEBUG", "FLUSHALL")
        finally:
            c.close()


def wait_copies(ports: list[int], want: int, timeout: float) -> dict:
    """registered_jobs == ``want`` on every node (each holds a copy of every job the
    row added), waiting up to ``timeout`` s for asynchronous copies to land."""
    t0 = time.monotonic()
    counts = registered_jobs(ports)
    while counts != [want] * len(ports) and time.monotonic() - t0 < timeout:
        time.sleep(0.2)
        counts = registered_jobs(ports)
    return {"want_per_node": want, "counts": counts, "ok": counts == [want] * len(ports),
            "seconds": time.monotonic() - t0}


def debug_jobs(port: int) -> str:
    """DEBUG JOBS (disquepy: counts by state), for diagnostics."""
    try:
        c = Resp(port, timeout=5)
        try:
            return str(c.call("DEBUG", "JOBS"))
        finally:
            c.close()
    except (OSError, RespError) as e:
        return f"({e})"


def wait_registered_zero(ports: list[int], timeout: float) -> dict:
    """Poll INFO jobs on every node until registered_jobs is 0 everywhere."""
    t0 = time.monotonic()
    counts = registered_jobs(ports)
    while any(n != 0 for n in counts) and time.monotonic() - t0 < timeout:
        time.sleep(0.1)
        counts = registered_jobs(ports)
    ok = all(n == 0 for n in counts)
    res = {"ok": ok, "seconds": time.monotonic() - t0, "counts": counts, "timeout": timeout}
    if not ok:
        res["debug_jobs"] = [debug_jobs(p) for p in ports]
    return res


def fmt_free(fr: dict) -> str:
    counts = ", ".join("?" if n is None else str(n) for n in fr["counts"])
    if fr["ok"]:
        return f"registered_jobs 0 on all nodes after {fr['seconds']:.1f} s"
    extra = f"; DEBUG JOBS by state: {', '.join(fr['debug_jobs'])}" if fr.get("debug_jobs") else ""
    return f"registered_jobs NOT 0 after {fr['timeout']:.0f} s: [{counts}]{extra}"


# --------------------------------------------------------------------------
# Nodes and clusters
# --------------------------------------------------------------------------


def port_pair_free(p: int) -> bool:
    for q in (p, p + 10000):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", q))
            except OSError:
                return False
    return True


def pick_ports(n: int, avoid: set[int]) -> list[int]:
    """n ports in PORT_RANGE with port and port+10000 free (the bus)."""
    rng = random.Random()
    out: list[int] = []
    for _ in range(2000):
        p = rng.randint(*PORT_RANGE)
        if p in avoid or p in out or not port_pair_free(p):
            continue
        out.append(p)
        if len(out) == n:
            return out
    raise R.HarnessError("no free port pairs (P, P+10000) in 20000-29999")


def node_argv(args, port: int) -> list[str]:
    return [
        *R.absolutize(args.ours_cmd),
        "--port",
        str(port),
        "--cluster-node-timeout",
        str(NODE_TIMEOUT_MS),
    ]


def floor_argv(port: int, peers: list[int]) -> list[str]:
    return [str(R.venv_python()), str(R.BENCH / "floor_cluster.py"), "--port", str(port),
            *(["--peers", ",".join(map(str, peers))] if peers else [])]


def hello_ok(port: int, n: int) -> bool:
    try:
        c = Resp(port, timeout=2)
        try:
            h = c.call("HELLO")
        finally:
            c.close()
    except (OSError, RespError):
        return False
    return (
        isinstance(h, list)
        and len(h) == 2 + n
        and all(isinstance(e, list) and len(e) >= 4 and e[3] == b"1" for e in h[2:])
    )


class Nodes:
    """n disquepy nodes (n > 1: joined into one cluster), or with ``floor`` n floor nodes
    (bench/floor_cluster.py, each given the others as peers); always stopped on exit."""

    def __init__(self, args, scratch: Path, tag: str, n: int, floor: bool = False) -> None:
        self.args, self.scratch, self.tag, self.n = args, scratch, tag, n
        self.floor = floor
        self.servers: list[R.Server] = []
        self.converge_s = 0.0

    @property
    def ports(self) -> list[int]:
        return [s.port for s in self.servers]

    def argvs(self) -> list[str]:
        return [
            shlex.join([R.display_path(a) if a.startswith("/") else a for a in s.argv])
            for s in self.servers
        ]

    def __enter__(self) -> Nodes:
        try:
            self._start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start(self) -> None:
        used: set[int] = set()
        for attempt in range(3):  # a port may be taken between the check and the bind
            ports = pick_ports(self.n, used)
            used.update(ports)
            try:
                for i, p in enumerate(ports):
                    d = self.scratch / f"{self.tag}-node{i}-{attempt}"
                    d.mkdir()
                    argv = (floor_argv(p, [q for q in ports if q != p]) if self.floor
                            else node_argv(self.args, p))
                    srv = R.Server(f"{self.tag}-node{i}", argv, p, d)
                    self.servers.append(srv)
                    srv.start(self.args.startup_timeout)
                break
            except R.HarnessError as e:
                self.__exit__()
                if attempt == 2 or "in use" not in str(e).lower():
                    raise
                R.log(f"{self.tag}: a port was taken; retrying on other ports")
        if self.n == 1:
            return
        t0 = time.monotonic()
        if self.floor:
            self._floor_ready(t0)
            return
        first = Resp(self.ports[0], timeout=5)
        try:
            for p in self.ports[1:]:
                r = first.call("CLUSTER", "MEET", "127.0.0.1", p)
                if r != b"OK":
                    raise R.HarnessError(f"CLUSTER MEET 127.0.0.1 {p} replied {r!r}")
        except (OSError, RespError) as e:
            raise R.HarnessError(f"CLUSTER MEET failed: {e}") from e
        finally:
            first.close()
        deadline = t0 + CONVERGE_TIMEOUT_S
        pending = list(self.ports)
        while pending and time.monotonic() < deadline:
            pending = [p for p in pending if not hello_ok(p, self.n)]
            if pending:
                time.sleep(0.05)
        if pending:
            raise R.HarnessError(
                f"cluster did not converge in {CONVERGE_TIMEOUT_S:.0f} s: HELLO on port(s) "
                f"{pending} does not list {self.n} nodes with priority 1"
            )
        self.converge_s = time.monotonic() - t0
        R.log(f"{self.tag}: {self.n} nodes {self.ports} converged in {self.converge_s:.2f} s")

    def _floor_ready(self, t0: float) -> None:
        """Floor nodes link up by themselves: ready once a replicated ADDJOB is answered
        with a job ID on every node."""
        deadline = t0 + CONVERGE_TIMEOUT_S
        pending = list(self.ports)
        while pending and time.monotonic() < deadline:
            still = []
            for p in pending:
                try:
                    c = Resp(p, timeout=2)
                    try:
                        r = c.call("ADDJOB", "q", "x", 1000, "REPLICATE", self.n)
                    finally:
                        c.close()
                except (OSError, RespError):
                    r = None
                if not (isinstance(r, bytes) and r.startswith(b"D-")):
                    still.append(p)
            pending = still
            if pending:
                time.sleep(0.05)
        if pending:
            raise R.HarnessError(f"floor nodes {pending} did not replicate within "
                                 f"{CONVERGE_TIMEOUT_S:.0f} s")
        self.converge_s = time.monotonic() - t0
        R.log(f"{self.tag}: {self.n} floor nodes {self.ports} linked in {self.converge_s:.2f} s")

    def check_alive(self, rep: dict) -> None:
        """Flag a loadgen report if a node died during the run."""
        for s in self.servers:
            if not s.alive():
                rep["errors"] = rep.get("errors", 0) + 1
                rep["first_error"] = rep.get("first_error") or (
                    f"{s.name} died; log tail:\n{s.log_tail()}"
                )

    def cpu_seconds(self) -> float:
        """User + system CPU time used so far by all nodes (and their children)."""
        tick = os.sysconf("SC_CLK_TCK")
        total = 0
        for s in self.servers:
            if s.proc is None:
                continue
            for pid in [s.proc.pid, *R.descendants(s.proc.pid)]:
                try:
                    with open(f"/proc/{pid}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                    total += int(fields[11]) + int(fields[12])  # utime, stime
                except (OSError, IndexError, ValueError):
                    pass
        return total / tick

    def dead(self) -> list[str]:
        return [s.name for s in self.servers if not s.alive()]

    def __exit__(self, *exc) -> None:
        for s in reversed(self.servers):
            s.stop()
        self.servers = []


# --------------------------------------------------------------------------
# (a) and (b): ADDJOB throughput
# --------------------------------------------------------------------------


def addjob_row(args, nodes: Nodes, name: str, extra: list[str], conns: int, queue: str) -> dict:
    kw = {"extra": extra, "addjob_timeout": ADD_TIMEOUT_MS}
    if len(nodes.ports) > 1:
        kw["ports"] = nodes.ports
    n = args.cluster_requests
    cmd = R.loadgen_cmd(nodes.ports[0], "addjob", conns, 1, n, queue, args.max_seconds, **kw)
    cpu0 = nodes.cpu_seconds()
    rep = R.run_loadgen(nodes.ports[0], "addjob", conns, 1, n, queue, args.max_seconds, **kw)
    cpu = nodes.cpu_seconds() - cpu0
    nodes.check_alive(rep)
    return {
        "name": name,
        "nodes": len(nodes.ports),
        "conns": conns,
        "report": rep,
        # server CPU (all nodes) per job acknowledged, over the loadgen run
        "cpu_us_per_job": cpu * 1e6 / rep["ops"] if rep["ops"] else None,
        "command": shlex.join([R.display_path(cmd[0]), *cmd[1:]]),
    }


# --------------------------------------------------------------------------
# (c): federation latency
# --------------------------------------------------------------------------


def wait_blocked(mon: Resp, want: int, timeout: float = 2.0) -> bool:
    """Until INFO clients on the consumer's node shows `want` blocked clients."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if int(info(mon, "clients").get("blocked_clients", 0)) >= want:
            return True
        time.sleep(0.0002)
    return False


def one_job_latency(
    prod: Resp,
    cons: Resp,
    mon: Resp,
    queue: str,
    body: bytes,
    get_timeout_ms: int,
    idle_s: float = 0.0,
) -> dict:
    """Consumer blocks on B, (idle_s later) the producer adds one job on A.

    Returns {"ms": latency or None, "error": str or None}; the job is acked.
    """
    got: dict = {}

    def consume() -> None:
        try:
            got["reply"] = cons.read()
        except Exception as e:  # noqa: BLE001 - reported below
            got["reply"] = e
        got["t1"] = time.monotonic_ns()

    cons.send("GETJOB", "TIMEOUT", get_timeout_ms, "FROM", queue)
    th = threading.Thread(target=consume, daemon=True)
    th.start()
    blocked = wait_blocked(mon, 1)
    if idle_s:
        time.sleep(idle_s)
    t0 = time.monotonic_ns()
    try:
        jid = prod.call("ADDJOB", queue, body, ADD_TIMEOUT_MS, "REPLICATE", 1)
    except RespError as e:
        th.join(get_timeout_ms / 1000 + 5)
        return {"ms": None, "error": f"ADDJOB: {e}"}
    th.join(get_timeout_ms / 1000 + 5)
    if th.is_alive():
        raise R.HarnessError("the consumer's GETJOB did not return (socket timeout missed?)")
    r = got["reply"]
    if isinstance(r, BaseException):
        return {"ms": None, "error": f"GETJOB: {r}"}
    if not r:
        return {"ms": None, "error": f"no job within GETJOB TIMEOUT {get_timeout_ms} ms"}
    cons.call("ACKJOB", *[j[1] for j in r])  # whatever came, so nothing is left behind
    if r[0][1] != jid:
        return {"ms": None, "error": f"GETJOB returned {r[0][1]!r}, expected {jid!r}"}
    res = {"ms": (got["t1"] - t0) / 1e6, "error": None}
    if not blocked:
        res["note"] = "consumer not seen blocked before the ADDJOB"
    return res


def pct(xs: list[float], p: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(p / 100 * len(s)) - 1))]  # nearest rank


def summarize(samples: list[float], errors: list[str], total: int) -> dict:
    return {
        "n": len(samples),
        "attempts": total,
        "median_ms": statistics.median(samples) if samples else None,
        "p99_ms": pct(samples, 99),
        "max_ms": max(samples) if samples else None,
        "errors": len(errors),
        "first_error": errors[0] if errors else "",
    }


def bench_one_at_a_time(a: int, b: int, n: int) -> dict:
    prod, cons, mon = Resp(a), Resp(b, timeout=20), Resp(b)
    samples, errors, notes = [], [], 0
    try:
        for i in range(n):
            r = one_job_latency(prod, cons, mon, "fq", b"job-%08d" % i, 5000)
            if r["ms"] is None:
                errors.append(r["error"])
            else:
                samples.append(r["ms"])
            notes += "note" in r
    finally:
        for c in (prod, cons, mon):
            c.close()
    res = summarize(samples, errors, n)
    res["not_seen_blocked"] = notes
    return res


def bench_idle(a: int, b: int, n: int) -> dict:
    prod, cons, mon = Resp(a), Resp(b, timeout=30), Resp(b)
    samples, errors = [], []
    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    try:
        for i in range(n):
            r = one_job_latency(
                prod, cons, mon, f"idle-{tag}-{i}", b"first-job", 10_000, idle_s=IDLE_WAIT_S
            )
            if r["ms"] is None:
                errors.append(r["error"])
            else:
                samples.append(r["ms"])
            R.log(
                f"  idle #{i + 1}: " + (f"{r['ms']:.1f} ms" if r["ms"] is not None else r["error"])
            )
    finally:
        for c in (prod, cons, mon):
            c.close()
    res = summarize(samples, errors, n)
    res["samples_ms"] = samples
    return res


def steady_producer(port: int, queue: str, rate: float, seconds: float, out) -> None:
    """Child process: ADDJOB <queue> <monotonic_ns> at a steady rate on node A."""
    # Die quietly on Ctrl-C or on the parent's terminate() (the parent reports).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    sent, errors, first = 0, 0, ""
    try:
        c = Resp(port)
        start = time.monotonic()
        while True:
            due = start + sent / rate
            if due - start >= seconds:
                break
            d = due - time.monotonic()
            if d > 0:
                time.sleep(d)
            try:
                c.call(
                    "ADDJOB", queue, b"%020d" % time.monotonic_ns(), ADD_TIMEOUT_MS, "REPLICATE", 1
                )
            except RespError as e:
                errors += 1
                first = first or str(e)
            sent += 1
    except Exception as e:  # noqa: BLE001 - reported to the parent
        errors += 1
        first = first or f"producer: {e}"
    out.put({"sent": sent, "errors": errors, "first_error": first})


def bench_steady(a: int, b: int, seconds: float) -> dict:
    queue = "fq2"
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    start_ns = time.monotonic_ns()
    proc = ctx.Process(
        target=steady_producer, args=(a, queue, STEADY_RATE, seconds, out), daemon=True
    )
    cons = Resp(b, timeout=10)
    samples: list[float] = []
    received, dropped, errors = 0, 0, []
    result = None
    try:
        proc.start()
        hard = time.monotonic() + seconds + 15
        while time.monotonic() < hard:
            if result is None and not proc.is_alive():
                with contextlib.suppress(Exception):
                    result = out.get(timeout=1)
                if result is None:
                    result = {"sent": None, "errors": 1, "first_error": "producer died"}
            if result is not None and (result["sent"] is None or received >= result["sent"]):
                break
            try:
                r = cons.call("GETJOB", "TIMEOUT", 200, "COUNT", 100, "FROM", queue)
            except RespError as e:
                errors.append(f"GETJOB: {e}")
                time.sleep(0.01)
                continue
            t = time.monotonic_ns()
            if not r:
                continue
            ids = []
            for _q, jid, body in r:
                ids.append(jid)
                sent_ns = int(body)
                if sent_ns - start_ns < STEADY_WARMUP_S * 1e9:
                    dropped += 1
                else:
                    samples.append((t - sent_ns) / 1e6)
            received += len(r)
            try:
                cons.call("ACKJOB", *ids)
            except RespError as e:
                errors.append(f"ACKJOB: {e}")
    finally:
        cons.close()
        if proc.is_alive():
            proc.terminate()
        proc.join(5)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
    if result is None:
        result = {"sent": None, "errors": 0, "first_error": ""}
    if result["errors"]:
        errors.insert(0, f"{result['errors']} producer errors, first: {result['first_error']}")
    sent = result["sent"]
    if sent is not None and received < sent:
        errors.append(f"{sent - received} of {sent} jobs not received in time")
    res = summarize(samples, errors, len(samples))
    res.update(
        {
            "sent": sent,
            "received": received,
            "warmup_dropped": dropped,
            "rate": STEADY_RATE,
            "seconds": seconds,
        }
    )
    return res


# --------------------------------------------------------------------------
# (d): producers on A, consumers on B
# --------------------------------------------------------------------------


def bench_pipeline(args, nodes: Nodes, name: str, queue: str, extra: list[str]) -> dict:
    a, b = nodes.ports[0], nodes.ports[1]
    n, conns, ms = args.pipeline_jobs, PIPE_CONNS, args.max_seconds
    cons_cmd = R.loadgen_cmd(
        b, "getack", conns, 1, n, queue, ms, extra=["TIMEOUT", "1000"], max_empty=10
    )
    prod_cmd = R.loadgen_cmd(
        a, "addjob", conns, 1, n, queue, ms, extra=extra, addjob_timeout=ADD_TIMEOUT_MS
    )
    procs: list[subprocess.Popen] = []
    outs = []
    try:
        for cmd in (cons_cmd, prod_cmd):  # consumers first: they block until jobs come
            procs.append(
                subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            )
        for p in procs:
            try:
                outs.append(p.communicate(timeout=ms + 30))
            except subprocess.TimeoutExpired:
                p.kill()
                outs.append((p.communicate()[0], "loadgen did not exit in time"))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(5)
    cons = R.parse_loadgen_output(procs[0].returncode, *outs[0], "getack", conns, 1, n)
    prod = R.parse_loadgen_output(procs[1].returncode, *outs[1], "addjob", conns, 1, n)
    nodes.check_alive(cons)
    acked = cons.get("acked", 0)
    rate = acked / cons["elapsed_s"] if cons.get("elapsed_s") else 0.0
    free = wait_registered_zero(nodes.ports, FREE_TIMEOUT_S)
    return {
        "name": name,
        "jobs": n,
        "conns": conns,
        "jobs_per_sec": rate,
        "acked": acked,
        "consumer": cons,
        "producer": prod,
        "freed": free,
        "commands": [shlex.join([R.display_path(c[0]), *c[1:]]) for c in (cons_cmd, prod_cmd)],
    }


# --------------------------------------------------------------------------
# The whole benchmark
# --------------------------------------------------------------------------


def bench_cluster(args, scratch: Path) -> dict:
    """Run (a)-(d), printing each row as it comes; returns the results dict.

    Raises R.HarnessError when the benchmark cannot go on (a node does not
    start, the cluster does not converge, a connection breaks, an error reply
    where none is expected)."""
    try:
        return _bench_cluster(args, scratch)
    except (OSError, RespError, ValueError) as e:
        raise R.HarnessError(f"cluster benchmark stopped: {type(e).__name__}: {e}") from e


def _bench_cluster(args, scratch: Path) -> dict:
    res: dict = {
        "requests": args.cluster_requests,
        "repeat": args.cluster_repeat,
        "pipeline_jobs": args.pipeline_jobs,
        "servers": {},
        "notes": [],
    }
    print(
        f"\ncluster: {NODES} disquepy nodes on loopback, --cluster-node-timeout "
        f"{NODE_TIMEOUT_MS}; {args.cluster_requests:,} ADDJOBs per throughput row, "
        f"{BODY}-byte bodies",
        flush=True,
    )
    print(TP_HEADER)
    print("-" * len(TP_HEADER), flush=True)

    # (a) the single-node baseline and (b) REPLICATE 3 sync and async: a fresh 1-node
    # server and a fresh cluster, both up; the rows take turns, round after round, and
    # each keeps its median run (the machine's speed drifts by 2-4x within minutes)
    # The floor rows run the same two workloads on floor nodes (bench/floor_cluster.py:
    # the replication messages and nothing else), in the same rounds.
    k = args.cluster_repeat
    with contextlib.ExitStack() as stack:
        single = stack.enter_context(Nodes(args, scratch, "single", 1))
        cl = stack.enter_context(Nodes(args, scratch, "repl", NODES))
        fsingle = stack.enter_context(Nodes(args, scratch, "floor-single", 1, floor=True))
        fcl = stack.enter_context(Nodes(args, scratch, "floor-repl", NODES, floor=True))
        res["servers"]["baseline"] = single.argvs()
        res["servers"]["replicate"] = cl.argvs()
        res["servers"]["floor"] = fsingle.argvs() + fcl.argvs()
        res["converge_s"] = [cl.converge_s]
        specs = (
            ("baseline", single, "ADDJOB REPLICATE 1, 1 node (baseline)", ["REPLICATE", "1"]),
            ("sync", cl, "ADDJOB REPLICATE 3, 3 nodes", ["REPLICATE", "3"]),
            ("async", cl, "ADDJOB REPLICATE 3 ASYNC, 3 nodes", ["REPLICATE", "3", "ASYNC"]),
            ("floor1", fsingle, "floor: ADDJOB REPLICATE 1, 1 node", ["REPLICATE", "1"]),
            ("floor3", fcl, "floor: ADDJOB REPLICATE 3, 3 nodes", ["REPLICATE", "3"]),
        )
        runs: dict[str, list[dict]] = {key: [] for key, *_ in specs}
        copies: list[dict] = []
        for r in range(k):
            for key, nodes, name, extra in specs:
                if not nodes.floor:
                    flush_all(nodes.ports)
                first_sync = r == 0 and key == "sync"  # fresh nodes: their RSS growth
                rss0 = rss(nodes.ports) if first_sync else None
                row = addjob_row(args, nodes, name, extra, BASE_CONNS, "q")
                runs[key].append(row)
                if len(nodes.ports) > 1 and not nodes.floor:  # a copy of every job on each
                    c = wait_copies(nodes.ports, row["report"]["ops"], FREE_TIMEOUT_S)
                    c["row"] = f"{key} round {r + 1}"
                    copies.append(c)
                    if first_sync and c["ok"] and row["report"]["ops"]:
                        res["rss_per_job"] = [
                            None if a is None or b is None else (b - a) / row["report"]["ops"]
                            for a, b in zip(rss0, rss(nodes.ports), strict=True)]
            if k > 1:
                done = ", ".join(f"{key} {runs[key][-1]['report']['ops_per_sec']:,.0f}"
                                 for key in runs)
                R.log(f"  round {r + 1}/{k}: {done}")
        for key, lst in runs.items():
            row = dict(sorted(lst, key=lambda x: x["report"]["ops_per_sec"])[len(lst) // 2])
            row["runs_ops_per_sec"] = [x["report"]["ops_per_sec"] for x in lst]
            res[key] = row
        print_tp_row(res["baseline"], 1.0 if res["baseline"]["report"]["ops_per_sec"] else None)
        for key in ("sync", "async", "floor1", "floor3"):
            # each round's ratio compares runs of the same minutes; the median of those
            # is the figure (a run's ratio to a baseline from other minutes says little)
            res[key]["round_ratios"], res[key]["ratio"] = round_ratios(res[key], res["baseline"])
            print_tp_row(res[key], res[key]["ratio"])
        # the floor cluster against the floor's own REPLICATE 1
        fl = res["floor3"]
        fl["round_ratios_floor1"], fl["ratio_floor1"] = round_ratios(fl, res["floor1"])
        if k > 1:
            print(f"  median of {k} alternating rounds; ratio = the median of the rounds' "
                  "ratios (" + "; ".join(
                      f"{key} " + ", ".join(R.fmt_ratio(x) for x in res[key]["round_ratios"])
                      for key in ("sync", "async", "floor3")) + ")", flush=True)
        print(f"  floor = {FLOOR_LINE}; floor REPLICATE 3 vs floor REPLICATE 1: "
              f"{R.fmt_ratio(fl['ratio_floor1'])} ("
              + ", ".join(R.fmt_ratio(x) for x in fl["round_ratios_floor1"]) + ")", flush=True)
        if res.get("rss_per_job"):
            print("  memory: RSS growth per job held, each node of the fresh cluster, first sync "
                  "row (each node is the origin of a third of the jobs and a replica of the "
                  "rest): " + ", ".join("?" if x is None else f"{x:.0f} B"
                                        for x in res["rss_per_job"]), flush=True)
        bad = [c for c in copies if not c["ok"]]
        res["replicas"] = {"rows": len(copies), "bad": bad}
        line = (
            f"copies: after each of the {len(copies)} cluster rows, registered_jobs on every "
            "node equals the jobs the row added" if not bad else
            "copies short after " + "; ".join(
                f"{c['row']}: {c['counts']} (expected {c['want_per_node']} each)" for c in bad)
        )
        print(("  " if not bad else "    ! ") + line, flush=True)
        if bad:
            res["notes"].append(line)

    # (c) and (d) on another fresh cluster
    with Nodes(args, scratch, "fed", NODES) as cl:
        res["servers"]["federation"] = cl.argvs()
        res["converge_s"].append(cl.converge_s)
        a, b = cl.ports[0], cl.ports[1]
        lat: dict = {}
        res["latency"] = lat
        print(
            f"\nfederation latency: producer on node A (port {a}), consumer on node B "
            f"(port {b}); ADDJOB ... 5000 REPLICATE 1"
        )
        print(LAT_HEADER)
        print("-" * len(LAT_HEADER), flush=True)
        R.log(
            f"idle: {args.idle_samples} x (block on a fresh queue, {IDLE_WAIT_S:.0f} s idle, "
            "one job)"
        )
        lat["idle"] = bench_idle(a, b, args.idle_samples)
        print_lat_row("first job to an idle node", lat["idle"])
        lat["single"] = bench_one_at_a_time(a, b, args.latency_samples)
        print_lat_row("one job at a time, consumer blocked", lat["single"])
        lat["steady"] = bench_steady(a, b, args.steady_seconds)
        print_lat_row(f"steady {STEADY_RATE} jobs/s (GETJOB+ACKJOB loop)", lat["steady"])
        res["latency_freed"] = wait_registered_zero(cl.ports, FREE_TIMEOUT_S)
        print(
            ("  " if res["latency_freed"]["ok"] else "    ! ")
            + "after the latency tests: "
            + fmt_free(res["latency_freed"]),
            flush=True,
        )

        print(
            f"\npipeline: {PIPE_CONNS} producer connections on A (port {a}), {PIPE_CONNS} "
            f"consumer connections on B (port {b}) doing GETJOB TIMEOUT 1000 + ACKJOB; "
            f"{args.pipeline_jobs:,} jobs"
        )
        print(PIPE_HEADER)
        print("-" * len(PIPE_HEADER), flush=True)
        res["pipeline"] = []
        for name, queue, extra in (
            ("ADDJOB REPLICATE 1 on A", "pq1", ["REPLICATE", "1"]),
            ("ADDJOB (default replication) on A", "pq3", []),
        ):
            row = bench_pipeline(args, cl, name, queue, extra)
            res["pipeline"].append(row)
            print_pipe_row(row)
        dead = cl.dead()
        if dead:
            res["notes"].append(f"node(s) died during the run: {', '.join(dead)}")
    res["targets"] = targets(res)
    return res


# --------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------

BODY = R.BODY_SIZE
FLOOR_LINE = ("bench/floor_cluster.py: RESP in, REPLJOB/GOTJOB frames between the nodes, "
              "nothing stored or checked; its REPLICATE 3 rate bounds ours")
TP_HEADER = (
    f"{'workload':<40} {'nodes':>5} {'conns':>5} | {'jobs/s':>9} {'p50us':>6} "
    f"{'p99us':>6} | {'vs base':>7} | {'cpu us/job':>11}"
)
LAT_HEADER = f"{'latency (ms)':<40} {'n':>6} | {'median':>8} {'p99':>8} {'max':>8}"
PIPE_HEADER = (
    f"{'pipeline':<40} {'jobs':>7} | {'e2e jobs/s':>10} {'acked':>7} | "
    f"{'produce/s':>9} | registered_jobs after"
)


def fmt_ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def fmt_cpu(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0f}"


def print_tp_row(row: dict, ratio: float | None) -> None:
    rep = row["report"]
    print(
        f"{row['name']:<40} {row['nodes']:>5} {row['conns']:>5} | {R.fmt_side(rep)} | "
        f"{R.fmt_ratio(ratio):>7} | {fmt_cpu(row.get('cpu_us_per_job')):>11}",
        flush=True,
    )
    p = R.problems(rep)
    if p:
        print(f"    ! {p}", flush=True)


def print_lat_row(name: str, s: dict) -> None:
    print(
        f"{name:<40} {s['n']:>6} | {fmt_ms(s['median_ms']):>8} {fmt_ms(s['p99_ms']):>8} "
        f"{fmt_ms(s['max_ms']):>8}",
        flush=True,
    )
    if s["errors"]:
        print(f"    ! {s['errors']} problem(s), first: {s['first_error']}", flush=True)
    if s.get("not_seen_blocked"):
        print(
            f"    ! {s['not_seen_blocked']} time(s) the consumer was not seen blocked "
            "(INFO blocked_clients) within 2 s before the ADDJOB",
            flush=True,
        )


def print_pipe_row(row: dict) -> None:
    free = row["freed"]
    after = f"0 after {free['seconds']:.1f} s" if free["ok"] else "NOT 0 (see below)"
    print(
        f"{row['name']:<40} {row['jobs']:>7} | {row['jobs_per_sec']:>10.0f} "
        f"{row['acked']:>7} | {row['producer']['ops_per_sec']:>9.0f} | {after}",
        flush=True,
    )
    for side in ("producer", "consumer"):
        p = R.problems(row[side])
        if p:
            print(f"    ! {side}: {p}", flush=True)
    if row["acked"] != row["consumer"].get("received", 0):
        print(
            f"    ! consumer: {row['consumer'].get('received', 0)} jobs received, "
            f"{row['acked']} acked",
            flush=True,
        )
    if not free["ok"]:
        print(f"    ! {fmt_free(free)}", flush=True)


def targets(res: dict) -> list[dict]:
    def ok(rep: dict) -> bool:
        return rep["ops"] > 0 and not rep.get("errors") and not rep.get("failed")

    out = []
    sync = res.get("sync")
    if sync:
        r = sync["ratio"]
        out.append(
            {
                "name": f"cluster ADDJOB REPLICATE 3 (sync), 50 conns over 3 nodes >= "
                f"{TARGET_SYNC_RATIO}x single-node REPLICATE 1",
                "value": r,
                "pass": ok(sync["report"])
                and ok(res["baseline"]["report"])
                and r is not None
                and r >= TARGET_SYNC_RATIO,
                "shown": f"{R.fmt_ratio(r)} ({sync['report']['ops_per_sec']:,.0f} vs "
                f"{res['baseline']['report']['ops_per_sec']:,.0f} jobs/s)"
                + (f"; ceiling: the floor cluster at {R.fmt_ratio(res['floor3']['ratio'])} of "
                   f"the baseline, {R.fmt_ratio(res['floor3']['ratio_floor1'])} of the floor's "
                   "own REPLICATE 1" if res.get("floor3") else ""),
                "note": R.problems(sync["report"]) or R.problems(res["baseline"]["report"]),
            }
        )
    lat = res.get("latency") or {}
    st = lat.get("steady")
    if st:
        v = st["median_ms"]
        out.append(
            {
                "name": f"federation latency under steady traffic ({STEADY_RATE} jobs/s): "
                f"median < {TARGET_STEADY_MEDIAN_MS:g} ms",
                "value": v,
                "pass": v is not None and v < TARGET_STEADY_MEDIAN_MS and not st["errors"],
                "shown": f"{fmt_ms(v)} ms",
                "note": st["first_error"],
            }
        )
    idle = lat.get("idle")
    if idle:
        v = idle["median_ms"]
        out.append(
            {
                "name": f"first job to an idle node: median < {TARGET_IDLE_MS:g} ms",
                "value": v,
                "pass": v is not None and v < TARGET_IDLE_MS and not idle["errors"],
                "shown": f"{fmt_ms(v)} ms (runs: "
                + ", ".join(f"{x:.0f}" for x in idle.get("samples_ms", []))
                + ")",
                "note": idle["first_error"],
            }
        )
    return out


def markdown(res: dict) -> list[str]:
    """The cluster section of the markdown report (lines)."""
    out = [
        f"#### Cluster: {NODES} disquepy nodes on loopback",
        "",
        "Servers, each in its own scratch directory; a cluster is joined with "
        "`CLUSTER MEET 127.0.0.1 <port>` sent to its first node for each other node, and is "
        f"ready when HELLO on every node lists {NODES} nodes with priority 1:",
        "",
    ]
    conv = res.get("converge_s", [])
    for i, (key, what) in enumerate(
        (
            ("baseline", "baseline, 1 node"),
            ("replicate", "REPLICATE rows, cluster 1"),
            ("federation", "latency and pipeline, cluster 2"),
            ("floor", "floor rows (bench/floor_cluster.py), 1 node, then 3 linked"),
        )
    ):
        cmds = res["servers"].get(key)
        if cmds:
            ready = f" (ready {conv[i - 1]:.1f} s after the MEETs)" if 0 < i <= len(conv) else ""
            out.append(f"- {what}{ready}: " + "; ".join(f"`{c}`" for c in cmds))
    out += [
        "",
        f"ADDJOB throughput, {BODY}-byte bodies, unpipelined, {res['requests']:,} jobs per row"
        + (f", median of {res['repeat']} alternating rounds (the ratio: the median of the "
           "rounds' ratios)" if res.get("repeat", 1) > 1 else "") + ":",
        "",
        "| Workload | Nodes | Conns | jobs/s | p50 µs | p99 µs | vs baseline | server CPU µs/job |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key in ("baseline", "sync", "async", "floor1", "floor3"):
        row = res.get(key)
        if not row:
            continue
        rep = row["report"]
        flag = " ⚠" if R.problems(rep) else ""
        ratio = "1.00x" if key == "baseline" else R.fmt_ratio(row.get("ratio"))
        out.append(
            f"| {row['name']} | {row['nodes']} | {row['conns']} "
            f"| {rep['ops_per_sec']:,.0f}{flag} | {rep['lat_us']['p50']:.0f} "
            f"| {rep['lat_us']['p99']:.0f} | {ratio} | {fmt_cpu(row.get('cpu_us_per_job'))} |"
        )
    out += ["", "Commands:", ""]
    out += [f"- `{res[k]['command']}`" for k in ("baseline", "sync", "async", "floor1", "floor3")
            if res.get(k)]
    fl = res.get("floor3")
    if fl and fl.get("ratio_floor1") is not None:
        out += ["", f"Floor rows: {FLOOR_LINE}. Their ratio is to the disquepy baseline; the "
                    f"floor cluster against the floor's own REPLICATE 1: "
                    f"{R.fmt_ratio(fl['ratio_floor1'])} (rounds: "
                    + ", ".join(R.fmt_ratio(x) for x in fl["round_ratios_floor1"]) + ")."]
    if res.get("rss_per_job"):
        out += ["", "Memory: RSS growth per job held on each node of the fresh cluster over the "
                    "first sync row (a third of the jobs originate on each node): "
                    + ", ".join("?" if x is None else f"{x:.0f} B" for x in res["rss_per_job"])
                    + "."]
    rp = res.get("replicas")
    if rp:
        out += ["", f"Each row started on empty nodes (DEBUG FLUSHALL). Copies: after each "
                    f"of the {rp['rows']} cluster rows, registered_jobs on every node "
                    + ("equalled the jobs the row added." if not rp["bad"] else
                       "fell short in " + ", ".join(c["row"] for c in rp["bad"]) + ".")]
    lat = res.get("latency")
    if lat:
        out += [
            "",
            "Federation latency (producer on node A: `ADDJOB fq <body> 5000 REPLICATE 1`; "
            "consumer on node B), bench/cluster.py's RESP client:",
            "",
            "| Measure | n | median ms | p99 ms | max ms |",
            "|---|---:|---:|---:|---:|",
        ]
        for key, name in (
            ("idle", f"first job to an idle node (fresh queue, {IDLE_WAIT_S:.0f} s idle)"),
            ("single", "one job at a time, consumer blocked in GETJOB TIMEOUT 5000"),
            ("steady", f"steady {STEADY_RATE} jobs/s, GETJOB + ACKJOB loop"),
        ):
            s = lat.get(key)
            if s:
                flag = " ⚠" if s["errors"] else ""
                out.append(
                    f"| {name}{flag} | {s['n']} | {fmt_ms(s['median_ms'])} "
                    f"| {fmt_ms(s['p99_ms'])} | {fmt_ms(s['max_ms'])} |"
                )
    if res.get("pipeline"):
        out += [
            "",
            f"Pipeline: {PIPE_CONNS} producer connections on A, {PIPE_CONNS} consumer "
            "connections on B (GETJOB TIMEOUT 1000, then ACKJOB):",
            "",
            "| Producer | Jobs | end-to-end jobs/s | acked | produce jobs/s | registered_jobs |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for row in res["pipeline"]:
            fr = row["freed"]
            freed = (
                f"0 on all nodes after {fr['seconds']:.1f} s"
                if fr["ok"]
                else f"⚠ {fr['counts']} after {fr['timeout']:.0f} s"
            )
            out.append(
                f"| {row['name']} | {row['jobs']:,} | {row['jobs_per_sec']:,.0f} "
                f"| {row['acked']:,} | {row['producer']['ops_per_sec']:,.0f} | {freed} |"
            )
        out += ["", "Commands:", ""]
        for row in res["pipeline"]:
            out += [f"- `{c}`" for c in row["commands"]]
    if res.get("notes"):
        out += ["", "⚠ notes:", *[f"- {n}" for n in res["notes"]]]
    out.append("")
    return out


# --------------------------------------------------------------------------
# Options (shared with run.py)
# --------------------------------------------------------------------------


def add_args(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("cluster benchmark")
    g.add_argument(
        "--cluster-requests",
        type=int,
        help="ADDJOBs per throughput row (default 100000, 10000 with --quick)",
    )
    g.add_argument(
        "--cluster-repeat",
        type=int,
        help="alternating rounds of the throughput rows, each row's median kept (default 3, "
        "1 with --quick)",
    )
    g.add_argument(
        "--pipeline-jobs", type=int, help="jobs per pipeline row (default 50000, 5000 with --quick)"
    )
    g.add_argument(
        "--latency-samples",
        type=int,
        help="one-at-a-time federation round trips (default 300, 50 with --quick)",
    )
    g.add_argument(
        "--idle-samples",
        type=int,
        help=f"first-job-to-an-idle-node runs, {IDLE_WAIT_S:.0f} s each "
        "(default 5, 3 with --quick)",
    )
    g.add_argument(
        "--steady-seconds",
        type=float,
        help=f"length of the steady {STEADY_RATE} jobs/s run (default 10, 4 with --quick)",
    )


def finish_args(ap: argparse.ArgumentParser, args) -> None:
    q = args.quick
    for name, full, quick in (
        ("cluster_requests", 100_000, 10_000),
        ("cluster_repeat", 3, 1),
        ("pipeline_jobs", 50_000, 5_000),
        ("latency_samples", 300, 50),
        ("idle_samples", 5, 3),
        ("steady_seconds", 10.0, 4.0),
    ):
        if getattr(args, name) is None:
            setattr(args, name, quick if q else full)
        if getattr(args, name) <= 0:
            ap.error(f"--{name.replace('_', '-')} must be positive")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        description="Benchmark a 3-node disquepy cluster on loopback.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--ours-cmd",
        default=R.DEFAULT_OURS,
        help="command that starts a node; '--port N --cluster-node-timeout 5000' "
        "is appended (default: %(default)s)",
    )
    ap.add_argument("--quick", action="store_true", help="smoke run (about 25 s)")
    ap.add_argument(
        "--max-seconds",
        type=float,
        default=60.0,
        help="time bound of each loadgen run (partial results after it)",
    )
    ap.add_argument("--startup-timeout", type=float, default=20.0)
    ap.add_argument("--json", metavar="PATH", help="write all results as JSON to PATH")
    ap.add_argument("--markdown", action="store_true", help="also print a markdown section")
    ap.add_argument("--strict", action="store_true", help="exit 1 if any target FAILs")
    add_args(ap)
    args = ap.parse_args(argv)
    finish_args(ap, args)
    return args


def meta(args) -> dict:
    import datetime
    import platform

    cpu = "unknown CPU"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": cpu,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "command": shlex.join([R.display_path(sys.executable), *sys.argv]),
        "ours_cmd": args.ours_cmd,
    }


def main(argv=None) -> int:
    import json

    args = parse_args(argv)
    signal.signal(signal.SIGTERM, R.on_sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    results: dict = {"meta": meta(args), "cluster": None, "targets": []}
    scratch = Path(tempfile.mkdtemp(prefix="disquepy-cluster-bench-"))
    rc = 0
    try:
        R.build_loadgen()
        results["cluster"] = bench_cluster(args, scratch)
        results["targets"] = results["cluster"]["targets"]
        R.print_targets(results["targets"])
        if args.markdown:
            m = results["meta"]
            print(
                "\n"
                + "\n".join(
                    [
                        f"### Cluster benchmark run {m['date']}",
                        "",
                        f"- Machine: {m['nproc']} CPUs (`nproc`), {m['cpu']}, {m['os']}",
                        f"- Python {m['python']}",
                        f"- Command: `{m['command']}`",
                        "- Load from bench/loadgen (C, epoll) and bench/cluster.py on the same machine",
                        "",
                        *markdown(results["cluster"]),
                        *target_table(results["targets"]),
                    ]
                )
            )
    except R.HarnessError as e:
        R.log(f"\ncluster bench: error: {e}")
        rc = 2
    except KeyboardInterrupt:
        R.log("\ncluster bench: interrupted; servers stopped")
        rc = 130
    finally:
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
            R.log(f"results written to {args.json}")
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)
    if rc == 0 and args.strict and not all(t["pass"] for t in results["targets"]):
        rc = 1
    return rc


def target_table(ts: list[dict]) -> list[str]:
    if not ts:
        return []
    out = ["| Target | Result | |", "|---|---|---|"]
    out += [f"| {t['name']} | {t['shown']} | {'PASS' if t['pass'] else 'FAIL'} |" for t in ts]
    return out + [""]


if __name__ == "__main__":
    sys.exit(main())
