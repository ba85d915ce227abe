#!/usr/bin/env python3
"""disquepy's worker and producer against what a Python shop would pick instead: Celery,
RQ and Dramatiq on Debian's redis-server, in alternating rounds of the same run.

Every system runs its no-op task (bench/peer_tasks.py) in 2 worker processes:

    disquepy             disque-worker peer_tasks:noop --queues bench --processes 2
                         (1 handler thread each, prefetch 64 by default)
    celery               celery worker -c 2 --pool prefork, task_acks_late, prefetch 64
                         (worker_prefetch_multiplier 32 x 2 processes)
    rq                   2 x rq worker (its default Worker: a fork per job)
    dramatiq             dramatiq --processes 2 (its defaults: 8 threads, prefetch 16)
    dramatiq-prefetch64  the same with dramatiq_queue_prefetch=64 (its docs' tuning)

Per round, per system (the order rotates every round), on a flushed broker:

    enqueue   one producer process alone enqueues N jobs with the system's fastest API:
              disquepy add_jobs (1000 a call), RQ enqueue_many, Celery apply_async and
              Dramatiq send per job: jobs/s
    process   the N jobs queued, the workers started: from the first job taken to the
              last acknowledged: jobs/s, and the workers' CPU per job (every process of
              the workers' trees, from /proc: user + system, children included) and the
              broker's (our node, or redis-server for the peers)
    end2end   the workers idle and warm, a producer enqueues N more: from its first
              enqueue to the last job acknowledged, jobs/s
    latency   the workers idle, 200 jobs one every 5 ms (further apart for a system
              that needs more than 1/3 of that per job, so it is idle when each comes;
              10 s of jobs at most): from just before the enqueue call to the handler's
              start, p50 and p99

Targets (issue #31): process rate >= 2x dramatiq-prefetch64 and >= 10x celery; worker
CPU <= 50 us per no-op task; enqueue >= 30k jobs/s; latency p50 <= 1 ms. A ratio is the
median of the rounds' ratios. The load average is printed: other processes on the
machine move every figure.

The peers live in their own virtualenv, .venv-peers (`make .venv-peers/.installed`, which
`make bench` runs): they are what we compare against, not dependencies of disquepy.

    .venv/bin/python bench/peers.py                   # 3 rounds, N = 10000 (RQ: 1000)
    .venv/bin/python bench/peers.py --quick           # 1 round, N = 2000
    .venv/bin/python bench/peers.py --only disquepy,dramatiq-prefetch64 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from servers import BENCH, ROOT, Fleet, HarnessError, Server, log, stop_on_sigterm, tree_cpu

PEERS_PY = ROOT / ".venv-peers" / "bin" / "python"
SYSTEMS = ("disquepy", "celery", "rq", "dramatiq", "dramatiq-prefetch64")
QUEUE = "bench"
LATENCY_JOBS = 200
LATENCY_SECONDS = 10.0
POLL = 0.002


class System:
    """One system under test: how its workers start, how its producer runs, how many of
    its jobs are still not acknowledged."""

    def __init__(self, name: str, server: Server, scratch: Path) -> None:
        self.name = name
        self.server = server
        self.scratch = scratch
        self.ours = name == "disquepy"
        self.python = sys.executable if self.ours else str(PEERS_PY)
        self.url = (f"127.0.0.1:{server.port}" if self.ours
                    else f"redis://127.0.0.1:{server.port}/0")
        self.env = dict(os.environ, PEERS_SYSTEM=name, PEERS_URL=self.url,
                        PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(BENCH)]))
        if name == "dramatiq-prefetch64":
            self.env["dramatiq_queue_prefetch"] = "64"
        self.procs: list[subprocess.Popen] = []
        self.r = server.client()

    # -- workers

    def worker_argvs(self) -> list[list[str]]:
        py = self.python
        if self.ours:
            return [[py, "-m", "disquepy.worker", "peer_tasks:noop", "--queues", QUEUE,
                     "--nodes", self.url, "--processes", "2", "--log-level", "WARNING"]]
        if self.name == "celery":
            return [[py, "-m", "celery", "-A", "peer_tasks", "worker", "-c", "2", "--pool",
                     "prefork", "-l", "warning", "-Q", QUEUE, "--without-gossip",
                     "--without-mingle", "--without-heartbeat"]]
        if self.name == "rq":
            return [[str(PEERS_PY.parent / "rq"), "worker", "-u", self.url, "--logging_level",
                     "WARNING", "-n", f"w{i}-{os.getpid()}-{time.monotonic_ns()}", QUEUE]
                    for i in range(2)]
        return [[py, "-m", "dramatiq", "peer_tasks", "--processes", "2"]]

    def start_workers(self) -> None:
        logf = open(self.scratch / f"{self.name}-workers.log", "ab")  # noqa: SIM115
        for argv in self.worker_argvs():
            self.procs.append(subprocess.Popen(argv, cwd=BENCH, env=self.env, stdout=logf,
                                               stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL,
                                               start_new_session=True))
        logf.close()

    def stop_workers(self) -> None:
        for p in self.procs:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    p.wait(10)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self.procs.clear()

    def workers_cpu(self) -> float:
        return sum(tree_cpu(p.pid) for p in self.procs)

    def check_alive(self) -> None:
        for p in self.procs:
            if p.poll() is not None:
                tail = (self.scratch / f"{self.name}-workers.log").read_text(
                    errors="replace").splitlines()[-15:]
                raise HarnessError(f"{self.name} worker exited with {p.returncode}:\n"
                                   + "\n".join(tail))

    # -- jobs

    def produce(self, mode: str, n: int, path: Path | None = None,
                wait: bool = True) -> subprocess.Popen | dict:
        argv = [self.python, str(BENCH / "peer_tasks.py"), self.name, mode, str(n), self.url,
                *([str(path)] if path else [])]
        p = subprocess.Popen(argv, cwd=BENCH, env=self.env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        if not wait:
            return p
        out, err = p.communicate(timeout=600)
        if p.returncode != 0:
            raise HarnessError(f"{self.name} producer failed:\n{err[-2000:]}")
        return json.loads(out)

    def not_done(self) -> int:
        """Jobs enqueued and not acknowledged yet (RQ: not finished; its finished jobs
        are counted by total - finished, see ``done``)."""
        r = self.r
        if self.ours:
            return int(r.execute_command("INFO", "jobs")["registered_jobs"])
        if self.name == "celery":
            return r.llen(QUEUE) + r.hlen("unacked")
        if self.name == "rq":
            return self.total - r.zcard(f"rq:finished:{QUEUE}") - r.zcard(
                f"rq:failed:{QUEUE}")
        return r.hlen(f"dramatiq:{QUEUE}.msgs")

    def flush(self) -> None:
        self.server.flush()
        self.total = 0


def wait_until(pred: Callable[[], bool], timeout: float, what: str,
               sys_: System | None = None) -> float:
    deadline = time.monotonic() + timeout
    n = 0
    while time.monotonic() < deadline:
        if pred():
            return time.time()
        time.sleep(POLL)
        n += 1
        if sys_ is not None and n % 500 == 0:
            sys_.check_alive()
    raise HarnessError(f"timed out ({timeout:.0f} s) waiting for {what}")


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def run_system(s: System, n: int, timeout: float) -> dict:
    """One round of one system: enqueue, process, end2end, latency."""
    load0 = os.getloadavg()[0]
    s.flush()
    rep = s.produce("bulk", n)
    s.total = n
    out = {"enqueue_rate": n / rep["seconds"]}
    # process: N queued, workers started; from the first job taken to the last ack
    s.start_workers()
    try:
        wait_until(lambda: s.not_done() < n, timeout, f"{s.name} to take a job", s)
        t0, c0, b0, left0 = time.time(), s.workers_cpu(), s.server.cpu(), s.not_done()
        t1 = wait_until(lambda: s.not_done() == 0, timeout, f"{s.name} to process {n} jobs",
                        s)
        c1, b1 = s.workers_cpu(), s.server.cpu()
        done = left0
        out["process_rate"] = done / max(t1 - t0, 1e-9)
        out["cpu_us"] = (c1 - c0) / max(done, 1) * 1e6
        out["broker_us"] = (b1 - b0) / max(done, 1) * 1e6
        # end to end: idle warm workers, a producer enqueues N more
        time.sleep(0.3)
        p = s.produce("bulk", n, wait=False)
        s.total += n
        t1 = wait_until(lambda: p.poll() is not None and s.not_done() == 0, timeout,
                        f"{s.name} end to end", s)
        if p.returncode != 0:
            raise HarnessError(f"{s.name} producer failed:\n{p.stderr.read()[-2000:]}")
        t0 = json.loads(p.stdout.read())["t_first"]
        out["e2e_rate"] = n / max(t1 - t0, 1e-9)
        # latency: idle workers, one job every 5 ms (slower for a system that takes
        # longer per job: it must be idle when each arrives), 10 s at most
        time.sleep(0.3)
        gap = max(0.005, 3 / out["process_rate"])
        k = max(20, min(LATENCY_JOBS, int(LATENCY_SECONDS / gap)))
        path = s.scratch / f"{s.name}-latency-{time.monotonic_ns()}.txt"
        s.total += k
        s.produce(f"timed:{gap:.4f}", k, path)
        wait_until(lambda: s.not_done() == 0, timeout, f"{s.name} latency jobs", s)
        time.sleep(0.2)
        lat = [float(x) * 1000 for x in path.read_text().split()]
        if len(lat) != k:
            raise HarnessError(f"{s.name}: {len(lat)} latency records of {k}")
        out["p50_ms"] = statistics.median(lat)
        out["p99_ms"] = percentile(lat, 0.99)
    finally:
        s.stop_workers()
    out["load"] = (load0, os.getloadavg()[0])
    return out


def fmt(v: float, unit: str = "") -> str:
    if v >= 100:
        return f"{v:,.0f}{unit}"
    return f"{v:.2f}{unit}" if v < 10 else f"{v:.1f}{unit}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 round, N = 2000")
    ap.add_argument("--rounds", type=int, default=None, help="alternating rounds (3)")
    ap.add_argument("--jobs", type=int, default=None, help="N (10000; RQ a tenth)")
    ap.add_argument("--only", default=",".join(SYSTEMS),
                    help=f"systems, comma-separated, of {','.join(SYSTEMS)}")
    ap.add_argument("--timeout", type=float, default=300.0, help="bound of each phase (s)")
    ap.add_argument("--json", metavar="PATH", help="write every run's figures to PATH")
    a = ap.parse_args()
    rounds = a.rounds or (1 if a.quick else 3)
    n = a.jobs or (2000 if a.quick else 10000)
    names = [x.strip() for x in a.only.split(",") if x.strip()]
    bad = set(names) - set(SYSTEMS)
    if bad:
        ap.error(f"unknown system(s): {', '.join(sorted(bad))}")
    if any(x != "disquepy" for x in names) and not PEERS_PY.exists():
        log(f"bench: {PEERS_PY} missing: run `make .venv-peers/.installed` (Celery, RQ and "
            f"Dramatiq in their own virtualenv)")
        return 2
    stop_on_sigterm()
    results: dict[str, list[dict]] = {k: [] for k in names}
    scratch = Path(tempfile.mkdtemp(prefix="disquepy-peers-"))
    try:
        with Fleet() as fleet:
            ours = fleet.start("ours") if "disquepy" in names else None
            redis_srv = fleet.start("redis") if len(names) > (ours is not None) else None
            systems = {k: System(k, ours if k == "disquepy" else redis_srv, scratch)
                       for k in names}
            for r in range(rounds):
                order = names[r % len(names):] + names[:r % len(names)]
                for k in order:
                    size = max(200, n // 10) if k == "rq" else n
                    log(f"peers: round {r + 1}/{rounds}: {k}, {size} jobs")
                    results[k].append(run_system(systems[k], size, a.timeout))
    except HarnessError as e:
        log(f"bench: {e}")
        return 2
    except KeyboardInterrupt:
        return 130
    med = {k: {m: statistics.median(x[m] for x in v) for m in v[0] if m != "load"}
           for k, v in results.items()}
    loads = [x for v in results.values() for r in v for x in r["load"]]
    print(f"peers: {rounds} alternating rounds, N = {n} (RQ {max(200, n // 10)}), 2 worker "
          f"processes each, no-op task; load average {min(loads):.1f}-{max(loads):.1f} "
          f"on {os.cpu_count()} CPUs during the runs\n")
    print("| system | end to end jobs/s | process jobs/s | worker CPU µs/job | broker CPU "
          "µs/job | latency p50 | p99 | enqueue jobs/s (1 producer) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for k, m in med.items():
        print(f"| {k} | {fmt(m['e2e_rate'])} | {fmt(m['process_rate'])} | "
              f"{fmt(m['cpu_us'])} | {fmt(m['broker_us'])} | {fmt(m['p50_ms'], ' ms')} | "
              f"{fmt(m['p99_ms'], ' ms')} | {fmt(m['enqueue_rate'])} |")
    print()
    ok = True

    def ratio(other: str) -> float | None:
        if "disquepy" not in results or other not in results:
            return None
        return statistics.median(x["process_rate"] / y["process_rate"] for x, y in
                                 zip(results["disquepy"], results[other], strict=True))

    def target(what: str, passed: bool) -> None:
        nonlocal ok
        ok &= passed
        print(f"{'PASS' if passed else 'FAIL'}: {what}")

    for other, want in (("dramatiq-prefetch64", 2.0), ("celery", 10.0)):
        rr = ratio(other)
        if rr is not None:
            target(f"process rate {rr:.2f}x {other} (>= {want:g}x)", rr >= want)
    if "disquepy" in med:
        m = med["disquepy"]
        target(f"worker CPU {m['cpu_us']:.1f} us per no-op job (<= 50 us)", m["cpu_us"] <= 50)
        target(f"one producer enqueues {m['enqueue_rate']:,.0f} jobs/s with add_jobs "
               f"(>= 30,000)", m["enqueue_rate"] >= 30000)
        target(f"latency p50 {m['p50_ms']:.2f} ms with idle workers (<= 1 ms)",
               m["p50_ms"] <= 1.0)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
