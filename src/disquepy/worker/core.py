"""The worker: fetch jobs in batches, run handlers in threads, heartbeat, ack, retry with
back-off, dead-letter."""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import math
import os
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from redis import exceptions as rexc

from ..client import Disque, DisqueError, Job, NoJobError, NoPermissionError
from ..client.deadletter import DEAD_TTL, DEFAULT_DLQ, dead_letter_body, dead_queue_name
from ..client.envelope import DEFAULT_POLICY, RetryPolicy, job_policy, unwrap
from ..client.nodes import NodeSpec
from ..client.priority import DEFAULT_LOW_SHARE, PriorityOrder, split
from ..client.replies import parse_show
from ..client.workerinfo import WorkerInfo
from .backoff import Backoff

log = logging.getLogger("disquepy.worker")

HEARTBEAT_PROBE = 0.2  # a job held longer than this gets its retry from SHOW
HEARTBEAT_FRACTION = 0.8  # WORKING at 80 % of the retry
# why a job goes to the dead letters: its attempts are used up by failures; by deliveries
# without an outcome (crashing or killed workers; dead_letter_deliveries); its TTL ends
# before the next back-off attempt (the `reason` of the log line and of the metric)
DEAD_REASONS = ("attempts", "deliveries", "ttl")
DEFAULT_PREFETCH = 64  # jobs a worker may hold beyond its free handler threads
# prefetch adapts to the handlers: jobs held waiting amount to at most this much of their
# average run time (per handler thread), so a queue of slow jobs is not hoarded by one
# worker, and a job held never waits long behind others
PREFETCH_WINDOW = 0.02
ACK_LINGER = 0.002  # handlers faster than this (average): their acks wait for the next fetch
MAX_PENDING = 512  # outcomes (acks, retries) waiting for a write at most
OUTCOME_MAX_WAIT = 0.05  # seconds an outcome waits for a fetch at most (then sent alone)
NAME_EVERY = 1.0  # seconds between CLIENT SETNAME updates (when the counts changed)
FETCH_ERROR_PAUSE = 5.0  # the longest pause after failed fetches (growing from 0.2 s)


class RetryLater(Exception):  # noqa: N818 - it is a request, not an error
    """Raise from a handler to try the job again later: it goes back to its queue after
    ``delay`` seconds (``None``: its back-off policy's delay). It counts as an attempt."""

    def __init__(self, delay: float | None = None, reason: str = "") -> None:
        super().__init__(reason or "retry later")
        self.delay = delay


@dataclass(slots=True)
class Route:
    """How the jobs of one queue are handled. ``backoff`` and ``dead_letter_after``
    (attempts before the dead letters) left ``None`` are the worker's, else
    :data:`~disquepy.client.envelope.DEFAULT_POLICY`'s."""

    handler: Callable[[Any], Any]
    body: str = "json"  # "json" | "bytes" | "text"
    backoff: Backoff | None = None
    dead_letter_after: int | None = None  # attempts (failed runs, plus deliveries lost)
    dead_letter_deliveries: int | None = None  # additional deliveries
    add_options: dict[str, Any] = field(default_factory=dict)  # for jobs the task adds (ttl, retry...)
    policy: dict[str, Any] | None = None  # a job's own retry policy (envelope)


def policy_route(route: Route, policy: RetryPolicy) -> Route:
    """``route`` with a job's own retry policy (see :mod:`disquepy.client.envelope`):
    ``max_attempts`` attempts, then a dead letter; its back-off."""
    return dataclasses.replace(route, backoff=Backoff.from_policy(policy),
                               dead_letter_after=policy.max_attempts,
                               policy=policy.to_dict())


def max_attempts(dead_letter_after: int | None, max_retries: int | None) -> int | None:
    """Attempts before the dead letters from either spelling (``None``: not given)."""
    if dead_letter_after is not None and max_retries is not None:
        raise ValueError("give dead_letter_after or max_retries, not both")
    if max_retries is not None:
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        return max_retries + 1
    if dead_letter_after is not None and dead_letter_after < 1:
        raise ValueError("dead_letter_after must be >= 1")
    return dead_letter_after


@dataclass(slots=True)
class _InFlight:
    """A job this worker holds: fetched (waiting in the buffer) or running."""

    job: Job
    start: float  # when it was fetched (monotonic): its lease runs from then or earlier
    attempt: int = 0
    started: bool = False  # its handler was called
    retry: float | None = None  # seconds; 0: at-most-once or unknown, no heartbeats
    next_hb: float = 0.0
    heartbeats: int = 0
    abandoned: bool = False  # NACKed by shutdown: the handler's result is ignored


@dataclass(slots=True)
class _Done:
    """A job whose handler succeeded, waiting for its ACK to go out."""

    job: Job
    attempt: int
    t0: float
    heartbeats: int
    result: Any = None  # what the handler returned: sent with the ACK (ACKJOB RESULT)


