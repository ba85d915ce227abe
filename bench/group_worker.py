#!/usr/bin/env python3
"""The group worker's batches (issue #31, the ``--group`` half): one ``GroupWorker``
thread with a no-op handler drains N events queued on one node, leasing one event per
``QGET`` (``prefetch=0``) against ``QGET ... COUNT n`` batches (the default prefetch),
in alternating rounds of the same run. Reports events/s and the worker's CPU per event
(this process: the worker's threads and the client).

    .venv/bin/python bench/group_worker.py [--events 20000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servers import Fleet, alternate  # noqa: E402  (bench/servers.py)

from disquepy.client import Disque  # noqa: E402
from disquepy.worker import GroupWorker  # noqa: E402
from disquepy.worker.core import DEFAULT_PREFETCH  # noqa: E402


def drain(dq: Disque, queue: str, events: int, prefetch: int) -> dict:
    """Queue ``events`` events, then time one worker thread handling them all."""
    for start in range(0, events, 500):
        p = dq.pipeline()
        for i in range(start, min(events, start + 500)):
            p.qadd(queue, json.dumps({"n": i}), 600)
        p.execute()
    handled = [0]

    def handle(payload: object) -> None:
        handled[0] += 1

    cpu0, t0 = time.process_time(), time.monotonic()
    w = GroupWorker(dq, [queue], "bench", 1, handle, poll_timeout=0.2, prefetch=prefetch,
                    heartbeat=False).start()
    deadline = t0 + 120
    while handled[0] < events and time.monotonic() < deadline:
        time.sleep(0.005)
    took = time.monotonic() - t0
    w.stop(5)
    if handled[0] < events:
        raise RuntimeError(f"only {handled[0]} of {events} events handled in 120 s")
    return {"ops_per_sec": events / took,
            "cpu_us_per_event": 1e6 * (time.process_time() - cpu0) / events}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    logging.getLogger("disquepy.worker").setLevel(logging.WARNING)
    with Fleet() as fleet:
        node = fleet.start("ours")
        dq = Disque([f"127.0.0.1:{node.port}"])
        turn = [0]

        def side(prefetch: int):
            def run() -> dict:
                turn[0] += 1
                return drain(dq, f"gw{turn[0]}", a.events, prefetch)
            return run

        got = alternate(a.rounds, {"one per QGET": side(0),
                                   f"batches (prefetch {DEFAULT_PREFETCH})":
                                   side(DEFAULT_PREFETCH)})
        dq.close()
    for name, reps in got.items():
        rates = [round(r["ops_per_sec"]) for r in reps]
        cpu = [round(r["cpu_us_per_event"], 1) for r in reps]
        print(f"group-worker {name:<22} events/s {rates} (median "
              f"{statistics.median(rates):.0f}), worker CPU us/event {cpu}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
