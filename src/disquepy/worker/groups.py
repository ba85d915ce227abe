"""A worker for consumer groups (``disque-worker module:handler --queues a,b --group G``):
every group gets every event of its queues (docs/GROUPS.md); the workers of one group
share them, one event to one worker at a time.

Each of ``concurrency`` threads loops: QNOTIFY the group on the queues (up to
``poll_timeout`` seconds), QGET ... COUNT n the queue it names with a ``lease``
(``max_deliveries``: an event delivered that many times unacknowledged goes to the
group's dead letters), run the handler on each event of the batch, then QACK the ones
that succeeded, all in one round trip. n adapts as the job worker's prefetch does:
about 20 ms of handler work, at most ``1 + prefetch // concurrency`` (1 until a handler
has been timed; ``prefetch=0``: one event per QGET). Every event of a batch is leased
from its fetch: the heartbeat extends those still waiting as it does the running ones,
and on stop those not started are left to their lease. Logs: start, one line per event outcome
(``event=event id=... queue=... group=... outcome=acked``, INFO; a failure WARNING with
its traceback) and stop. A failed handler leaves the lease to run out: the
event comes back to the group then (use a short lease for a fast retry). A heartbeat
thread extends (QWORKING) the lease of a handler still running at half its lease.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis.exceptions as rexc

from ..client import Disque, DisqueError, Event, NoPermissionError
from ..client.workerinfo import WorkerInfo
from .core import DEFAULT_PREFETCH, NAME_EVERY, _decode, log_line

log = logging.getLogger("disquepy.worker")


class GroupWorker:
    def __init__(self, client: Disque, queues: Sequence[str], group: str,
                 concurrency: int, handler: Callable[[Any], Any], *, body: str = "json",
                 lease: float = 30.0, max_deliveries: int | None = None,
                 poll_timeout: float = 1.0, heartbeat: bool = True,
                 shutdown_timeout: float = 30.0, prefetch: int = DEFAULT_PREFETCH) -> None:
        if not queues:
            raise ValueError("a group worker needs queues")
        if lease <= 0:
            raise ValueError("lease must be > 0 seconds")
        self.client = client
        self.queues = list(queues)
        self.group = group
        self.concurrency = concurrency
        self.handler = handler
        self.body = body
        self.lease = lease
        self.max_deliveries = max_deliveries
        self.poll_timeout = poll_timeout
        self.heartbeat = heartbeat
        self.shutdown_timeout = shutdown_timeout
        if prefetch < 0:
            raise ValueError("prefetch must be >= 0")
        self.max_batch = 1 + prefetch // max(1, concurrency)
        self._handler_s = 0.0  # a handler's duration, moving average (0: not timed yet)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._running: dict[str, tuple[Event, float]] = {}  # event id -> (event, lease end)
        self.processed = 0
        self.failed = 0
        self.fatal: Exception | None = None  # a refusal no retry can fix (user, password)
        self._started = int(time.time())
        self._named: tuple[int, int] | None = None
        self._named_at = 0.0

    def start(self) -> GroupWorker:
        log.info("group worker started: group=%s queues=%s concurrency=%d lease=%gs",
                 self.group, ",".join(self.queues), self.concurrency, self.lease)
        for i in range(self.concurrency):
            t = threading.Thread(target=self._loop, name=f"group-worker-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        if self.heartbeat:
            t = threading.Thread(target=self._heartbeat_loop, name="group-heartbeat",
                                 daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def request_stop(self) -> None:
        self._stop.set()

    def stop(self, timeout: float | None = None) -> bool:
        """Stop fetching; wait up to ``timeout`` (default: shutdown_timeout) for running
        handlers. True if every thread ended (unfinished events come back to the group
        when their lease runs out)."""
        self._stop.set()
        deadline = time.monotonic() + (self.shutdown_timeout if timeout is None else timeout)
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        clean = not any(t.is_alive() for t in self._threads)
        log.info("group worker stopped: group=%s processed=%d failed=%d%s", self.group,
                 self.processed, self.failed,
                 "" if clean else " (handlers still running: their events come back when "
                                  "their lease ends)")
        return clean

    def run(self) -> bool:
        """Start and block until :meth:`request_stop` (or SIGTERM/SIGINT in the main
        thread), then stop gracefully."""
        import signal

        old = {}
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGTERM, signal.SIGINT):
                old[s] = signal.signal(s, lambda signum, frame: self._stop.set())
        try:
            self.start()
            while not self._stop.wait(0.2):
                pass
            return self.stop()
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    def _notify(self) -> str | None:
        """QNOTIFY; with a ``CLIENT SETNAME`` in the same write when the counts changed
        (at most once a second): the connection says who this worker is, in the job
        worker's format (:mod:`disquepy.client.workerinfo`)."""
        now = time.monotonic()
        key = (self.processed, self.failed)
        if now - self._named_at < NAME_EVERY or key == self._named:
            return self.client.qnotify(self.group, self.poll_timeout, *self.queues)
        self._named_at, self._named = now, key
        info = WorkerInfo(socket.gethostname(), os.getpid(), tuple(self.queues),
                          self.concurrency, key[0], key[1], self._started)
        p = self.client.pipeline()
        p.execute_command("CLIENT", "SETNAME", info.name())
        p.qnotify(self.group, self.poll_timeout, *self.queues)
        named, q = p.execute()
        for r in (named, q):
            if isinstance(r, Exception):
                raise r
        queue: str | None = q  # (QNOTIFY's reply, parsed)
        return queue

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                q = self._notify()
                if q is None:
                    continue
                batch = self.client.qget_many(q, self.group, self._batch_size(),
                                              lease=self.lease, with_counters=True,
                                              max_deliveries=self.max_deliveries)
            except (rexc.AuthenticationError, NoPermissionError) as exc:
                self.fatal = exc
                log.error("event=fatal error=%r: stopping (check --user, --password and the "
                          "user's role)", str(exc))
                self._stop.set()
                break
            except DisqueError as exc:
                log.warning("group %s: %s", self.group, exc)
                self._stop.wait(0.5)
                continue
            if batch:
                self._handle_batch(batch)

    def _batch_size(self) -> int:
        """Events to lease at once: about 20 ms of handler work, within max_batch."""
        if self.max_batch <= 1 or self._handler_s <= 0:
            return 1
        return max(1, min(self.max_batch, int(0.020 / self._handler_s) + 1))

    def _handle_batch(self, batch: list[Event]) -> None:
        fetched = time.monotonic()
        with self._lock:
            for e in batch:
                self._running[e.id] = (e, fetched + self.lease)
        done: list[tuple[Event, float]] = []
        try:
            for i, e in enumerate(batch):
                if self._stop.is_set():
                    log.info("group %s: stopping with %d fetched events not started: they "
                             "come back when their lease ends", self.group, len(batch) - i)
                    break
                t0 = time.monotonic()
                if self._handle(e, t0):
                    done.append((e, t0))
        finally:
            with self._lock:
                for e in batch:
                    self._running.pop(e.id, None)
            self._ack(done)

    def _handle(self, e: Event, t0: float) -> bool:
        """Run the handler on ``e``: True if it succeeded (to be acked)."""
        try:
            self.handler(_decode(e.body, self.body))
        except Exception as exc:
            self.failed += 1
            self._log(e, "failed", t0, logging.WARNING, exc=exc,
                      error=f"{exc!r}; it comes back when its lease ends")
            return False
        finally:
            took = time.monotonic() - t0
            self._handler_s = took if self._handler_s <= 0 else \
                0.8 * self._handler_s + 0.2 * took
        return True

    def _ack(self, done: list[tuple[Event, float]]) -> None:
        """QACK the events whose handler succeeded, one QACK of their IDs per queue (a
        batch comes from one queue: one command), in one round trip. Its reply counts
        the leases that were live: all of them, each event is ``acked``; fewer, which
        ran out is not told (as XACK's count), each is ``acked-partial`` (WARNING)."""
        if not done:
            return
        by_queue: dict[str, list[tuple[Event, float]]] = {}
        for item in done:
            by_queue.setdefault(item[0].queue, []).append(item)
        p = self.client.pipeline()
        for queue, items in by_queue.items():
            p.qack(queue, self.group, *[e.id for e, _ in items])
        try:
            replies = p.execute()
        except DisqueError as exc:
            replies = [exc] * len(by_queue)
        for items, r in zip(by_queue.values(), replies, strict=True):
            n = len({e.id for e, _ in items})
            for e, t0 in items:
                if isinstance(r, Exception):
                    self._log(e, "ack-failed", t0, logging.WARNING, error=repr(r))
                elif r >= n:
                    self._log(e, "acked", t0)
                elif n == 1:
                    self._log(e, "acked-late", t0, logging.WARNING,
                              error="acked after its lease ran out")
                else:
                    self._log(e, "acked-partial", t0, logging.WARNING,
                              error=f"{int(r)} of the {n} leases acked with it were live: "
                                    "the others ran out, their events come back")
                self.processed += 1

    def _log(self, e: Event, outcome: str, t0: float, level: int = logging.INFO,
             exc: BaseException | None = None, **fields: Any) -> None:
        """One line per event outcome, as the job worker logs its jobs (the same fields
        in ``record.disque``; a handler's exception is the record's exc_info)."""
        if not log.isEnabledFor(level):
            return
        d: dict[str, Any] = {"event": "event", "id": e.id, "queue": e.queue,
                             "group": self.group, "outcome": outcome,
                             "delivery": e.deliveries,
                             "duration_ms": round((time.monotonic() - t0) * 1000, 3)}
        d.update(fields)
        log.log(level, log_line(d), exc_info=exc, extra={"disque": d})

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(min(1.0, self.lease / 4)):
            now = time.monotonic()
            with self._lock:
                due = [e for e, end in self._running.values() if end - now < self.lease / 2]
            for e in due:
                try:
                    if self.client.qworking(e.queue, self.group, e.id, lease=self.lease):
                        with self._lock:
                            if e.id in self._running:
                                self._running[e.id] = (e, time.monotonic() + self.lease)
                except DisqueError as exc:
                    log.warning("group %s: QWORKING %s: %s", self.group, e.id, exc)
