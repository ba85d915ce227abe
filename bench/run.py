#!/usr/bin/env python3
"""disquepy against real C Disque 1.0-rc1 (and Redis where it helps), in one run.

Sections (``--only a,b``; default: all but spark, about 19 minutes):

  single   one node of each; per workload, our rate, C Disque's and the ratio, measured
           in alternating rounds (ours, C, [Redis,] ours, C, ...): ADDJOB with 50
           connections unpipelined and 16 deep, ADDJOB on 1 connection, GETJOB NOHANG
           (50 conns), GETJOB NOHANG COUNT 100 with each reply's jobs acked by one ACKJOB
           sent with the next GETJOB (1 conn), naive GETJOB then ACKJOB (4 conns). Redis
           LPUSH / RPOP as the ceiling of a RESP server on this machine; bench/floor.py
           (a do-nothing uvloop server, canned replies) as the floor of our shell.
  memory   resident bytes per queued 16-byte job: RSS delta over 1M jobs, fresh servers.
  cluster  a 3-node cluster of each: ADDJOB REPLICATE 3 (sync) and REPLICATE 3 ASYNC,
           50 connections spread over the 3 nodes; every node must then hold every job.
           Then federation latency: 200 jobs/s added on node A, consumed on node B.
  aof      ADDJOB with 50 conns under appendonly no / everysec / always, ours and C;
           then the PING latency seen during a BGREWRITEAOF of 200k jobs.
  client   bench/client.py: the client library and the worker against raw redis-py.
  peers    bench/peers.py: the worker and producer against Celery, RQ and Dramatiq on
           Debian's redis-server (end to end, process rate, CPU per task, latency).
  web      bench/web.py: POST /jobs against the client's add_job, and the dashboard with
           100k queued jobs drawn in a headless Chromium.
  groups   bench/groups.py: consumer groups against jobs on a 3-node cluster (QADD vs
           ADDJOB REPLICATE 3, 10 groups' deliveries vs GETJOB+ACKJOB, QNOTIFY woken
           from another node, memory per event held by 10 groups vs per job).
  streams  bench/groups.py --only streams: consumer groups against Redis Streams, one
           node each, AOF off then everysec (QADD vs XADD, 50 conns unpipelined and 16
           deep; two groups' batch and one-at-a-time consume vs XREADGROUP + XACK; memory
           per held event).
  tls      bench/tls.py: ADDJOB over TLS against plain TCP on one node (mutual TLS),
           from a Python client on 1 and 50 connections and from redis-benchmark on 50
           in steady state.
  celery   bench/celery_redis.py: the same Celery app (no-op task, 2 prefork worker
           processes, acks_late) on disquepy's kombu transport and on kombu's Redis
           transport, alternating rounds: tasks/s end to end, latency, CPU by process.
  spark    bench/spark.py: the Spark connector against the plain client (needs Java).

Where C Disque is not found (see servers.find_disque_c), its columns say so.
Every server is started and stopped by bench/servers.py, also on Ctrl-C / SIGTERM.

    .venv/bin/python bench/run.py                       # make bench
    .venv/bin/python bench/run.py --only single --rounds 5
    .venv/bin/python bench/run.py --quick               # smoke run, ~2 minutes
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from servers import (
    BENCH,
    Fleet,
    HarnessError,
    Server,
    alternate,
    build_loadgen,
    find_disque_c,
    loadgen,
    log,
    median_rate,
    median_ratio,
    stop_on_sigterm,
)

SECTIONS = ("single", "memory", "cluster", "aof", "client", "peers", "web", "groups",
            "streams", "tls", "celery", "spark")
DEFAULT_SECTIONS = ("single", "memory", "cluster", "aof", "client", "peers", "web", "groups",
                    "streams", "tls", "celery")


@dataclass
class Workload:
    name: str
    mode: str
    conns: int
    pipeline: int = 1
    args: tuple[str, ...] = ()
    preload: bool = False  # a consume workload: the queue is filled before each run
    redis_mode: str | None = None  # the Redis equivalent (LPUSH / RPOP), if any
    target: float | None = None  # ours / C at least this


# targets: issue #27, every row at or above C Disque (1.0x), as CPU per op too
SINGLE = [
    Workload("ADDJOB, 50 conns", "addjob", 50, redis_mode="lpush", target=1.0),
    Workload("ADDJOB, 50 conns, 16-deep pipeline", "addjob", 50, 16, redis_mode="lpush",
             target=1.0),
    Workload("ADDJOB, 1 conn", "addjob", 1, redis_mode="lpush", target=1.0),
    Workload("GETJOB NOHANG, 50 conns", "getjob", 50, preload=True, redis_mode="rpop",
             target=1.0),
    Workload("GETJOB NOHANG COUNT 100 + ACKJOB pipelined, 1 conn", "getack1", 1,
             args=("NOHANG", "COUNT", "100"), preload=True, target=1.0),
    Workload("GETJOB then ACKJOB (naive), 4 conns", "getack", 4, preload=True,
             redis_mode="rpop", target=1.0),
]
CLUSTER = [
    Workload("3 nodes, ADDJOB REPLICATE 3 (sync), 50 conns", "addjob", 50,
             args=("REPLICATE", "3"), target=1.0),
    Workload("3 nodes, ADDJOB REPLICATE 3 ASYNC, 50 conns", "addjob", 50,
             args=("REPLICATE", "3", "ASYNC"), target=1.0),
    Workload("3 nodes, ADDJOB REPLICATE 1, 50 conns", "addjob", 50,
             args=("REPLICATE", "1"), target=1.0),
]
AOF_POLICIES = {
    "off": ["--appendonly", "no"],
    "everysec": ["--appendonly", "yes", "--appendfsync", "everysec"],
    "always": ["--appendonly", "yes", "--appendfsync", "always"],
}
FED_RATE = 200  # jobs/s in the federation latency measure
FED_TARGET_MS = 5.0
AOF_TARGETS = {"everysec": 0.9, "always": 0.5}  # ours with the policy / ours AOF off


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)
    targets: list[tuple[str, bool, str]] = field(default_factory=list)
    data: dict = field(default_factory=dict)

    def out(self, line: str = "") -> None:
        print(line, flush=True)
        self.lines.append(line)

    def target(self, name: str, ok: bool, shown: str) -> None:
        self.targets.append((name, ok, shown))


def rate(x: float | None) -> str:
    return "—" if x is None else f"{x / 1000:,.1f}k"


def ratio(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}x"


def cpu_us(reps: list[dict] | None, key: str = "server_cpu_us") -> str:
    """The rounds' median server CPU per op (``server_user_us``: its user part)."""
    if not reps:
        return "—"
    return f"{statistics.median(r.get(key, 0) for r in reps):.1f}"


