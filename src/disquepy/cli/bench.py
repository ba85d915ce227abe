"""``disque bench``: produce then consume+ack a number of jobs, with a progress bar and a
summary table (jobs/s, latency percentiles)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import click
import redis
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .conn import CliError, Target
from .ui import console


@dataclass
class Phase:
    """Counts and latencies of one phase, shared by its threads."""

    name: str
    total: int
    done: int = 0
    claimed: int = 0
    errors: list[str] = field(default_factory=list)
    latencies: list[tuple[float, int]] = field(default_factory=list)  # (seconds, jobs)
    seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def claim(self, want: int) -> int:
        """Reserve up to ``want`` jobs of the total; 0 when none are left."""
        with self.lock:
            n = min(want, self.total - self.claimed)
            self.claimed += n
            return n

    def release(self, n: int) -> None:
        """Give back ``n`` reserved jobs not processed after all."""
        with self.lock:
            self.claimed -= n

    def record(self, seconds: float, jobs: int) -> None:
        with self.lock:
            self.done += jobs
            self.latencies.append((seconds, jobs))

    def fail(self, msg: str) -> None:
        with self.lock:
            self.errors.append(msg)

    def percentile(self, q: float) -> float | None:
        """The latency (seconds) below which a fraction ``q`` of the jobs fell."""
        if not self.latencies:
            return None
        pts = sorted(self.latencies)
        n = sum(j for _, j in pts)
        rank = q * n
        seen = 0
        for lat, j in pts:
            seen += j
            if seen >= rank:
                return lat
        return pts[-1][0]


def _produce(c: redis.Redis, phase: Phase, queue: str, body: bytes, pipeline: int,
             extra: list[str | int], stop: threading.Event) -> None:
    while not stop.is_set():
        n = phase.claim(pipeline)
        if n == 0:
            return
        p = c.pipeline(transaction=False)
        for _ in range(n):
            p.execute_command("ADDJOB", queue, body, 0, *extra)
        t = time.perf_counter()
        try:
            replies = p.execute(raise_on_error=False)
        except redis.RedisError as e:
            phase.fail(str(e))
            stop.set()
            return
        lat = time.perf_counter() - t
        bad = [r for r in replies if isinstance(r, Exception)]
        if bad:
            phase.fail(str(bad[0]))
            stop.set()
            return
        phase.record(lat, n)


def _consume(c: redis.Redis, phase: Phase, queue: str, pipeline: int,
             stop: threading.Event, deadline: float) -> None:
    while not stop.is_set() and time.monotonic() < deadline:
        n = phase.claim(pipeline)  # never take more than --jobs, even from a busy queue
        if n == 0:
            with phase.lock:
                if phase.done >= phase.total:
                    return
            time.sleep(0.01)  # others hold the last claims; they may still give some back
            continue
        t = time.perf_counter()
        try:
            got = c.execute_command("GETJOB", "TIMEOUT", 100, "COUNT", n, "FROM", queue)
            ids = [j[1] for j in got or ()]
            if ids:
                c.execute_command("ACKJOB", *ids)
        except redis.RedisError as e:
            phase.release(n)
            phase.fail(str(e))
            stop.set()
            return
        phase.release(n - len(ids))
        if ids:
            phase.record(time.perf_counter() - t, len(ids))


def _run(phase: Phase, progress: Progress, workers: list[threading.Thread],
         stop: threading.Event) -> None:
    task = progress.add_task(phase.name, total=phase.total)
    t = time.perf_counter()
    for w in workers:
        w.start()
    while any(w.is_alive() for w in workers):
        progress.update(task, completed=min(phase.done, phase.total))
        for w in workers:
            w.join(0.1)
    phase.seconds = time.perf_counter() - t
    progress.update(task, completed=min(phase.done, phase.total))


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.2f}"


@click.command("bench")
@click.option("-n", "--jobs", default=10000, show_default=True, type=click.IntRange(1),
              help="Jobs to produce, then consume and acknowledge.")
@click.option("-c", "--clients", default=4, show_default=True, type=click.IntRange(1, 1000),
              help="Parallel connections per phase.")
@click.option("-P", "--pipeline", default=1, show_default=True, type=click.IntRange(1, 10000),
              help="ADDJOBs per pipeline; jobs per GETJOB COUNT (acked with one ACKJOB).")
@click.option("-q", "--queue", default="disque-bench", show_default=True, help="Queue to use.")
@click.option("-d", "--body-size", default=64, show_default=True, type=click.IntRange(0),
              help="Bytes per job body.")
@click.option("-r", "--replicate", default=None, type=click.IntRange(1),
              help="REPLICATE for ADDJOB (default: the server's).")
@click.option("--timeout", default=300.0, show_default=True, type=click.FloatRange(0.1),
              help="Give up consuming after this many seconds.")
@click.pass_obj
def command(target: Target, jobs: int, clients: int, pipeline: int, queue: str,
            body_size: int, replicate: int | None, timeout: float) -> None:
    """Load test: produce --jobs jobs into --queue, then consume and acknowledge them, and
    print jobs/s and latency p50/p99 for each phase."""
    probe = target.redis(socket_timeout=10)
    probe.ping()
    before = int(probe.execute_command("QLEN", queue))
    body = b"x" * body_size
    extra = ["REPLICATE", replicate] if replicate else []
    conns = [target.redis(socket_timeout=30) for _ in range(clients)]
    produce = Phase("produce", jobs)
    consume = Phase("consume+ack", jobs)
    stop = threading.Event()
    with Progress(TextColumn("{task.description:>12}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console(stderr=True)) as progress:
        _run(produce, progress, [threading.Thread(
            target=_produce, args=(c, produce, queue, body, pipeline, extra, stop),
            daemon=True) for c in conns], stop)
        if not produce.errors:
            deadline = time.monotonic() + timeout
            _run(consume, progress, [threading.Thread(
                target=_consume, args=(c, consume, queue, pipeline, stop, deadline),
                daemon=True) for c in conns], stop)
    left = int(probe.execute_command("QLEN", queue))
    table = Table(title=f"disque bench: {jobs} jobs, {clients} clients, pipeline {pipeline}, "
                        f"{body_size}-byte bodies on {target.addr}", title_justify="left")
    for col in ("Phase", "Jobs", "Errors", "Seconds", "Jobs/s", "p50 ms", "p99 ms"):
        table.add_column(col, justify="left" if col == "Phase" else "right")
    for ph in (produce, consume):
        rate = ph.done / ph.seconds if ph.seconds > 0 else 0.0
        table.add_row(ph.name, str(ph.done), str(len(ph.errors)), f"{ph.seconds:.2f}",
                      f"{rate:,.0f}", _ms(ph.percentile(0.5)), _ms(ph.percentile(0.99)))
    out = console()
    out.print(table)
    out.print(f"Queue {queue}: {before} jobs before, {left} after", markup=False)
    for ph in (produce, consume):
        if ph.errors:
            raise CliError(f"{ph.name} failed: {ph.errors[0]}")
    if consume.done < jobs:
        raise CliError(f"Only {consume.done} of {jobs} jobs consumed within {timeout:g}s")
