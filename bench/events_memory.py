"""Memory per held event of the consumer groups' store (core/groups/store.py), in process.

Usage: .venv/bin/python bench/events_memory.py [--n 100000] [--body 16]

On one in-process node (no cluster, no AOF), QADDs N events of ``--body`` bytes to one
queue, then lets 2 and then 10 groups consume every event with ``QGET ... EX 0`` (each
group done with each event), then one more group lease every event for an hour, in
batches of ``QGET ... COUNT 100`` and then another one at a time, 1 ms apart (a lease
given alone has a timer of its own), and prints per event (per lease), after each stage:

* tracemalloc bytes (what Python allocated and still holds);
* the process RSS growth (what the OS gave; pymalloc arenas and allocator slack
  included; noisy under 100k events);
* what the node accounts (``used_memory`` growth: ``node.mem.used``).

The issue #25 target: RSS growth per held event <= 3x a Redis Stream entry's (XADD of
16-byte bodies: 37-43 B on Redis 7, so about 110 B), used_memory within ~20% of it.
A separate run per mode (``--trace``: tracemalloc, slower; default: RSS), as tracing
itself costs memory.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from disquepy.core.config import Config  # noqa: E402
from disquepy.core.node import Node  # noqa: E402

T0 = 1_000_000


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--body", type=int, default=16)
    ap.add_argument("--trace", action="store_true", help="tracemalloc instead of RSS")
    a = ap.parse_args()
    n = a.n
    node = Node(Config(), "1".zfill(40), random.Random(1), T0)
    c = node.new_client(now=T0)
    gc.collect()
    if a.trace:
        tracemalloc.start()

    def mem() -> int:
        gc.collect()
        return tracemalloc.get_traced_memory()[0] if a.trace else rss_bytes()

    base, used0 = mem(), node.mem.used
    now = T0
    for i in range(n):
        now += 1
        node.execute(c, [b"QADD", b"q", b"3600", b"%0*d" % (a.body, i)], now)
    now += 10
    node.tick(now)  # (as the server's loop: due timers fire)
    rows = [("held, no group", mem(), node.mem.used)]
    consumed = 0
    for groups in (2, 10):
        while consumed < groups:
            name = b"group%d" % consumed
            k = 0
            while node.execute(c, [b"QGET", b"q", name, b"EX", b"0"], now) != b"*-1\r\n":
                k += 1
                if k % 64 == 0:  # (a server's loop ticks between batches of commands)
                    now += 1
                    node.tick(now)
            assert k == n, (name, k)
            consumed += 1
            now += 10
            node.tick(now)
        rows.append((f"{groups} groups done", mem(), node.mem.used))
    # leases held: what each costs on top of its event while it lasts (the claim in the
    # side table, a place in a timer), leased in batches, then one at a time 1 ms apart
    leases = []
    for label, count, step in (("QGET COUNT 100", 100, 0), ("QGET one by one", 1, 1)):
        name = b"lessee%d" % count
        m0, u0 = mem(), node.mem.used
        for _ in range(n // count):
            now += step
            node.execute(c, [b"QGET", b"q", name, b"EX", b"3600", b"COUNT", b"%d" % count],
                         now)
        leases.append((label, mem() - m0, node.mem.used - u0))
    what = "tracemalloc" if a.trace else "RSS"
    print(f"{n:,} events of {a.body} B, one queue, one node in process "
          f"({'compiled' if _compiled() else 'interpreted'})")
    for label, m, used in rows:
        print(f"  {label:16} {what} {(m - base) / n:7.1f} B/event   "
              f"used_memory {(used - used0) / n:7.1f} B/event")
    for label, m, used in leases:
        print(f"  lease, {label:16} {what} {m / n:7.1f} B/lease   "
              f"used_memory {used / n:7.1f} B/lease")
    return 0


def _compiled() -> bool:
    import disquepy.core.groups.store as s

    return not s.__file__.endswith(".py")  # type: ignore[union-attr]


if __name__ == "__main__":
    sys.exit(main())
