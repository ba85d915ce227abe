#!/usr/bin/env python3
"""Benchmark the client library and the worker framework against raw redis-py.

Starts its own disquepy node on a free loopback port (scratch directory, stopped at the
end) and measures, in the same run:

    addjob   Disque.add_job(q, body)          vs  redis.Redis.execute_command("ADDJOB", ...)
    getjob   Disque.get_jobs(q, nohang=True)  vs  execute_command("GETJOB", "NOHANG", ...)
             (queue preloaded, so it never runs dry; jobs deleted between rounds)
             both: one connection each, one thread, unpipelined, interleaved in blocks
             of 100 calls (ABBA...) so both sides see the same machine noise; rate =
             calls / summed time per side. Also printed: client-side CPU per call (this
             thread's CPU time, barely disturbed by other processes' load) and the
             client layer's own cost over a stub connection (no network, no noise)
    pool     `python -m disquepy.worker builtins:id --processes 2` (concurrency 1 each, a
             no-op handler, GETJOB WITHCOUNTERS + ACKJOB per job) vs 2 processes each
             running a raw redis-py loop (GETJOB + ACKJOB per job), on the same
             preloaded queue, paused until every consumer is blocked on it; throughput
             from the moment the queue is un-paused to the last job gone; runs
             alternate raw/worker, each side's rate is its jobs over its summed time

    stages   the batched hot path, stage by stage, client CPU per job (this thread's
             CPU time; in process, one connection): encoding an ADDJOB as add_jobs
             does (client/addjobs.py), add_jobs (1000 a call) against add_job per job
             and a redis-py pipeline of 1000 ADDJOBs, AsyncDisque.add_job from 16
             coroutines (their ADDJOBs share writes: client/batch.py's Wire, what
             disque-web's POST /jobs uses), and the worker's fetch/ack round
             (GETJOB NOHANG COUNT 64 with the last batch's ACKJOB in one write) through
             the client's pipeline against a redis-py pipeline; then the worker process
             itself: its CPU per job in the pool run above

Targets: client overhead <= 15% for addjob and getjob; pool >= 0.7x raw.

    .venv/bin/python bench/client.py               # about 40 s
    .venv/bin/python bench/client.py --quick       # about 15 s
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import redis  # noqa: E402
from servers import Fleet, Server, tree_cpu  # noqa: E402  (bench/servers.py)

from disquepy.client import Disque  # noqa: E402

BODY = b"0123456789abcdef"
CPU_PER_JOB: dict[str, list[float]] = {"raw": [], "worker": []}  # us, from run_pool


def flush(r: redis.Redis) -> None:
    r.execute_command("DEBUG", "FLUSHALL")


def preload(r: redis.Redis, q: str, n: int) -> None:
    p = r.pipeline(transaction=False)
    for i in range(n):
        p.execute_command("ADDJOB", q, BODY, 0, "ASYNC")
        if i % 1000 == 999:
            p.execute()
    p.execute()


def time_ops(fn, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return n / (time.perf_counter() - t0)


def interleaved(raw_fn, cli_fn, total: int, block: int = 100) -> dict:
    """Both sides in alternating blocks of ``block`` calls (ABBAABBA...), so they share
    the machine's noise. Returns each side's summed wall time and CPU time (this thread's:
    the client-side cost, which other processes' load barely disturbs) and the calls."""
    acc = {"raw": [0.0, 0.0], "client": [0.0, 0.0]}
    perf, cpu = time.perf_counter, time.thread_time
    for i in range(total // block):
        pair = (("raw", raw_fn), ("client", cli_fn))
        if i % 2:
            pair = pair[::-1]
        for side, fn in pair:
            t0, c0 = perf(), cpu()
            for _ in range(block):
                fn()
            a = acc[side]
            a[0] += perf() - t0
            a[1] += cpu() - c0
    acc["calls"] = (total // block) * block
    return acc


def bench_overhead(node: Server, n: int, rounds: int) -> dict:
    """``rounds`` rounds of ``n`` calls per side, interleaved in blocks of 100 (see
    :func:`interleaved`); a flush before each round. Rates are over all rounds."""
    raw = node.client()
    c = Disque([f"127.0.0.1:{node.port}"])
    c.ping()
    ex = raw.execute_command
    sides = {
        "addjob": (lambda: ex("ADDJOB", "bq", BODY, 0), lambda: c.add_job("bq", BODY)),
        "getjob": (lambda: ex("GETJOB", "NOHANG", "FROM", "gq"),
                   lambda: c.get_jobs("gq", nohang=True)),
    }
    out = {}
    for name, (raw_fn, cli_fn) in sides.items():
        tot = {"raw": [0.0, 0.0], "client": [0.0, 0.0]}
        calls = 0
        for _ in range(rounds):
            flush(raw)
            if name == "getjob":
                preload(raw, "gq", 2 * n)  # never runs dry; taken jobs stay active
            acc = interleaved(raw_fn, cli_fn, n)
            calls += acc["calls"]
            for side in ("raw", "client"):
                tot[side][0] += acc[side][0]
                tot[side][1] += acc[side][1]
        out[name] = {side: (calls / tot[side][0], tot[side][1] / calls * 1e6)
                     for side in ("raw", "client")}
    flush(raw)
    c.close()
    raw.close()
    return out


def layer_cost(n: int = 100000) -> dict:
    """The client's own cost per call, in microseconds: its methods over a stub connection
    that answers instantly, minus the same stub called directly (no network, no noise)."""
    reply_id = b"D-12345678-abcdefghijklmnopqrstuvwx-05a1"

    class Stub:
        def __init__(self, reply):
            self.reply = reply

        def execute_command(self, *args):
            return self.reply

    c = Disque(["127.0.0.1:1"])
    c._addr = ("127.0.0.1", 1)
    out = {}
    for name, reply, direct, call in (
        ("addjob", reply_id, ("ADDJOB", "bq", BODY, 0), lambda: c.add_job("bq", BODY)),
        ("getjob", [[b"gq", reply_id, BODY]], ("GETJOB", "NOHANG", "FROM", "gq"),
         lambda: c.get_jobs("gq", nohang=True)),
    ):
        stub = Stub(reply)
        c._r = stub
        t0 = time.perf_counter()
        for _ in range(n):
            stub.execute_command(*direct)
        t1 = time.perf_counter()
        for _ in range(n):
            call()
        t2 = time.perf_counter()
        out[name] = ((t2 - t1) - (t1 - t0)) / n * 1e6
    return out


def stages(node: Server, n: int) -> list[tuple[str, float, float]]:
    """(stage, client CPU us per job, jobs/s) of the batched hot path (see the doc)."""
    import asyncio

    from disquepy.client import AsyncDisque, addjobs

    raw = node.client()
    c = Disque([f"127.0.0.1:{node.port}"])
    c.ping()
    out = []

    def timed(name: str, fn, jobs: int) -> None:
        flush(raw)
        t0, c0 = time.perf_counter(), time.thread_time()
        fn()
        out.append((name, (time.thread_time() - c0) / jobs * 1e6,
                    jobs / (time.perf_counter() - t0)))

    t0 = time.thread_time()
    for _ in range(n // 1000):
        addjobs.commands([BODY] * 1000, "sq", None, {})
    out.append(("encode ADDJOB (client/addjobs.py)", (time.thread_time() - t0) / n * 1e6,
                0.0))
    timed("add_jobs, 1000 a call", lambda: [c.add_jobs("sq", [BODY] * 1000)
                                             for _ in range(n // 1000)], n)

    def rp_addjobs() -> None:
        for _ in range(n // 1000):
            p = raw.pipeline(transaction=False)
            for _ in range(1000):
                p.execute_command("ADDJOB", "sq", BODY, 0)
            p.execute()

    timed("redis-py pipeline, 1000 ADDJOBs", rp_addjobs, n)
    timed("add_job, one a call", lambda: [c.add_job("sq", BODY) for _ in range(n // 10)],
          n // 10)

    async def coroutines(k: int, each: int) -> None:
        async with AsyncDisque(f"127.0.0.1:{node.port}") as a:
            async def one() -> None:
                for _ in range(each):
                    await a.add_job("sq", BODY)
            await asyncio.gather(*[one() for _ in range(k)])

    timed("AsyncDisque.add_job, 16 coroutines", lambda: asyncio.run(
        coroutines(16, n // 10 // 16)), n // 10 // 16 * 16)

    def fetch_ack(pipe) -> None:
        ids: list = []
        while True:
            p = pipe()
            if ids:
                p.execute_command("ACKJOB", *ids)
            p.execute_command("GETJOB", "NOHANG", "COUNT", 64, "WITHCOUNTERS", "FROM", "gq")
            jobs = p.execute()[-1]
            if not jobs:
                return
            ids = [j[1] for j in jobs]

    for name, pipe in (("fetch/ack round, client pipeline", c.pipeline),
                       ("fetch/ack round, redis-py pipeline",
                        lambda: raw.pipeline(transaction=False))):
        flush(raw)
        preload(raw, "gq", n)
        t0, c0 = time.perf_counter(), time.thread_time()
        fetch_ack(pipe)
        out.append((name, (time.thread_time() - c0) / n * 1e6,
                    n / (time.perf_counter() - t0)))
    flush(raw)
    c.close()
    raw.close()
    return out


def _raw_consumer(port: int, q: str, ready, go) -> None:
    r = redis.Redis(port=port, protocol=2, socket_timeout=30)
    r.ping()
    ready.set()
    go.wait()
    timeout = 20000  # the first GETJOB waits for the queue to open
    while True:
        rep = r.execute_command("GETJOB", "TIMEOUT", timeout, "FROM", q)
        if not rep:
            return
        timeout = 300
        r.execute_command("ACKJOB", rep[0][1])


def _blocked(r: redis.Redis) -> int:
    info = r.execute_command("INFO", "clients")
    if isinstance(info, dict):
        return int(info["blocked_clients"])
    return int(info.decode().split("blocked_clients:")[1].split()[0])


def _registered(r: redis.Redis) -> int:
    info = r.execute_command("INFO", "jobs")
    if isinstance(info, dict):
        return int(info["registered_jobs"])
    return int(info.decode().split("registered_jobs:")[1].split()[0])


def run_pool(node: Server, jobs: int, kind: str, procs: int = 2) -> float:
    """Consume ``jobs`` preloaded no-op jobs with ``procs`` processes; jobs/s from the
    moment the (paused) queue opens, with every consumer already blocked on it, to the
    last job deleted."""
    raw = node.client()
    flush(raw)
    q = "pool"
    raw.execute_command("PAUSE", q, "out")
    preload(raw, q, jobs)
    ctx = mp.get_context("fork")
    go = ctx.Event()
    if kind == "raw":
        readies = [ctx.Event() for _ in range(procs)]
        ps = [ctx.Process(target=_raw_consumer, args=(node.port, q, readies[i], go))
              for i in range(procs)]
        for p in ps:
            p.start()
        for e in readies:
            e.wait(30)
        go.set()
    else:
        # the real thing: python -m disquepy.worker --processes 2, a no-op handler
        # (builtins:id), raw bodies, logging at WARNING (no per-job line)
        pool = subprocess.Popen(
            [sys.executable, "-m", "disquepy.worker", "builtins:id", "--queues", q,
             "--processes", str(procs), "--concurrency", "1", "--body", "bytes",
             "--nodes", f"127.0.0.1:{node.port}", "--log-level", "WARNING",
             "--poll-timeout-ms", "300"],
            env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    deadline = time.monotonic() + 30
    while _blocked(raw) < procs and time.monotonic() < deadline:
        time.sleep(0.01)
    pids = [p.pid for p in ps] if kind == "raw" else [pool.pid]
    c0 = sum(tree_cpu(p) for p in pids)
    t0 = time.perf_counter()
    raw.execute_command("PAUSE", q, "none")
    while _registered(raw) > 0:
        time.sleep(0.005)
    rate = jobs / (time.perf_counter() - t0)
    CPU_PER_JOB[kind].append((sum(tree_cpu(p) for p in pids) - c0) / jobs * 1e6)
    if kind == "raw":
        for p in ps:
            p.join(30)
            if p.is_alive():
                p.kill()
    else:
        pool.send_signal(signal.SIGINT)
        try:
            pool.wait(30)
        except subprocess.TimeoutExpired:
            pool.kill()
    raw.close()
    return rate


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="short rounds (noisy)")
    ap.add_argument("--ops", type=int, default=None, help="commands per round")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--pool-jobs", type=int, default=None, help="jobs per pool run")
    ap.add_argument("--pairs", type=int, default=None, help="raw/worker pool run pairs")
    a = ap.parse_args()
    ops = a.ops or (2000 if a.quick else 5000)
    rounds = a.rounds or (3 if a.quick else 6)
    pool_jobs = a.pool_jobs or (5000 if a.quick else 10000)
    pairs = a.pairs or (2 if a.quick else 3)
    with Fleet() as fleet:
        node = fleet.start("ours")
        ov = bench_overhead(node, ops, rounds)
        layer = layer_cost()
        secs = {"raw": 0.0, "worker": 0.0}
        for i in range(pairs):  # alternating which side goes first
            for kind in (("raw", "worker") if i % 2 == 0 else ("worker", "raw")):
                secs[kind] += pool_jobs / run_pool(node, pool_jobs, kind)
        pool = {k: pairs * pool_jobs / v for k, v in secs.items()}
        staged = stages(node, 10000 if a.quick else 50000)
    ok = True
    print(f"client overhead vs raw redis-py (1 connection each, {ops} calls x {rounds} rounds "
          "per side, interleaved in blocks of 100):")
    for name, sides in ov.items():
        (raw_rate, raw_cpu), (cli_rate, cli_cpu) = sides["raw"], sides["client"]
        overhead = raw_rate / cli_rate - 1
        passed = overhead <= 0.15
        ok &= passed
        print(f"  {name:7s} raw {raw_rate:8.0f}/s  client {cli_rate:8.0f}/s  "
              f"overhead {overhead * 100:5.1f}%  {'PASS' if passed else 'FAIL'} (<= 15%)")
        print(f"          client-side CPU per call: raw {raw_cpu:6.1f} us  client "
              f"{cli_cpu:6.1f} us  (+{(cli_cpu / raw_cpu - 1) * 100:.1f}%); the client "
              f"layer alone over a stub connection: {layer[name]:.2f} us")
    ratio = pool["worker"] / pool["raw"]
    passed = ratio >= 0.7
    ok &= passed
    print(f"2-process pool, no-op jobs ({pool_jobs} jobs x {pairs} runs per side, "
          "alternating; jobs / summed time):")
    print(f"  raw GETJOB+ACKJOB {pool['raw']:9.0f} jobs/s  worker {pool['worker']:9.0f} "
          f"jobs/s  ratio {ratio:.2f}x  {'PASS' if passed else 'FAIL'} (>= 0.7x)")
    cpu = {k: statistics.median(v) for k, v in CPU_PER_JOB.items()}
    print(f"  CPU per job of the consumer processes: raw {cpu['raw']:.1f} us, worker "
          f"{cpu['worker']:.1f} us")
    print("\nthe hot path by stage (client CPU per job, one thread, one connection):\n")
    print("| stage | CPU us/job | jobs/s |")
    print("|---|---:|---:|")
    for name, us, rate in staged:
        print(f"| {name} | {us:.2f} | {f'{rate:,.0f}' if rate else '—'} |")
    print(f"| worker process, no-op handler (pool run) | {cpu['worker']:.2f} | — |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
