"""Run many seeds, in parallel worker processes, and sum up what they found.

Workers are started fresh (``spawn``) with ``PYTHONHASHSEED=0``: if anything in the
core iterates a set of str/bytes, its order depends on the hash seed, and pinning it
keeps every run identical to its one-line replay (which pins it too).
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager

from .config import SimConfig, faults_spec
from .result import RunResult
from .world import run

HASHSEED = "0"


def _run_one(cfg: SimConfig) -> RunResult:
    return run(cfg)


def _init(fn: Callable[..., object] | None, args: tuple[object, ...]) -> None:
    """The workers' initializer (ProcessPoolExecutor types its own by its arguments:
    this one takes any)."""
    if fn is not None:
        fn(*args)


@contextmanager
def _pinned_hashseed() -> Iterator[None]:
    old = os.environ.get("PYTHONHASHSEED")
    os.environ["PYTHONHASHSEED"] = HASHSEED
    try:
        yield
    finally:
        if old is None:
            del os.environ["PYTHONHASHSEED"]
        else:
            os.environ["PYTHONHASHSEED"] = old


def run_many(
    configs: list[SimConfig],
    jobs: int | None = None,
    initializer: Callable[..., object] | None = None,
    initargs: tuple[object, ...] = (),
    on_result: Callable[[RunResult], None] | None = None,
    stop_when: Callable[[RunResult], bool] | None = None,
) -> list[RunResult]:
    """Results in the order of ``configs``. ``initializer(*initargs)`` (an importable
    function) runs once in each worker before any run, e.g. to patch the core in a test.
    ``stop_when(result)`` true ends the sweep early (the results so far are returned)."""
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(configs)))
    ctx = multiprocessing.get_context("spawn")
    results: list[RunResult] = []
    # (not multiprocessing.Pool: leaving its imap early terminates the workers, and its
    # terminate can wait forever on a lock a killed worker held; here the runs not
    # started are cancelled and those under way finish)
    with _pinned_hashseed(), ProcessPoolExecutor(jobs, mp_context=ctx, initializer=_init,
                                                 initargs=(initializer, initargs)) as pool:
        futures = [pool.submit(_run_one, c) for c in configs]
        try:
            for f in futures:
                r = f.result()
                results.append(r)
                if on_result is not None:
                    on_result(r)
                if stop_when is not None and stop_when(r):
                    break
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    return results


class Summary:
    """Totals over a sweep."""

    __slots__ = ("results", "wall_s")

    def __init__(self, results: list[RunResult], wall_s: float) -> None:
        self.results = results
        self.wall_s = wall_s

    def total(self, key: str) -> int:
        return sum(int(r.stats.get(key, 0) or 0) for r in self.results)

    def faults(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.results:
            for k, v in r.faults.items():
                out[k] = out.get(k, 0) + v
        return out

    @property
    def failed(self) -> list[RunResult]:
        return [r for r in self.results if not r.ok]

    def duplicate_rate(self) -> float:
        first = self.total("alo_delivered")
        return (
            (self.total("dup_after_ack") + self.total("dup_while_held")) / first if first else 0.0
        )

    def text(self) -> str:
        rs = self.results
        cfg = rs[0].config
        f = self.faults()
        first = self.total("alo_delivered")

        def pct(n: int) -> str:
            return f"{100 * n / first:.2f}%" if first else "-"

        lines = [
            f"seeds run: {len(rs)} (nodes {cfg.nodes}, faults {faults_spec(cfg.faults)}, "
            f"fsync {cfg.fsync}, "
            f"{cfg.duration_s} s / {cfg.steps} commands of faults each, then heal and "
            f"quiescence) in {self.wall_s:.0f} s",
            "faults injected: "
            + (" ".join(f"{k}={v}" for k, v in f.items() if v) or "none")
            + f"; restarts={self.total('restarts')} aof_records_lost="
            f"{self.total('aof_records_lost')} torn_tails={self.total('aof_torn_tails')}",
            f"jobs: added {self.total('jobs_added')} (ID replies), delivered "
            f"{self.total('jobs_delivered')} ({first} at-least-once), deliveries "
            f"{self.total('deliveries')}, acks {self.total('acks')}",
            f"lost = {self.total('lost')} (at-least-once jobs with an ID never delivered); "
            f"excused by crashes: {self.total('excused_lost')} never delivered, "
            f"{self.total('excused_unfinished')} never acked "
            f"({self.total('copies_lost')} copies lost with their node's unsynced AOF)",
            f"duplicate rate = {pct(self.total('dup_after_ack') + self.total('dup_while_held'))}"
            f" of at-least-once jobs delivered: {self.total('dup_after_ack')} after a client acked "
            f"({pct(self.total('dup_after_ack'))}), {self.total('dup_while_held')} while a "
            f"consumer still held it ({pct(self.total('dup_while_held'))}); "
            f"{self.total('redelivered_requested')} requested (NACK / consumer gone)",
            f"failures: {len(self.failed)} seed(s)",
        ]
        if cfg.groups:  # the consumer-group workload (sim/groups.py)
            lines.insert(-1, (
                f"groups: events added {self.total('events_added')} (+"
                f"{self.total('events_noblock')} NOBLOCK), deliveries "
                f"{self.total('event_deliveries')}, acks {self.total('event_acks')} ("
                f"{self.total('multi_acks')} QACKs of several IDs); lost "
                f"{self.total('events_lost')} (excused by crashes: "
                f"{self.total('events_excused')}, {self.total('event_copies_lost')} copies "
                f"lost); double leases {self.total('double_leases')}, deliveries after an "
                f"ack {self.total('after_ack')} (both counted under faults); IDs ordered "
                f"{self.total('ids_ordered')}, IDEMPOTENT retries "
                f"{self.total('idempotent_retries')}"))
        for r in self.failed:
            kinds = ",".join(f"{k}={v}" for k, v in sorted(r.fail_counts.items()))
            lines.append(f"  seed {r.config.seed}: {kinds}")
            if r.failures:
                lines.append(f"    first: {r.failures[0]!r}"[:400])
            lines.append(f"    replay: {r.config.replay_command()}")
        return "\n".join(lines)


def sweep(
    configs: list[SimConfig],
    jobs: int | None = None,
    on_result: Callable[[RunResult], None] | None = None,
) -> Summary:
    t = time.monotonic()
    results = run_many(configs, jobs, on_result=on_result)
    return Summary(results, time.monotonic() - t)
