#!/usr/bin/env python3
"""The task and the producer of bench/peers.py, one module for every system compared.

Imported by each system's worker (``$PEERS_SYSTEM`` says which: ``disquepy``, ``celery``,
``rq``, ``dramatiq``) and run as the producer (``python peer_tasks.py SYSTEM MODE N
URL``), in the interpreter that has that system: the project's .venv for disquepy, the
peers' venv (.venv-peers, ``make .venv-peers/.installed``) for the others.

The task does nothing; with a payload ``{"t": enqueue time, "f": path}`` (the latency
runs) it first appends ``start - t`` to the file ``f``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable

SYSTEM = os.environ.get("PEERS_SYSTEM", "")
URL = os.environ.get("PEERS_URL", "")
QUEUE = "bench"


def record(payload) -> None:
    if isinstance(payload, dict) and "t" in payload:
        start = time.time()
        with open(payload["f"], "a") as f:
            f.write(f"{start - payload['t']:.6f}\n")


def noop(payload=None) -> None:
    """The no-op task (disquepy's handler; the others wrap it)."""
    if payload is not None:
        record(payload)


if SYSTEM == "celery":
    from celery import Celery

    app = Celery("peer_tasks", broker=URL)
    # the tuned Celery of issue #31: late acks, 64 prefetched per worker (2 processes x
    # multiplier 32), no result backend, JSON, one queue
    app.conf.update(task_acks_late=True, worker_prefetch_multiplier=32,
                    task_ignore_result=True, task_default_queue=QUEUE,
                    broker_connection_retry_on_startup=True, worker_hijack_root_logger=False)
    noop_task = app.task(name="noop")(noop)
elif SYSTEM.startswith("dramatiq"):
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    dramatiq.set_broker(RedisBroker(url=URL))
    noop_task = dramatiq.actor(noop, actor_name="noop", queue_name=QUEUE, max_retries=0)


def produce(system: str, mode: str, n: int, url: str, path: str | None) -> dict:
    """Enqueue ``n`` jobs with the system's own producer API (``mode``: ``bulk``, the
    fastest the API offers; ``timed:GAP``, one at a time GAP seconds apart, latency
    payloads naming the file ``path``). Returns when the first job was sent (``t_first``, unix
    seconds: imports and connecting are not counted) and how long all took."""
    send: Callable[[], None]
    per_call = 1
    if system == "disquepy":
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
        from disquepy.client import Disque

        c = Disque(url)
        c.ping()
        if mode == "bulk":
            per_call = min(1000, n)
            bodies = [b"null"] * per_call

            def send() -> None:
                ids = c.add_jobs(QUEUE, bodies)
                assert all(isinstance(i, str) for i in ids), ids[:3]
        else:
            def send() -> None:
                c.add_job(QUEUE, json.dumps({"t": time.time(), "f": path}))
    elif system == "celery":
        prod = app.producer_or_acquire().__enter__()
        prod.connection.ensure_connection()

        def send() -> None:
            payload = None if mode == "bulk" else {"t": time.time(), "f": path}
            noop_task.apply_async((payload,), producer=prod)
    elif system == "rq":
        from redis import Redis
        from rq import Queue

        q = Queue(QUEUE, connection=Redis.from_url(url))
        q.connection.ping()
        if mode == "bulk":  # RQ's batch API: enqueue_many, pipelined
            per_call = min(1000, n)

            def send() -> None:
                q.enqueue_many([Queue.prepare_data("peer_tasks.noop", (None,)) for _ in range(per_call)])
        else:
            def send() -> None:
                q.enqueue("peer_tasks.noop", {"t": time.time(), "f": path})
    elif system.startswith("dramatiq"):
        def send() -> None:
            noop_task.send(None if mode == "bulk" else {"t": time.time(), "f": path})
    else:
        raise SystemExit(f"unknown system {system!r}")
    if n % per_call:
        raise SystemExit(f"n must be a multiple of {per_call}")
    gap = 0.0 if mode == "bulk" else float(mode.partition(":")[2] or 0.005)
    t_first = time.time()
    t0 = time.perf_counter()
    for _ in range(n // per_call):
        send()
        if gap:
            time.sleep(gap)
    return {"enqueued": n, "seconds": time.perf_counter() - t0, "t_first": t_first}


if __name__ == "__main__":
    system, mode, n, url = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    path = sys.argv[5] if len(sys.argv) > 5 else None
    print(json.dumps(produce(system, mode, n, url, path)))
