#!/usr/bin/env python3
"""The same Celery app on disquepy (disquepy.kombu) and on kombu's Redis transport.

One disquepy node and one redis-server on free loopback ports. Each round, for each
broker in turn (alternating: disque, redis, disque, redis, ...): a fresh
``celery worker -c 2`` (prefork, ``task_acks_late``, the default prefetch, no gossip,
mingle, heartbeat or events: the same flags on both sides) on that broker, then

    burst    N no-op tasks sent from this process as fast as it can (``send_task``);
             tasks/s end to end = N / (last task run - first sent)
    latency  K tasks sent one at a time, each after the previous ran: send -> task body
             started, p50 and p99 (worker and producer on the same clock)

and where the CPU went during the burst, in ms per 1000 tasks: the worker's processes
(its main process and pool, Celery's own code plus the transport), the broker server,
and this producer process. The ratio is the median of the rounds' disque/redis ratios.
Target: disque >= 1.0x redis in tasks/s.

    .venv/bin/python bench/celery_redis.py               # 3 rounds, 5000 tasks: ~3 min
    .venv/bin/python bench/celery_redis.py --quick       # 1 round, 1000 tasks
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from servers import Fleet, HarnessError, log  # noqa: E402  (bench/servers.py)
from web import proc_cpu  # noqa: E402  (a process and its children: the worker's pool)

import disquepy.kombu  # noqa: E402, F401  (registers disque:// for the producer)

APP = '''
import os, time
from celery import Celery
import disquepy.kombu  # noqa: F401
app = Celery("benchapp", broker=os.environ["BENCH_BROKER"])
app.conf.update(task_acks_late=True, broker_connection_retry_on_startup=True,
                worker_hijack_root_logger=False)
OUT = os.environ["BENCH_OUT"]
_f = None

@app.task
def noop(sent):
    global _f
    if _f is None:
        _f = open(os.path.join(OUT, "lat-%d" % os.getpid()), "a", buffering=1)
    _f.write("%.6f\\n" % (time.time() - sent))
'''


def done_lines(out: Path) -> dict[str, list[float]]:
    """Each worker process' file: the latencies of the tasks it ran, in order."""
    vals: dict[str, list[float]] = {}
    for p in out.glob("lat-*"):
        got = vals.setdefault(p.name, [])
        for line in p.read_text().splitlines():
            with contextlib.suppress(ValueError):
                got.append(float(line))
    return vals


def count(out: Path) -> int:
    return sum(len(v) for v in done_lines(out).values())


def since(out: Path, mark: dict[str, list[float]]) -> list[float]:
    """The latencies recorded after ``mark`` (an earlier :func:`done_lines`)."""
    return [x for name, v in done_lines(out).items() for x in v[len(mark.get(name, [])):]]