@dataclass(slots=True)
class _Retry:
    """A failed job waiting for its ``NACK id DELAY delay`` to go out."""

    job: Job
    attempt: int
    t0: float
    delay: int
    error: str
    exc: BaseException | None  # logged with its traceback (None for RetryLater)


_local = threading.local()


def current_job() -> Job | None:
    """The job the calling handler thread is processing (``None`` outside a handler)."""
    return getattr(_local, "job", None)


def current_attempt() -> int:
    """Which attempt of the current job this is (1 = first; each failure, and each
    delivery that ended without an outcome, adds one: the node's JOBSTATUS attempts)."""
    return getattr(_local, "attempt", 0)


def _first_id(job: Job) -> str:
    """The ID of a job's first attempt (back-off re-adds carry it in their envelope)."""
    raw = job.body if isinstance(job.body, bytes) else job.body.encode()
    return unwrap(raw).first_id or job.id


def _decode(body: bytes, mode: str) -> Any:
    if mode == "bytes":
        return body
    if mode == "text":
        return body.decode("utf-8")
    try:
        return json.loads(body)
    except ValueError:
        return body  # not JSON: the handler gets the bytes


def log_line(fields: Mapping[str, Any]) -> str:
    """An outcome's log line: ``key=value`` pairs, a value with spaces quoted."""
    return " ".join(f"{k}={v}" if " " not in str(v) else f"{k}={str(v)!r}"
                    for k, v in fields.items())


def _seconds(delay: float) -> int:
    """A delay as ``NACK ... DELAY`` takes it: whole seconds, nearest, at least 1."""
    return max(1, math.floor(delay + 0.5)) if math.isfinite(delay) else 1