def problems(reps: list[dict] | None) -> list[str]:
    return [r["problem"] for r in reps or [] if r.get("problem")]


# ------------------------------------------------------------------ one workload


def run_once(nodes: list[Server], w: Workload, n: int, max_s: float, kind: str) -> dict:
    """One run of ``w`` on empty nodes (each run starts from DEBUG FLUSHALL / FLUSHALL)."""
    for s in nodes:
        s.flush()
    redis = kind == "redis"
    if w.preload:  # enough for the run, with COUNT's over-fetch
        fill = loadgen(nodes, "lpush" if redis else "addjob", 50, 16, n + 200 * w.conns,
                       max_seconds=max_s)
        if fill.get("problem"):
            return {**fill, "ops_per_sec": 0.0, "problem": "preload: " + fill["problem"]}
    timeout = 5000 if w.args and w.args[0] == "REPLICATE" else 0
    rep = loadgen(nodes, w.redis_mode if redis else w.mode, w.conns, w.pipeline, n,
                  args=() if redis else w.args, addjob_timeout=timeout, max_seconds=max_s)
    if w.args[:1] == ("REPLICATE",) and rep["ops"]:
        # every job on min(R, nodes) of them: R = nodes, each holds all; R = 1, they
        # hold one copy each between them (the load generator spreads over the nodes)
        copies = min(int(w.args[1]), len(nodes))
        want = rep["ops"] * copies

        def ok(held: list[int]) -> bool:
            return sum(held) == want and (copies < len(nodes) or len(set(held)) == 1)

        deadline = time.monotonic() + 15
        held = [s.info_int("jobs", "registered_jobs") for s in nodes]
        while not ok(held) and time.monotonic() < deadline:
            time.sleep(0.2)
            held = [s.info_int("jobs", "registered_jobs") for s in nodes]
        if not ok(held):
            rep["problem"] = (rep["problem"] + "; " if rep["problem"] else "") + \
                f"copies held per node {held}, want {want} in all"
    return rep