def wait_count(out: Path, n: int, timeout: float) -> float:
    """Wait until ``n`` tasks have run in all; the time it happened (monotonic)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if count(out) >= n:
            return time.monotonic()
        time.sleep(0.02)
    raise HarnessError(f"only {count(out)} of {n} tasks ran in {timeout:.0f} s")


def one_side(broker_url: str, server, workdir: Path, n: int, k: int) -> dict:
    from celery import Celery

    out = workdir / "out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    env = dict(os.environ, BENCH_BROKER=broker_url, BENCH_OUT=str(out),
               PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(workdir)]))
    logf = open(workdir / "worker.log", "ab")  # noqa: SIM115
    w = subprocess.Popen([sys.executable, "-m", "celery", "-A", "benchapp", "worker", "-c", "2",
                          "--pool", "prefork", "--without-gossip", "--without-mingle",
                          "--without-heartbeat", "-l", "warning"],
                         cwd=workdir, env=env, stdout=logf, stderr=subprocess.STDOUT,
                         start_new_session=True)
    app = Celery("producer", broker=broker_url)
    app.conf.update(broker_connection_retry_on_startup=True)
    try:
        # ready: one task through (the worker's files stay open: counts, not deletes)
        app.send_task("benchapp.noop", args=(time.time(),))
        wait_count(out, 1, 60)
        base = count(out)
        cpu_w0, cpu_s0, cpu_p0 = proc_cpu(w.pid), server.cpu(), time.process_time()
        t0 = time.monotonic()
        for _ in range(n):
            app.send_task("benchapp.noop", args=(time.time(),))
        sent = time.monotonic()
        cpu_p1 = time.process_time()
        t1 = wait_count(out, base + n, 600)
        cpu_w1, cpu_s1 = proc_cpu(w.pid), server.cpu()
        per_k = 1000.0 / n
        burst = {"rate": n / (t1 - t0), "send_rate": n / (sent - t0),
                 "cpu_worker_ms": (cpu_w1 - cpu_w0) * 1000 * per_k,
                 "cpu_broker_ms": (cpu_s1 - cpu_s0) * 1000 * per_k,
                 "cpu_producer_ms": (cpu_p1 - cpu_p0) * 1000 * per_k}
        mark = done_lines(out)
        base = count(out)
        for i in range(k):
            app.send_task("benchapp.noop", args=(time.time(),))
            wait_count(out, base + i + 1, 30)
        lat = sorted(since(out, mark))
        burst["p50_ms"] = lat[len(lat) // 2] * 1000
        burst["p99_ms"] = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000
        return burst
    finally:
        app.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(w.pid, signal.SIGKILL)
        w.wait(10)
        logf.close()
        server.flush()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--tasks", type=int, help="tasks per burst (default 5000, quick 1000)")
    ap.add_argument("--latency-tasks", type=int, help="default 300, quick 50")
    a = ap.parse_args()
    rounds = a.rounds or (1 if a.quick else 3)
    n = a.tasks or (1000 if a.quick else 5000)
    k = a.latency_tasks or (50 if a.quick else 300)
    if shutil.which("redis-server") is None:
        print("celery: redis-server not found (make deps): FAIL")
        return 2
    scratch = Path(tempfile.mkdtemp(prefix="disquepy-celery-bench-"))
    try:
        (scratch / "benchapp.py").write_text(APP)
        with Fleet(scratch / "servers") as fleet:
            ours = fleet.start("ours")
            red = fleet.start("redis")
            sides = {"disque": (f"disque://127.0.0.1:{ours.port}", ours),
                     "redis": (f"redis://127.0.0.1:{red.port}/0", red)}
            res: dict[str, list[dict]] = {s: [] for s in sides}
            for r in range(rounds):
                for name, (url, server) in sides.items():
                    got = one_side(url, server, scratch, n, k)
                    res[name].append(got)
                    log(f"round {r + 1} {name}: {got['rate']:.0f} tasks/s, "
                        f"p50 {got['p50_ms']:.2f} ms, p99 {got['p99_ms']:.2f} ms")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    def med(side: str, key: str) -> float:
        return statistics.median(x[key] for x in res[side])

    ratio = statistics.median(d["rate"] / r["rate"] for d, r in zip(res["disque"], res["redis"],
                                                                     strict=True))
    print(f"Celery 5 app, no-op task, `celery worker -c 2` prefork, acks_late; {n} tasks per "
          f"burst, {k} one at a time for latency; {rounds} alternating rounds (medians)\n")
    print("| broker | tasks/s end to end | sent/s | latency p50 | latency p99 | "
          "CPU ms / 1000 tasks: worker | broker | producer |")
    print("|---|---|---|---|---|---|---|---|")
    for side in res:
        print(f"| {side} | {med(side, 'rate'):.0f} | {med(side, 'send_rate'):.0f} | "
              f"{med(side, 'p50_ms'):.2f} ms | {med(side, 'p99_ms'):.2f} ms | "
              f"{med(side, 'cpu_worker_ms'):.0f} | {med(side, 'cpu_broker_ms'):.0f} | "
              f"{med(side, 'cpu_producer_ms'):.0f} |")
    total = {s: med(s, "cpu_worker_ms") + med(s, "cpu_broker_ms") + med(s, "cpu_producer_ms")
             for s in res}
    for s in res:
        print(f"\n{s}: the Celery worker's processes take "
              f"{100 * med(s, 'cpu_worker_ms') / total[s]:.0f}% of the CPU of a task "
              f"({total[s]:.0f} ms per 1000 tasks in all)", end="")
    print("\n")
    verdict = "PASS" if ratio >= 1.0 else "FAIL"
    print(f"tasks/s disque/redis = {ratio:.2f}x (target >= 1.0x): {verdict}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