class Worker:
    """A pool of handler threads consuming Disque queues.

    ``Worker(client_or_nodes, queues=[...], concurrency=N, handler=fn)``: ``N`` threads
    call ``fn(payload)`` — the body decoded as JSON by default (``body="bytes"``/``"text"``
    to get it raw; a body that is not JSON arrives as bytes).

    - Fetching, in batches: the threads share a buffer of fetched jobs; a thread that
      finds it empty fetches for all, ``GETJOB NOHANG COUNT n WITHCOUNTERS``, with the
      outcomes (acks, retries) of the jobs done since in the same write. ``n`` is the
      free handler threads plus a prefetch: up to ``prefetch`` jobs, and no more than
      about 20 ms of work at the handlers' average run time (slow jobs: no prefetch, one
      job per free thread). When nothing is queued the thread blocks in ``GETJOB TIMEOUT
      poll_timeout_ms``.
    - Order: ``priorities=True`` (the default) takes ``queues`` as logical queues with
      ``high``/``medium``/``low`` levels (``q:high``, ``q``, ``q:low``, see
      :mod:`disquepy.client.priority`), served strictly high first, the queues of one
      level in the order given — except for a ``low_share`` of the fetches that serve
      low first (so low is never starved). ``priorities=False``: the queues are served
      in the order given. A batch is filled queue by queue in that order, never taking
      a job of one queue while a queue before it had jobs.
    - Success: ``ACKJOB`` (with the handler's result, if not ``None``: ``ACKJOB ... RESULT``);
      the acks of fast handlers go out with the next fetch, one command for many jobs.
    - Long jobs: a job held (running or waiting in the buffer) longer than 0.2 s has its
      retry read with SHOW (once) and gets ``WORKING`` at 80 % of it, so it is not
      re-delivered to another worker.
    - Failure (an exception, or :class:`RetryLater`): ``NACK <id> DELAY <seconds>``, the
      same job back in its queue after its back-off (never sooner than 1 s), until its
      attempts are used up (``dead_letter_after``): then it goes to ``Q:dead`` (see
      :mod:`disquepy.client.deadletter`) and ends as ``failed`` (``FAILJOB``). Attempts
      count every delivery (failed runs, and deliveries that ended without an outcome:
      crashed or killed workers), as the node's JOBSTATUS does; a job delivered with its
      attempts used up, or ``dead_letter_deliveries`` extra deliveries, is dead-lettered
      without running. A delay reaching past the job's TTL dead-letters it at once.
    - Retry policy: a job's own (its envelope's, :class:`~disquepy.client.envelope.
      RetryPolicy`), else its queue's (:class:`Route`), else the worker's ``backoff``
      and ``dead_letter_after`` (or ``max_retries``), else
      :data:`~disquepy.client.envelope.DEFAULT_POLICY`: 3 retries 1, 2 and 4 s apart.
    - Shutdown: :meth:`run` handles SIGTERM/SIGINT: stop fetching, give the jobs waiting
      in the buffer back at once (``NACK``), let running handlers finish within
      ``shutdown_timeout`` seconds, NACK the jobs still running then. A second signal
      stops at once.
    - Logs: one record per job outcome on logger ``disquepy.worker``
      (``event=job job=<id> queue=<q> outcome=acked attempt=1 duration_ms=3.1``), the
      same fields in ``record.disque``; a handler's exception is the record's
      ``exc_info`` (its traceback) and the outcome a WARNING.
    - Presence: the fetching connection is named with ``CLIENT SETNAME`` in the
      :mod:`disquepy.client.workerinfo` format (host, pid, queues, concurrency, jobs done
      and failed), renamed as the counts change, so a node's ``CLIENT LIST`` (and the
      dashboard) shows the workers it serves.

    ``routes`` (queue -> :class:`Route`) lets each queue have its own handler and policy
    (that is what :class:`~disquepy.worker.Tasks` builds). ``metrics``: a
    :class:`~disquepy.worker.metrics.WorkerMetrics` that counts outcomes and times
    handlers (``--metrics-port`` serves it over HTTP).
    """

    def __init__(self, client_or_nodes: Disque | NodeSpec | Sequence[NodeSpec] | None = None,
                 queues: Sequence[str] | None = None, concurrency: int = 1,
                 handler: Callable[[Any], Any] | None = None, *,
                 routes: Mapping[str, Route] | None = None, body: str = "json",
                 backoff: Backoff | None = None, dead_letter_after: int | None = None,
                 dead_letter_deliveries: int | None = None, max_retries: int | None = None,
                 dead_letter_queue: str = DEFAULT_DLQ, shutdown_timeout: float = 30.0,
                 poll_timeout_ms: int = 1000, heartbeat: bool = True,
                 ack: str = "ack", add_options: Mapping[str, Any] | None = None,
                 logger: logging.Logger | None = None, priorities: bool = True,
                 low_share: float = DEFAULT_LOW_SHARE, metrics: Any = None,
                 prefetch: int = DEFAULT_PREFETCH) -> None:
        if isinstance(client_or_nodes, Disque):
            self.client = client_or_nodes
            self._own_client = False
        else:
            self.client = Disque(client_or_nodes)
            self._own_client = True
        attempts = max_attempts(dead_letter_after, max_retries)
        self.routes: dict[str, Route] = dict(routes or {})
        self.logical_queues = list(queues) if queues else list(self.routes)
        # priorities: ``queues`` (and routes' keys) are logical queues, each served as its
        # high, medium and low Disque queues (see disquepy.client.priority)
        self._order: PriorityOrder | None = None
        if priorities and self.logical_queues:
            self._order = PriorityOrder(self.logical_queues, low_share)
            if handler is None:
                self.routes = {dq: self.routes[split(dq)[0]] for dq in self._order.disque_queues
                               if split(dq)[0] in self.routes}
            queues = self._order.disque_queues
        if handler is not None:
            if not queues:
                raise ValueError("a handler needs queues=[...]")
            for q in queues:
                self.routes.setdefault(q, Route(handler, body, backoff, attempts,
                                                dead_letter_deliveries,
                                                dict(add_options or {})))
        self.queues = list(queues) if queues else list(self.routes)
        missing = [q for q in self.queues if q not in self.routes]
        if missing or not self.queues:
            raise ValueError(f"no handler for queues {missing or '(none given)'}")
        # what a queue leaves unset is the worker's, else the default policy's
        fallback_backoff = backoff or Backoff.from_policy(DEFAULT_POLICY)
        fallback_attempts = attempts or DEFAULT_POLICY.max_attempts
        for q, rt in self.routes.items():
            self.routes[q] = dataclasses.replace(
                rt, backoff=rt.backoff or fallback_backoff,
                dead_letter_after=rt.dead_letter_after or fallback_attempts,
                dead_letter_deliveries=(rt.dead_letter_deliveries
                                        if rt.dead_letter_deliveries is not None
                                        else dead_letter_deliveries))
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if prefetch < 0:
            raise ValueError("prefetch must be >= 0")
        if ack not in ("ack", "fastack"):
            raise ValueError("ack must be 'ack' or 'fastack'")
        self.concurrency = concurrency
        self.prefetch = prefetch
        self.dead_letter_queue = dead_letter_queue
        self.shutdown_timeout = shutdown_timeout
        self.poll_timeout_ms = poll_timeout_ms
        self.heartbeat = heartbeat
        self._fast = ack == "fastack"
        self._ack = self.client.fast_ack if self._fast else self.client.ack
        self.log = logger or log
        self.metrics = metrics  # a disquepy.worker.metrics.WorkerMetrics, or None
        self.stats: Counter[str] = Counter()
        self._stats_lock = threading.Lock()
        self._inflight: dict[str, _InFlight] = {}  # every job held: buffered or running
        self._inflight_lock = threading.Lock()
        self._stop = threading.Event()  # stop fetching
        # an error no retry mends (a wrong password, a user whose role cannot take jobs):
        # the worker stops, and run() returns False
        self.fatal: Exception | None = None
        self._done = threading.Event()  # every fetch thread has exited
        self._threads: list[threading.Thread] = []
        self._hb_thread: threading.Thread | None = None
        self._hb_wake = threading.Event()
        # the threads' shared state, under _cv: jobs fetched and not started, threads
        # running a handler, whether one is fetching, outcomes waiting to be sent
        self._cv = threading.Condition()
        self._buffer: collections.deque[_InFlight] = collections.deque()
        self._busy = 0
        self._fetching = False
        self._pending: list[_Done | _Retry] = []
        self._pending_since = 0.0  # when the oldest outcome waiting was queued
        self._avg: float | None = None  # handlers' average run time (seconds)
        self._fetch_errors = 0
        self._hint = 0  # the queue (its place in the order) that served the last batch
        self._info = WorkerInfo(socket.gethostname(), os.getpid(),
                                tuple(self.logical_queues or self.queues), concurrency)
        self._named: tuple[Any, ...] | None = None
        self._named_at = 0.0

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Worker:
        """Start the handler threads (and the heartbeat thread) and return."""
        if self._threads:
            raise RuntimeError("worker already started")
        self._info = dataclasses.replace(self._info, started=int(time.time()))
        for i in range(self.concurrency):
            t = threading.Thread(target=self._loop, name=f"disque-worker-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        self._hb_thread = threading.Thread(target=self._heartbeat_loop,
                                           name="disque-heartbeat", daemon=True)
        self._hb_thread.start()
        self.log.info("worker started: queues=%s concurrency=%d prefetch=%d",
                      ",".join(self.queues), self.concurrency, self.prefetch)
        return self

    def request_stop(self) -> None:
        """Stop fetching new jobs (running handlers go on); safe from signal handlers."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        """``True`` once a stop was requested (no new jobs are fetched)."""
        return self._stop.is_set()

    def stop(self, timeout: float | None = None) -> bool:
        """Graceful stop: no new jobs, the jobs waiting in the buffer given back
        (``NACK``), wait up to ``timeout`` (default ``shutdown_timeout``) for running
        handlers, then NACK the jobs still running. Returns ``True`` if no running job
        had to be NACKed."""
        self._stop.set()
        with self._cv:
            self._cv.notify_all()
        self._release_buffer()
        deadline = time.monotonic() + (self.shutdown_timeout if timeout is None else timeout)
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        # threads still alive are either waiting in GETJOB (they give back what it
        # brings) or running a handler past the deadline: those jobs are NACKed now
        clean = self._abandon_inflight() == 0
        self._release_buffer()
        with self._cv:
            left, self._pending = self._pending, []
        if left:
            self._send(left)
        self._done.set()
        self._hb_wake.set()
        if self._hb_thread is not None:
            self._hb_thread.join(2)
        if self._own_client:
            self.client.close()
        self.log.info("worker stopped: %s", " ".join(f"{k}={v}" for k, v in
                                                      sorted(self.stats.items())))
        return clean

    def run(self, install_signals: bool = True) -> bool:
        """Start and block until SIGTERM/SIGINT (or :meth:`request_stop`), then stop
        gracefully (see :meth:`stop`). A second signal NACKs running jobs at once."""
        forced = threading.Event()
        old = {}

        def on_signal(signum: int, frame: FrameType | None) -> None:
            if self._stop.is_set():
                forced.set()
            self.log.info("signal %d: stopping (running jobs get %.1fs)", signum,
                          self.shutdown_timeout)
            self._stop.set()

        if install_signals and threading.current_thread() is threading.main_thread():
            for s in (signal.SIGTERM, signal.SIGINT):
                old[s] = signal.signal(s, on_signal)
        try:
            self.start()
            while not self._stop.wait(0.2):
                if not any(t.is_alive() for t in self._threads):
                    break
            deadline = time.monotonic() + self.shutdown_timeout
            while time.monotonic() < deadline and not forced.is_set():
                if not any(t.is_alive() for t in self._threads):
                    break
                time.sleep(0.05)
            return self.stop(timeout=0) and self.fatal is None
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    # ------------------------------------------------------------------ the threads

    def _loop(self) -> None:
        """A handler thread: take a job from the buffer and run it; when the buffer is
        empty and nobody fetches, fetch for everyone (sending the outcomes waiting)."""
        cv = self._cv
        while True:
            rec: _InFlight | None = None
            fetch = False
            out: list[_Done | _Retry] = []
            with cv:
                while not self._stop.is_set():
                    if self._buffer:
                        rec = self._buffer.popleft()
                        self._busy += 1
                        break
                    if not self._fetching:
                        self._fetching = fetch = True
                        out, self._pending = self._pending, []
                        break
                    if self._pending:  # a fetch is out (maybe waiting): send them now
                        out, self._pending = self._pending, []
                        break
                    cv.wait(0.5)
                else:
                    out, self._pending = self._pending, []
            if rec is not None:
                self._run(rec)
            elif fetch:
                self._fetch_round(out)
            elif out:
                self._send(out)
            elif self._stop.is_set():
                return

    def _run(self, rec: _InFlight) -> None:
        """Run one job; queue its outcome, sent now or with the next fetch."""
        try:
            outcome = self._process(rec)
        except Exception as e:  # a bug of the worker's own: the job is retried later
            outcome = None
            self._forget(rec.job)
            self.log.exception("event=worker-error job=%s error=%r", rec.job.id, e)
            self._retry_alone(rec.job, Backoff.from_policy(DEFAULT_POLICY), rec.attempt or 1)
        with self._cv:
            self._busy -= 1
            if outcome is not None:
                if not self._pending:
                    self._pending_since = time.monotonic()
                self._pending.append(outcome)
            pending = self._pending
            if not pending or not (
                    self._stop.is_set() or len(pending) >= MAX_PENDING
                    or (self._avg or 0.0) >= ACK_LINGER
                    or (not self._buffer and self._fetching)):
                return  # they go with the next fetch (this thread's, soon)
            self._pending = []
        self._send(pending)

    def _room(self) -> int:
        """Jobs the next fetch may take (under ``_cv``): a job per free thread, plus the
        prefetch the handlers' speed allows, less the jobs waiting already."""
        avg = self._avg
        ahead = 0 if avg is None else min(
            self.prefetch, int(PREFETCH_WINDOW * self.concurrency / max(avg, 1e-6)))
        return max(1, self.concurrency - self._busy + ahead - len(self._buffer))

    def _fetch_round(self, out: list[_Done | _Retry]) -> None:
        jobs: list[Job] = []
        try:
            jobs = self._fetch(out)
            self._fetch_errors = 0
        except (rexc.AuthenticationError, NoPermissionError) as e:
            self.fatal = e
            self.log.error("event=fatal error=%r: stopping (check --user, --password and "
                           "the user's role)", str(e))
            self._stop.set()
        except DisqueError as e:
            self._fetch_errors += 1
            self.log.warning("event=fetch-error error=%r", e)
            self._stop.wait(min(0.1 * 2 ** self._fetch_errors, FETCH_ERROR_PAUSE))
        now = time.monotonic()
        recs = [_InFlight(j, now) for j in jobs]
        if recs:
            with self._inflight_lock:
                for r in recs:
                    self._inflight[r.job.id] = r
        with self._cv:
            self._fetching = False
            if not self._stop.is_set():
                self._buffer.extend(recs)
                recs = []
            self._cv.notify_all()
        if recs:  # fetched while stopping: given back at once
            self._give_back(recs)

    def _fetch(self, out: list[_Done | _Retry]) -> list[Job]:
        """One batch for the buffer, strictly in the fetch order (a queue's jobs before
        the next queue's): the outcomes ``out`` and a ``GETJOB NOHANG COUNT`` of the queue
        that served the last batch in one write, with a ``COUNT 1`` probe of each queue
        before it (a job there moves the next batches up); the queues after it only
        while the batch is short; a blocking GETJOB over every queue when nothing is
        queued. (One GETJOB over several queues would take one job of each in turn.)"""
        order = self._order.next() if self._order is not None else self.queues
        low_first = self._order is not None and order is self._order.reverse
        with self._cv:
            room = self._room()
        hint = 0 if low_first or room <= self._hint else min(self._hint, len(order) - 1)
        p = self.client.pipeline()
        self._queue_outcomes(p, out)
        sent = len(p)
        self._queue_name(p)
        named = len(p) - sent
        for q in order[:hint]:
            p.get_jobs(q, count=1, nohang=True, with_counters=True)
        p.get_jobs(order[hint], count=room - hint, nohang=True, with_counters=True)
        try:
            replies = p.execute()
        except DisqueError as e:  # nothing is known of the outcomes: the jobs may come back
            self._outcomes_sent(out, None, e)
            raise
        self._outcomes_sent(out, replies[:sent], None)
        got: list[Job] = []
        served = None
        for i, jobs in enumerate(replies[sent + named:]):
            if isinstance(jobs, Exception):
                raise jobs
            if jobs and served is None:
                served = i
            got += jobs
        # the queues after: only when the queue served ran out (it gave less than asked)
        # and no queue before it had a job (that one's other jobs go first, next batch)
        more = served is None or (served == hint and len(replies[-1]) < room - hint)
        for i in range(hint + 1, len(order) if more else 0):
            if len(got) >= room:
                break
            jobs = self.client.get_jobs(order[i], count=room - len(got), nohang=True,
                                        with_counters=True)
            if jobs and served is None:
                served = i
            got += jobs
        if got:
            if not low_first:
                self._hint = served or 0
            return got
        self._hint = 0
        if self._stop.is_set():
            return []
        return self.client.get_jobs(order, count=room, timeout_ms=self.poll_timeout_ms,
                                    with_counters=True)

    # ------------------------------------------------------------------ outcomes on the wire

    def _queue_outcomes(self, p: Any, out: list[_Done | _Retry]) -> None:
        """The commands of ``out`` on pipeline ``p``: one ACKJOB (or FASTACK) for the acks
        without a result, one with ``RESULT`` per job that has one, one NACK ... DELAY per
        retry (:meth:`_outcomes_sent` reads their replies in the same order)."""
        ack = p.fast_ack if self._fast else p.ack
        plain = [d.job.id for d in out if isinstance(d, _Done) and d.result is None]
        if plain:
            ack(*plain)
        for d in out:
            if isinstance(d, _Done):
                if d.result is not None:
                    ack(d.job.id, result=d.result)
            else:
                p.nack(d.job.id, delay=d.delay)

    def _outcomes_sent(self, out: list[_Done | _Retry], replies: list[Any] | None,
                       error: Exception | None) -> None:
        """Log each outcome from the replies to :meth:`_queue_outcomes`'s commands."""
        if not out:
            return
        it = iter(replies or ())
        plain = [d for d in out if isinstance(d, _Done) and d.result is None]
        if plain:
            r = error or next(it)
            for done in plain:
                self._acked(done, r)
        for d in out:
            if isinstance(d, _Done):
                if d.result is not None:
                    self._acked(d, error or next(it))
            else:
                self._retried(d, error or next(it))

    def _acked(self, d: _Done, reply: Any) -> None:
        if isinstance(reply, Exception):
            self._emit(d.job, d.attempt, "ack-failed", d.t0, error=repr(reply))
        else:
            self._emit(d.job, d.attempt, "acked", d.t0, heartbeats=d.heartbeats)

    def _retried(self, d: _Retry, reply: Any) -> None:
        level = logging.WARNING if d.exc is not None else logging.INFO
        if isinstance(reply, Exception) or not reply:
            # not re-queued: the node does not hold it (or does not take NACK ... DELAY):
            # it comes back after its RETRY on its own, never sooner
            self._emit(d.job, d.attempt, "retry-failed", d.t0, error=d.error,
                       reply=repr(reply), level=logging.WARNING, exc=d.exc)
        else:
            self._emit(d.job, d.attempt, "retry-later", d.t0, delay=d.delay, error=d.error,
                       level=level, exc=d.exc)

    def _send(self, out: list[_Done | _Retry]) -> None:
        """Send outcomes now, in one write."""
        p = self.client.pipeline()
        self._queue_outcomes(p, out)
        try:
            replies = p.execute()
        except DisqueError as e:
            self._outcomes_sent(out, None, e)
            return
        self._outcomes_sent(out, replies, None)

    def _queue_name(self, p: Any) -> None:
        """``CLIENT SETNAME`` on the fetching connection, when the counts changed (at most
        once a second) or the client moved to another node."""
        now = time.monotonic()
        if now - self._named_at < NAME_EVERY:
            return
        with self._stats_lock:
            done, failed = self.stats["acked"], self.stats["dead-lettered"]
        try:
            key = (self.client.node, done, failed)
        except DisqueError:  # no node now: the fetch says so
            return
        self._named_at = now
        if key == self._named:
            return
        self._named = key
        self._info = dataclasses.replace(self._info, done=done, failed=failed)
        p.execute_command("CLIENT", "SETNAME", self._info.name())

    def _give_back(self, recs: list[_InFlight]) -> None:
        """NACK jobs fetched and never started (one command), log ``requeued-on-stop``."""
        if not recs:
            return
        with self._inflight_lock:
            for r in recs:
                self._inflight.pop(r.job.id, None)
        try:
            self.client.nack(*[r.job.id for r in recs])
        except DisqueError as e:
            self.log.warning("event=nack-error jobs=%d error=%r", len(recs), e)
        for r in recs:
            self._emit(r.job, 0, "requeued-on-stop", 0.0)

    def _release_buffer(self) -> None:
        with self._cv:
            recs = list(self._buffer)
            self._buffer.clear()
        self._give_back(recs)

    # ------------------------------------------------------------------ one job

    def _process(self, rec: _InFlight) -> _Done | _Retry | None:
        """Run the job's handler. A success or a retry is returned, to be sent by the
        caller (with the next fetch, or now); a dead letter is dealt with here."""
        job = rec.job
        t0 = time.monotonic()
        route = self.routes[job.queue]
        raw = job.body if isinstance(job.body, bytes) else job.body.encode()
        env = unwrap(raw)
        policy = job_policy(env)
        if policy is not None:
            route = policy_route(route, policy)
        # a NACK ... DELAY retry keeps the job's ID and counts a nack; a delivery that
        # ended without an outcome (a crashed worker) an additional delivery; older
        # back-off re-adds carried their attempt in the envelope
        failures = env.attempt - 1 + (job.nacks or 0)
        adeliv = job.additional_deliveries or 0
        attempt = rec.attempt = failures + adeliv + 1
        limit = route.dead_letter_after or DEFAULT_POLICY.max_attempts
        if (route.dead_letter_deliveries is not None
                and adeliv >= route.dead_letter_deliveries) or attempt > limit:
            err = (f"delivered {adeliv} extra times without an acknowledgement (worker "
                   f"crashes or timeouts)" if adeliv else "its attempts were used up")
            self._forget(job)
            self._dead_letter(job, route, env.body, err, failures, attempt - 1, t0,
                              "deliveries")
            return None
        rec.started = True
        metrics = self.metrics
        if metrics is not None:
            metrics.started(job.queue, 1)
        _local.job = job
        _local.attempt = attempt
        exc: BaseException | None = None
        result = None
        try:
            result = route.handler(_decode(env.body, route.body))
        except BaseException as e:  # the handler's failure is the job's outcome
            exc = e
        finally:
            _local.job = None
            _local.attempt = 0
            self._forget(job)
            if metrics is not None:
                metrics.started(job.queue, -1)
        took = time.monotonic() - t0
        avg = self._avg
        self._avg = took if avg is None else avg + 0.2 * (took - avg)
        if rec.abandoned:
            self._emit(job, attempt, "finished-after-nack", t0, failed=exc is not None)
            return None
        if exc is None:
            return _Done(job, attempt, t0, rec.heartbeats, result)
        return self._failed(job, route, env.body, exc, failures + 1, attempt, t0)

    def _forget(self, job: Job) -> None:
        with self._inflight_lock:
            self._inflight.pop(job.id, None)

    def _failed(self, job: Job, route: Route, body: bytes, exc: BaseException,
                failures: int, attempt: int, t0: float) -> _Retry | None:
        err = repr(exc)
        # a handler's failure is logged with its traceback; RetryLater is a request
        tb = None if isinstance(exc, RetryLater) else exc
        backoff = route.backoff or Backoff.from_policy(DEFAULT_POLICY)
        limit = route.dead_letter_after or DEFAULT_POLICY.max_attempts
        if attempt >= limit:
            self._dead_letter(job, route, body, err, failures, attempt, t0, "attempts", exc=tb)
            return None
        delay = exc.delay if isinstance(exc, RetryLater) and exc.delay is not None \
            else backoff.delay(attempt)
        delay = _seconds(delay)
        shown = self._show(job)
        left = shown.get("ttl") if shown is not None else None
        if isinstance(left, int) and 0 < left <= delay + 1:
            self._dead_letter(job, route, body, err + " (its TTL ends before the next "
                              "attempt)", failures, attempt, t0, "ttl", exc=tb)
            return None
        # back to its queue after the delay, under the same ID (NACK ... DELAY)
        return _Retry(job, attempt, t0, delay, err, tb)

    def _retry_alone(self, job: Job, backoff: Backoff, attempt: int) -> None:
        """``NACK ... DELAY`` with the back-off's delay, now (the paths where something
        else failed: never a plain NACK, which would bring the job back at once)."""
        try:
            self.client.nack(job.id, delay=backoff.delay(attempt))
        except DisqueError as e:  # it comes back after its RETRY
            self.log.warning("event=retry-error job=%s error=%r", job.id, e)

    def _dead_letter(self, job: Job, route: Route, body: bytes, err: str, failures: int,
                     attempt: int, t0: float, reason: str,
                     exc: BaseException | None = None) -> None:
        """``reason``: why the job ends here, one of :data:`DEAD_REASONS`."""
        # a priority level's dead letters go to its logical queue's dead-letter queue
        dq = dead_queue_name(split(job.queue)[0] if self._order else job.queue,
                             self.dead_letter_queue)
        first = _first_id(job)  # the dead letter names the ID the producer got
        extra = {"last_id": job.id} if first != job.id else {}
        dl = dead_letter_body(job.queue, first, body, err, failures,
                              job.additional_deliveries or 0, attempts=attempt, **extra)
        try:
            dead_id = self.client.add_job(dq, dl, ttl=DEAD_TTL)
            try:  # the job's outcome: failed with the error, on every node holding it
                self.client.fail(job.id, err[:1024], reason)
            except DisqueError:
                self._ack(job.id)  # a node without FAILJOB, or one that lost the job
        except DisqueError as e:
            self.log.warning("event=dead-letter-error job=%s error=%r", job.id, e)
            self._retry_alone(job, route.backoff or Backoff.from_policy(DEFAULT_POLICY),
                              max(attempt, 1))
            return
        self._emit(job, attempt, "dead-lettered", t0, dead_queue=dq, dead_id=dead_id,
                   reason=reason, error=err, level=logging.WARNING, exc=exc)

    def _emit(self, job: Job, attempt: int, outcome: str, t0: float, *,
              level: int = logging.INFO, exc: BaseException | None = None,
              **fields: Any) -> None:
        with self._stats_lock:
            self.stats[outcome] += 1
        if self.metrics is not None:
            self.metrics.observe(job.queue, outcome, time.monotonic() - t0 if t0 else None,
                                 fields.get("reason"))
        if not self.log.isEnabledFor(level):
            return
        d = {"event": "job", "job": job.id, "queue": job.queue, "outcome": outcome,
             "attempt": attempt,
             "duration_ms": round((time.monotonic() - t0) * 1000, 3) if t0 else 0.0}
        d.update(fields)
        self.log.log(level, log_line(d), exc_info=exc, extra={"disque": d})

    # ------------------------------------------------------------------ heartbeats

    def _heartbeat_loop(self) -> None:
        """WORKING for the jobs held long (running, or waiting behind a long one), and
        the outcomes that waited too long for a fetch sent on their own (a fast handler's
        ack must not wait for a slow one that happens to follow it)."""
        while not self._done.is_set():
            now = time.monotonic()
            with self._cv:
                out: list[_Done | _Retry] = []
                if self._pending and now - self._pending_since >= OUTCOME_MAX_WAIT:
                    out, self._pending = self._pending, []
            if out:
                self._send(out)
            if self._stop.is_set() and self._buffer:  # stopping: no job waits to start
                self._release_buffer()
            wake = now + OUTCOME_MAX_WAIT
            if not self.heartbeat:
                self._hb_wake.wait(OUTCOME_MAX_WAIT)
                continue
            with self._inflight_lock:
                recs = list(self._inflight.values())
            for rec in recs:
                if rec.abandoned or rec.retry == 0:
                    continue
                if rec.retry is None:
                    if now - rec.start < HEARTBEAT_PROBE:
                        wake = min(wake, rec.start + HEARTBEAT_PROBE)
                        continue
                    rec.retry, due_in = self._job_retry(rec.job)
                    if not rec.retry:
                        continue
                    rec.next_hb = rec.start + HEARTBEAT_FRACTION * rec.retry
                    if due_in is not None and due_in < HEARTBEAT_FRACTION * rec.retry:
                        # the server re-queues a job a retry period after it was queued,
                        # not delivered: one that waited may be due soon. Beat now.
                        rec.next_hb = now
                if now >= rec.next_hb:
                    try:
                        secs = self._working(rec.job)
                    except DisqueError as e:
                        self.log.warning("event=heartbeat-error job=%s error=%r",
                                         rec.job.id, e)
                        rec.retry = 0
                        continue
                    rec.heartbeats += 1
                    rec.next_hb = time.monotonic() + HEARTBEAT_FRACTION * (secs or rec.retry)
                    self.log.debug("event=heartbeat job=%s queue=%s postponed_s=%s",
                                   rec.job.id, rec.job.queue, secs)
                wake = min(wake, rec.next_hb)
            self._hb_wake.wait(max(0.01, wake - time.monotonic()))

    def _owner(self, job: Job) -> tuple[str, int] | None:
        """The address of the node that created ``job`` (it holds a copy), if known."""
        addr = self.client.topology.address_of(job.id[2:10])
        return addr if addr is not None and addr != self.client._addr else None

    def _working(self, job: Job) -> int:
        """WORKING on the current node; if it does not know the job (the client moved
        since the fetch), on the node that created it."""
        try:
            return self.client.working(job.id)
        except NoJobError:
            owner = self._owner(job)
            if owner is None:
                raise
            return int(self.client.execute_on(owner, "WORKING", job.id))

    def _show(self, job: Job) -> dict[str, Any] | None:
        """SHOW on the current node, else on the node that created the job."""
        try:
            s = self.client.show(job.id)
            if s is None and (owner := self._owner(job)) is not None:
                s = parse_show(self.client.execute_on(owner, "SHOW", job.id))
        except DisqueError as e:
            self.log.warning("event=show-error job=%s error=%r", job.id, e)
            return None
        return s

    def _job_retry(self, job: Job) -> tuple[float, float | None]:
        """(retry, seconds until the server re-queues the job or None), from SHOW."""
        s = self._show(job)
        if s is None:
            return 0, None
        due = s.get("next-requeue-within")
        return float(s.get("retry") or 0), (due / 1000 if isinstance(due, int) else None)

    # ------------------------------------------------------------------ shutdown

    def _abandon_inflight(self) -> int:
        """NACK the jobs whose handler still runs (past the shutdown deadline)."""
        with self._inflight_lock:
            recs = [r for r in self._inflight.values() if r.started and not r.abandoned]
            for rec in recs:
                rec.abandoned = True
        for rec in recs:
            try:
                self.client.nack(rec.job.id)
            except DisqueError as e:
                self.log.warning("event=nack-error job=%s error=%r", rec.job.id, e)
            self._emit(rec.job, rec.attempt, "nacked-on-shutdown", rec.start,
                       level=logging.WARNING)
        return len(recs)