def compare(rep: Report, title: str, workloads: list[Workload], sides: dict[str, list[Server]],
            a) -> None:
    """Every workload on every side, in alternating rounds; one table row each."""
    n = a.cluster_requests if title.startswith("cluster") else a.requests
    rep.out(f"\n## {title}: {n:,} requests per run, median of {a.rounds} alternating rounds\n")
    if "c" not in sides:
        rep.out(f"C Disque: not found ({a.c_missing}): its columns are skipped.\n")
    extra = [k for k in ("floor", "against") if k in sides]  # sides shown after C's
    rep.out("| workload | disquepy/s | C Disque/s | ours/C | target | Redis/s "
            "| CPU µs/op ours | C | user µs/op ours | C | "
            + "".join(f"{k}/s | {k} µs/op | {k} user | " for k in extra) + "loadgen busy |")
    rep.out("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|" + "---:|" * 3 * len(extra)
            + "---:|")
    rows = rep.data.setdefault(title, [])
    for w in workloads:
        fns = {k: (lambda k=k, w=w: run_once(sides[k], w, n, a.max_seconds, k)) for k in sides
               if k != "redis" or w.redis_mode}  # (the floor answers every mode)
        res = alternate(a.rounds, fns)
        ours, c, red = res["ours"], res.get("c"), res.get("redis")
        r = median_ratio(ours, c) if c else None
        tgt = "—"
        if w.target is not None:
            ok = r is not None and r >= w.target and not problems(ours) + problems(c)
            tgt = f">= {w.target}x " + ("PASS" if ok else "FAIL" if c else "skipped")
            if c:
                rep.target(f"{title}: {w.name} >= {w.target}x C Disque", ok, ratio(r))
        busy = max(x.get("gen_busy", 0) for reps in res.values() for x in reps)
        red_s = f"{w.redis_mode.upper()} {rate(median_rate(red))}" if red else "—"
        fl_s = "".join(f"{rate(median_rate(res[k]))} | {cpu_us(res[k])} | "
                       f"{cpu_us(res[k], 'server_user_us')} | " for k in extra)
        user = "server_user_us"
        rep.out(f"| {w.name} | {rate(median_rate(ours))} | {rate(median_rate(c)) if c else '—'} "
                f"| {ratio(r)} | {tgt} | {red_s} | {cpu_us(ours)} | {cpu_us(c)} "
                f"| {cpu_us(ours, user)} | {cpu_us(c, user)} | {fl_s}{busy:.0%} |")
        for side, reps in res.items():
            for p in dict.fromkeys(problems(reps)):
                rep.out(f"|  ! {side}: {p} |")
        rows.append({"workload": w.name, "ratio": r, "runs": res,
                     "command": " ".join(res["ours"][0]["argv"][1:])
                     if res["ours"][0].get("argv") else ""})


