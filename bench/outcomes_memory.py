"""Memory and speed of the outcome store (core/outcomes.py), in process.

Usage: .venv/bin/python bench/outcomes_memory.py [--n 1000000]

Fills an Outcomes store with N finished jobs (real job IDs, queue "emails", no detail,
finished 0.1 ms apart: 10k jobs/s) and prints:

* bytes per outcome by tracemalloc (what Python allocated and still holds) and by the
  process RSS delta (what the OS gave; pymalloc arenas and allocator slack included),
  next to what the store accounts (memory_bytes, the figure max_bytes bounds);
* the same by tracemalloc for the plain alternative, a dict of ID → tuple;
* µs per record (the Outcome built beforehand) while filling, in a steady state
  where a 100 ms cron expires as many as arrive, and at a 4 MB memory cap (each record
  evicts the oldest); per get (hit and miss), per expired
  outcome when a 100 ms cron expires the whole store, and a dict insert on the same
  machine for scale. Times are CPU time of this process (time.process_time), steadier
  than wall time on a shared machine; still compare figures within one run.

The issue #15 target: at most 120 bytes per finished job.
"""

from __future__ import annotations

import argparse
import gc
import random
import time
import tracemalloc

from disquepy.core.ids import JobIdGenerator
from disquepy.core.outcomes import COMPLETED, Outcome, Outcomes

BATCH = 100_000
CAP_BYTES = 4 << 20  # the capped measure: well below what N outcomes need
TARGET = 120


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def job_ids(n: int, seed: bytes = b"bench") -> list[str]:
    gen = JobIdGenerator("dcb833cf" + "0" * 32, seed)
    return [gen.next_id(3600, 1).decode() for _ in range(n)]


def outcome(jid: str, k: int) -> Outcome:
    return Outcome(jid, COMPLETED, "emails", 1, k // 10 - 2_000, k // 10, b"")


def fill(ids: list[str]) -> Outcomes:
    store = Outcomes(max_bytes=1 << 40)
    for k, jid in enumerate(ids):
        store.record(outcome(jid, k))
    return store


def by_tracemalloc(ids: list[str]) -> tuple[float, float]:
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    store = fill(ids)
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return used / len(ids), store.memory_bytes() / len(ids)


def dict_by_tracemalloc(ids: list[str]) -> float:
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    d = {jid: outcome(jid, k) for k, jid in enumerate(ids)}
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del d
    return used / len(ids)


def by_rss(ids: list[str]) -> float:
    gc.collect()
    before = rss_bytes()
    store = fill(ids)
    after = rss_bytes()
    assert len(store) == len(ids)
    return (after - before) / len(ids)


def record_all(store: Outcomes, ids: list[str]) -> float:
    """Record an outcome for each of ``ids``; the CPU seconds the records took (the
    outcomes are built outside the clock, a batch at a time)."""
    spent = 0.0
    for start in range(0, len(ids), BATCH):
        batch = [outcome(jid, start + k) for k, jid in enumerate(ids[start:start + BATCH])]
        t = time.process_time()
        for o in batch:
            store.record(o)
        spent += time.process_time() - t
    return spent


def timings(ids: list[str]) -> dict[str, float]:
    rnd = random.Random(1)
    store = Outcomes(max_bytes=1 << 40)
    insert = record_all(store, ids)
    # Steady state, as a node at 10k jobs/s keeps them: N more outcomes (finished 0.1 ms
    # apart) while a 100 ms cron expires those older than the retention (N * 0.1 ms), so
    # the store holds about N throughout and the index no longer grows.
    steady = Outcomes(retention_ms=len(ids) // 10, max_bytes=1 << 40)
    for k, jid in enumerate(ids):
        steady.record(outcome(jid, k))
    more = job_ids(len(ids) // 2, b"more")
    steady_t = steady_x = 0.0
    steady_n = 0
    for start in range(0, len(more), BATCH):
        k0 = len(ids) + start
        batch = [outcome(jid, k0 + k) for k, jid in enumerate(more[start:start + BATCH])]
        for c in range(0, len(batch), 1000):  # 1000 outcomes, then the cron
            t = time.process_time()
            for o in batch[c:c + 1000]:
                steady.record(o)
            t2 = time.process_time()
            steady_n += steady.expire(batch[c].finished_ms + 99)
            steady_x += time.process_time() - t2
            steady_t += t2 - t
    del steady
    probes = rnd.sample(ids, min(len(ids), 100_000))
    t = time.process_time()
    for jid in probes:
        store.get(jid)
    hit = time.process_time() - t
    misses = job_ids(len(probes) // 10, b"never recorded")
    t = time.process_time()
    for jid in misses:
        assert store.get(jid) is None
    miss = time.process_time() - t
    t = time.process_time()
    dropped = 0
    now = store.retention_ms
    while len(store):
        now += 100
        dropped += store.expire(now)
    expire = time.process_time() - t
    # At the memory cap (job-outcome-max-memory reached: each record drops the oldest),
    # where a node acking ~100k jobs/s sits after seconds with the default 64 MB
    capped = Outcomes(max_bytes=CAP_BYTES)
    capped_t = record_all(capped, ids)
    assert capped.dropped > 0
    del capped
    d: dict[str, Outcome] = {}
    batch = [outcome(jid, k) for k, jid in enumerate(ids[:BATCH])]
    t = time.process_time()
    for o in batch:
        d[o.job_id] = o
    dict_insert = time.process_time() - t
    return {
        "record (filling, index grows)": insert / len(ids) * 1e6,
        "record, steady": steady_t / len(more) * 1e6,
        f"record at a {CAP_BYTES >> 20} MB cap": capped_t / len(ids) * 1e6,
        "expire, steady, per outcome": steady_x / steady_n * 1e6,
        "get (hit)": hit / len(probes) * 1e6,
        "get (miss)": miss / len(misses) * 1e6,
        "expire all, per outcome": expire / dropped * 1e6,
        "dict insert (scale)": dict_insert / len(batch) * 1e6,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    n = ap.parse_args().n
    ids = job_ids(n)
    rss = by_rss(ids)
    gc.collect()
    traced, accounted = by_tracemalloc(ids)
    gc.collect()
    plain = dict_by_tracemalloc(ids[:min(n, 200_000)])
    gc.collect()
    times = timings(ids)
    print(f"outcome store, {n:,} outcomes (no detail, one queue name)")
    print(f"  bytes/outcome, tracemalloc        {traced:7.1f}")
    print(f"  bytes/outcome, RSS delta          {rss:7.1f}")
    print(f"  bytes/outcome, memory_bytes()     {accounted:7.1f}")
    print(f"  bytes/outcome, dict of tuples     {plain:7.1f}  (tracemalloc, for contrast)")
    for name, us in times.items():
        print(f"  µs {name:<30} {us:7.2f}")
    worst = max(traced, rss)
    print(f"{'PASS' if worst <= TARGET else 'FAIL'}: {worst:.1f} bytes per finished job "
          f"(target <= {TARGET})")


if __name__ == "__main__":
    main()
