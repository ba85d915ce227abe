"""Memory and speed of the outcome store (core/outcomes.py), in process.

Usage: .venv/bin/python bench/outcomes_memory.py [--n 1000000]

Fills an Outcomes store with N finished jobs (real job IDs, queue "emails", no detail,
finished 0.1 ms apart: 10k jobs/s) and prints:

* bytes per outcome by tracemalloc (what Python allocated and still holds) and by the
  process RSS delta (what the OS gave; pymalloc arenas and allocator slack included),
  next to what the store accounts (memory_bytes, the figure max_bytes bounds);
* the same by tracemalloc for the plain alternative, a dict of ID → tuple;
* µs per record (the Outcome built beforehand), per get (hit and miss), per expired
  outcome when a 100 ms cron expires the whole store, and a dict insert on the same
  machine for scale (this shared machine's speed drifts: compare within one run).

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
TARGET = 120


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def job_ids(n: int) -> list[str]:
    gen = JobIdGenerator("dcb833cf" + "0" * 32, b"bench")
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


def timings(ids: list[str]) -> dict[str, float]:
    rnd = random.Random(1)
    store = Outcomes(max_bytes=1 << 40)
    insert = 0.0
    for start in range(0, len(ids), BATCH):
        batch = [outcome(jid, start + k) for k, jid in enumerate(ids[start:start + BATCH])]
        t = time.perf_counter()
        for o in batch:
            store.record(o)
        insert += time.perf_counter() - t
    probes = rnd.sample(ids, min(len(ids), 100_000))
    t = time.perf_counter()
    for jid in probes:
        store.get(jid)
    hit = time.perf_counter() - t
    misses = job_ids(len(probes) // 10)
    misses = [m[:2] + "00000000" + m[10:] for m in misses]  # another node's IDs
    t = time.perf_counter()
    for jid in misses:
        assert store.get(jid) is None
    miss = time.perf_counter() - t
    t = time.perf_counter()
    dropped = 0
    now = store.retention_ms
    while len(store):
        now += 100
        dropped += store.expire(now)
    expire = time.perf_counter() - t
    d: dict[str, Outcome] = {}
    batch = [outcome(jid, k) for k, jid in enumerate(ids[:BATCH])]
    t = time.perf_counter()
    for o in batch:
        d[o.job_id] = o
    dict_insert = time.perf_counter() - t
    return {
        "record": insert / len(ids) * 1e6,
        "get (hit)": hit / len(probes) * 1e6,
        "get (miss)": miss / len(misses) * 1e6,
        "expire, per outcome": expire / dropped * 1e6,
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
    print(f"  bytes/outcome, tracemalloc      {traced:7.1f}")
    print(f"  bytes/outcome, RSS delta        {rss:7.1f}")
    print(f"  bytes/outcome, memory_bytes()   {accounted:7.1f}")
    print(f"  bytes/outcome, dict of tuples   {plain:7.1f}  (tracemalloc, for contrast)")
    for name, us in times.items():
        print(f"  µs {name:<28} {us:7.2f}")
    worst = max(traced, rss)
    print(f"{'PASS' if worst <= TARGET else 'FAIL'}: {worst:.1f} bytes per finished job "
          f"(target <= {TARGET})")


if __name__ == "__main__":
    main()