def side_nodes(fleet: Fleet, a, cluster: bool, redis: bool,
               single: bool = False) -> dict[str, list[Server]]:
    """Ours, C Disque, Redis; in the single section also the floor; in the single and
    cluster sections --against."""
    out: dict[str, list[Server]] = {}
    for kind in ("ours", "c"):
        if kind == "c" and not a.c_path:
            continue
        extra = a.ours_args if kind == "ours" else []
        out[kind] = fleet.cluster(kind, 3, extra) if cluster else [fleet.start(kind, extra)]
    if redis:
        out["redis"] = [fleet.start("redis")]
    if single and a.floor:
        out["floor"] = [fleet.start("floor")]
    if (single or cluster) and a.against:  # ours from another built tree: an A/B
        src = Path(a.against)  # in the same turns
        out["against"] = (fleet.cluster("ours", 3, a.ours_args, src=src) if cluster
                          else [fleet.start("ours", a.ours_args, src=src)])
    return out


# ------------------------------------------------------------------ sections


def section_single(rep: Report, a) -> None:
    with Fleet() as fleet:
        compare(rep, "single node", SINGLE, side_nodes(fleet, a, False, a.redis, single=True), a)


def section_cluster(rep: Report, a) -> None:
    with Fleet() as fleet:
        sides = side_nodes(fleet, a, True, False)
        compare(rep, "cluster", CLUSTER, sides, a)
        rep.out(f"\nFederation latency: a producer adds {FED_RATE} jobs/s to node A "
                "(ADDJOB fq <send time> 5000 REPLICATE 1), a consumer on node B loops "
                "GETJOB TIMEOUT 200 COUNT 100 FROM fq + ACKJOB; latency = arrival - send "
                f"time, first second dropped, {a.fed_seconds:g} s:\n")
        for kind, nodes in sides.items():
            for n in nodes:
                n.flush()
            lat = federation(nodes[0], nodes[1], a.fed_seconds)
            rep.data[f"federation {kind}"] = lat
            if not lat:
                rep.out(f"- {kind}: no job arrived")
                continue
            p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
            med = statistics.median(lat)
            rep.out(f"- {kind}: n {len(lat)}, median {med:.2f} ms, p99 {p99:.2f} ms")
            if kind == "ours":
                rep.target(f"federation latency median < {FED_TARGET_MS:g} ms", med <
                           FED_TARGET_MS and len(lat) >= FED_RATE * (a.fed_seconds - 1) * 0.9,
                           f"{med:.2f} ms")


def federation(a: Server, b: Server, seconds: float) -> list[float]:
    """Latencies (ms) of jobs added on ``a`` at FED_RATE/s and consumed on ``b``."""
    seen: list[tuple[int, float]] = []  # (send time ns, latency ms)
    done = threading.Event()

    def consume() -> None:
        c = b.client(timeout=10)
        while not done.is_set():
            jobs = c.execute_command("GETJOB", "TIMEOUT", 200, "COUNT", 100, "FROM", "fq")
            now = time.monotonic_ns()
            if jobs:
                seen.extend((int(j[2]), (now - int(j[2])) / 1e6) for j in jobs)
                c.execute_command("ACKJOB", *(j[1] for j in jobs))
        c.close()

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    p = a.client(timeout=10)
    start = time.monotonic()
    for i in range(int(seconds * FED_RATE)):
        time.sleep(max(0.0, start + i / FED_RATE - time.monotonic()))
        p.execute_command("ADDJOB", "fq", str(time.monotonic_ns()), 5000, "REPLICATE", 1)
    time.sleep(1)
    done.set()
    t.join(5)
    p.close()
    return sorted(ms for sent, ms in seen if sent >= (start + 1) * 1e9)


def section_memory(rep: Report, a) -> None:
    n = a.memory_jobs
    rep.out(f"\n## memory: resident bytes per queued {16}-byte job, RSS delta over "
            f"{n:,} jobs, fresh servers\n")
    per: dict[str, float] = {}
    with Fleet() as fleet:
        for kind, nodes in side_nodes(fleet, a, False, a.redis).items():
            s = nodes[0]
            before = s.rss()
            r = loadgen([s], "lpush" if kind == "redis" else "addjob", 50, 16, n,
                        max_seconds=max(a.max_seconds, 300))
            time.sleep(1)
            per[kind] = (s.rss() - before) / max(r["ops"], 1)
            extra = f" ({r['problem']})" if r["problem"] else ""
            rep.out(f"- {kind}: {per[kind]:,.0f} B/job{extra}")
    rep.data["memory"] = per
    if "c" in per:
        ok = per["ours"] <= per["c"]
        rep.target("memory per queued job <= C Disque's", ok,
                   f"{per['ours']:.0f} B vs {per['c']:.0f} B")
    else:
        rep.out(f"- C Disque: not found ({a.c_missing}): skipped")


def probe(port: int, stop: threading.Event, out: list[tuple[float, float]]) -> None:
    """PING every 1 ms on its own connection (no catch-up burst when late):
    (send time, latency) in seconds."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        end = time.monotonic() + 300
        while not stop.is_set() and time.monotonic() < end:
            t0 = time.monotonic()
            s.sendall(b"PING\r\n")
            buf = b""
            while not buf.endswith(b"\r\n"):
                chunk = s.recv(64)
                if not chunk:
                    return
                buf += chunk
            out.append((t0, time.monotonic() - t0))
            time.sleep(max(0.0, t0 + 0.001 - time.monotonic()))


def rewrite_pause(fleet: Fleet, kind: str, jobs: int, max_s: float) -> str:
    s = fleet.start(kind, AOF_POLICIES["everysec"] + ["--auto-aof-rewrite-percentage", "0"])
    loadgen([s], "addjob", 50, 16, jobs, max_seconds=max_s)
    samples: list[tuple[float, float]] = []
    stop = threading.Event()
    t = threading.Thread(target=probe, args=(s.port, stop, samples), daemon=True)
    t.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    s.call("BGREWRITEAOF")
    while time.monotonic() - t0 < 120:
        time.sleep(0.01)
        p = s.call("INFO", "persistence")
        if not p["aof_rewrite_in_progress"] and not p.get("aof_rewrite_scheduled"):
            break
    took = time.monotonic() - t0
    stop.set()
    t.join(10)
    during = sorted(lat * 1000 for ts, lat in samples if ts + lat >= t0 and ts <= t0 + took)
    if not during:
        return f"rewrite {took:.2f} s, no PING during it"
    p99 = during[min(len(during) - 1, int(len(during) * 0.99))]
    return (f"rewrite of {jobs:,} jobs {took:.2f} s; PING every 1 ms during it: "
            f"n {len(during)}, p50 {statistics.median(during):.2f} ms, p99 {p99:.2f} ms, "
            f"max {during[-1]:.1f} ms")


def section_aof(rep: Report, a) -> None:
    n = a.requests
    rep.out(f"\n## aof: ADDJOB, 50 conns, {n:,} jobs per run, median of {a.rounds} rounds "
            f"(filesystem of {Path(os.environ.get('TMPDIR', '/tmp'))})\n")
    kinds = ["ours", "c"] if a.c_path else ["ours"]
    w = Workload("ADDJOB, 50 conns", "addjob", 50)
    with Fleet() as fleet:
        nodes = {(k, p): [fleet.start(k, extra)] for p, extra in AOF_POLICIES.items()
                 for k in kinds}
        if a.against:  # our node from another built tree: an A/B in the same turns
            for p, extra in AOF_POLICIES.items():
                nodes[("against", p)] = [fleet.start("ours", extra, src=Path(a.against))]

        def one(key):
            os.sync()  # every run starts with a clean page cache
            return run_once(nodes[key], w, n, a.max_seconds, key[0])

        res = alternate(a.rounds, {key: (lambda key=key: one(key)) for key in nodes})
        ab = " against/s | ours/against |" if a.against else ""
        rep.out("| appendfsync | disquepy/s | vs AOF off | C Disque/s | vs AOF off | ours/C "
                f"| target |{ab}")
        rep.out("|---|---:|---:|---:|---:|---:|---|" + ("---:|---:|" if a.against else ""))
        for p in AOF_POLICIES:
            ours, c = res[("ours", p)], res.get(("c", p))
            vs = median_ratio(ours, res[("ours", "off")])
            cvs = median_ratio(c, res[("c", "off")]) if c else None
            tgt = "—"
            if p in AOF_TARGETS:
                ok = vs is not None and vs >= AOF_TARGETS[p] and not problems(ours)
                tgt = f">= {AOF_TARGETS[p]}x off " + ("PASS" if ok else "FAIL")
                rep.target(f"aof: appendfsync {p} >= {AOF_TARGETS[p]}x AOF off", ok, ratio(vs))
            other = res.get(("against", p))
            ab = (f" {rate(median_rate(other))} | {ratio(median_ratio(ours, other))} |"
                  if other else "")
            rep.out(f"| {p} | {rate(median_rate(ours))} | {ratio(vs)} "
                    f"| {rate(median_rate(c)) if c else '—'} | {ratio(cvs)} "
                    f"| {ratio(median_ratio(ours, c) if c else None)} | {tgt} |{ab}")
            for pr in dict.fromkeys(problems(ours) + problems(c) + problems(other)):
                rep.out(f"|  ! {pr} |")
        rep.out("")
        for k in kinds:
            rep.out(f"- {k}: {rewrite_pause(fleet, k, a.aof_jobs, a.max_seconds)}")


def section_script(rep: Report, a, name: str, args: tuple[str, ...] = (),
                   title: str | None = None) -> None:
    """bench/<name>.py in a subprocess (its output passed through); its PASS/FAIL lines
    become targets, named after ``title`` (default ``name``)."""
    argv = [sys.executable, str(BENCH / f"{name}.py"), *(["--quick"] if a.quick else []),
            *args]
    name = title or name
    rep.out(f"\n## {name}: `{' '.join(argv[1:])}`\n")
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=a.script_timeout)
        text, rc = r.stdout, r.returncode
    except subprocess.TimeoutExpired as e:
        text, rc = (e.stdout or b"").decode(errors="replace"), "timeout"
    for line in text.splitlines():
        rep.out(line)
        m = re.search(r"\b(PASS|FAIL)\b", line)
        if m and not line.lstrip().startswith("|"):
            what = re.sub(r"\s*\b(PASS|FAIL)\b:?\s*", " ", line).strip()
            rep.target(f"{name}: {what}", m.group(1) == "PASS", "")
    if rc not in (0, 1):  # 1: a target failed (listed above)
        rep.target(f"{name} benchmark ran", False, f"exit {rc}")


# ------------------------------------------------------------------ main


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default=",".join(DEFAULT_SECTIONS),
                    help=f"sections, comma-separated, of {','.join(SECTIONS)} "
                    "(default: %(default)s)")
    ap.add_argument("--quick", action="store_true", help="smoke run: small, 1 round")
    ap.add_argument("--rounds", type=int, help="alternating rounds (default 3, quick 1)")
    ap.add_argument("--requests", type=int, help="requests per single-node and aof run "
                    "(default 100000, quick 10000)")
    ap.add_argument("--cluster-requests", type=int, help="requests per cluster run "
                    "(default 50000, quick 5000)")
    ap.add_argument("--memory-jobs", type=int, help="jobs for memory (default 1000000, "
                    "quick 100000)")
    ap.add_argument("--aof-jobs", type=int, help="jobs rewritten (default 200000, quick 20000)")
    ap.add_argument("--fed-seconds", type=float, help="federation latency run, seconds "
                    "(default 10, quick 3)")
    ap.add_argument("--ours-args", default="", help="extra arguments for our server, "
                    "e.g. '--event-log yes'")
    ap.add_argument("--no-redis", dest="redis", action="store_false",
                    help="skip the Redis columns")
    ap.add_argument("--no-floor", dest="floor", action="store_false",
                    help="single: skip bench/floor.py, the do-nothing uvloop server whose "
                    "rate and CPU per request are the shell's floor")
    ap.add_argument("--against", metavar="SRC", help="single, cluster, aof and streams: also "
                    "run our node(s) from SRC (another built tree's src/, e.g. a worktree of "
                    "main) as the side 'against', in the same alternating rounds")
    ap.add_argument("--max-seconds", type=float, default=60.0, help="bound of each loadgen run")
    ap.add_argument("--script-timeout", type=float, default=1800.0,
                    help="bound of the client and spark sections, seconds")
    ap.add_argument("--json", metavar="PATH", help="write every run's figures to PATH")
    ap.add_argument("--strict", action="store_true", help="exit 1 if any target FAILs")
    a = ap.parse_args(argv)
    q = a.quick
    for k, full, quick in (("rounds", 3, 1), ("requests", 100_000, 10_000),
                           ("cluster_requests", 50_000, 5_000),
                           ("memory_jobs", 1_000_000, 100_000), ("aof_jobs", 200_000, 20_000),
                           ("fed_seconds", 10, 3)):
        if getattr(a, k) is None:
            setattr(a, k, quick if q else full)
        if getattr(a, k) <= 0:
            ap.error(f"--{k.replace('_', '-')} must be positive")
    a.only = [s.strip() for s in a.only.split(",") if s.strip()]
    if set(a.only) - set(SECTIONS):
        ap.error(f"--only: unknown section(s) {', '.join(sorted(set(a.only) - set(SECTIONS)))}")
    a.ours_args = a.ours_args.split()
    if a.redis and not shutil.which("redis-server"):
        log("bench: redis-server not found (apt-get install redis-server): no Redis columns")
        a.redis = False
    a.c_path = find_disque_c()
    a.c_missing = "set DISQUE_C, or put it at ../shared/anchors/disque/disque-server"
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    stop_on_sigterm()
    rep = Report()
    started = time.monotonic()
    rep.out(f"# disquepy benchmark, {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, "
            f"{os.cpu_count()} CPUs; C Disque: {a.c_path or 'not found'}")
    rep.out(f"command: {' '.join(sys.argv)}")
    sections = {"single": section_single, "memory": section_memory,
                "cluster": section_cluster, "aof": section_aof,
                "client": lambda r, a: section_script(r, a, "client"),
                "peers": lambda r, a: section_script(r, a, "peers"),
                "web": lambda r, a: section_script(r, a, "web"),
                "groups": lambda r, a: section_script(r, a, "groups", ("--only", "cluster")),
                "streams": lambda r, a: section_script(
                    r, a, "groups", ("--only", "streams", "--rounds", str(a.rounds),
                                     "--max-seconds", str(a.max_seconds),
                                     *(("--against", a.against) if a.against else ())),
                    "streams"),
                "tls": lambda r, a: section_script(r, a, "tls"),
                "celery": lambda r, a: section_script(r, a, "celery_redis"),
                "spark": lambda r, a: section_script(r, a, "spark")}
    rc = 0
    try:
        build_loadgen()
        for name in a.only:
            try:
                sections[name](rep, a)
            except HarnessError as e:
                rep.out(f"\n! {name}: could not run: {e}")
                rep.target(f"{name} ran", False, str(e).splitlines()[0])
                rc = 2
    except KeyboardInterrupt:
        log("\nbench: interrupted; servers stopped")
        return 130
    except HarnessError as e:
        log(f"bench: {e}")
        return 2
    rep.out(f"\n## targets ({time.monotonic() - started:.0f} s)\n")
    for name, ok, shown in rep.targets:
        rep.out(f"- {'PASS' if ok else 'FAIL'}  {name}" + (f": {shown}" if shown else ""))
    if a.json:
        Path(a.json).write_text(json.dumps({"report": rep.lines, "data": rep.data},
                                           indent=1, default=str))
    if rc == 0 and a.strict and not all(ok for _, ok, _ in rep.targets):
        rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
