"""The worker: fetch jobs, run handlers in threads, heartbeat, ack, retry, dead-letter."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis import exceptions as rexc

from ..client import Disque, DisqueError, Job, NoJobError, NoPermissionError
from ..client.deadletter import DEAD_TTL, DEFAULT_DLQ, dead_letter_body, dead_queue_name
from ..client.envelope import unwrap
from ..client.nodes import NodeSpec
from ..client.priority import DEFAULT_LOW_SHARE, PriorityOrder, split
from ..client.replies import parse_show
from .backoff import Backoff

log = logging.getLogger("disquepy.worker")

HEARTBEAT_PROBE = 0.2  # a handler running longer than this gets its job's retry from SHOW
HEARTBEAT_FRACTION = 0.8  # WORKING at 80 % of the retry
# why a job goes to the dead letters: its handler failed dead_letter_after times; it was
# re-delivered dead_letter_deliveries times without an ACK; its TTL ends before the next
# back-off attempt (the `reason` of the log line and of the worker's metric)
DEAD_REASONS = ("attempts", "deliveries", "ttl")


class RetryLater(Exception):  # noqa: N818 - it is a request, not an error
    """Raise from a handler to try the job again later: it is re-added with
    ``DELAY delay`` seconds (``None``: the queue's back-off policy, or exponential)."""

    def __init__(self, delay: float | None = None, reason: str = "") -> None:
        super().__init__(reason or "retry later")
        self.delay = delay


@dataclass(slots=True)
class Route:
    """How the jobs of one queue are handled."""

    handler: Callable[[Any], Any]
    body: str = "json"  # "json" | "bytes" | "text"
    backoff: Backoff | None = None
    dead_letter_after: int | None = None  # failures (nacks + back-off attempts)
    dead_letter_deliveries: int | None = None  # additional deliveries
    add_options: dict = field(default_factory=dict)  # for re-added jobs (ttl, retry...)
    policy: dict | None = None  # a job's own retry policy (envelope), kept on re-adds


def policy_route(route: Route, policy: dict) -> Route:
    """``route`` with a job's own retry policy (see :mod:`disquepy.client.envelope`):
    ``max_attempts`` attempts, then a dead letter; ``fixed`` or ``exponential`` back-off
    from ``base`` seconds, capped at ``cap``. A malformed policy leaves ``route`` as is."""
    try:
        attempts = int(policy.get("max_attempts", 3))
        base = float(policy.get("base", 1.0))
        cap = float(policy.get("cap", 3600.0))
        if policy.get("strategy", "exponential") == "fixed":
            backoff = Backoff.fixed(base)
        else:
            backoff = Backoff.exponential(base, 2.0, max(cap, base))
    except (TypeError, ValueError, AttributeError):
        return route
    return dataclasses.replace(route, backoff=backoff, dead_letter_after=max(1, attempts),
                               policy=policy)


@dataclass(slots=True)
class _InFlight:
    job: Job
    attempt: int
    start: float
    retry: float | None = None  # seconds; 0: at-most-once, no heartbeats
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


_local = threading.local()


def current_job() -> Job | None:
    """The job the calling handler thread is processing (``None`` outside a handler)."""
    return getattr(_local, "job", None)


def current_attempt() -> int:
    """Which attempt of the current job this is (1 = first; grows with back-off re-adds)."""
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


class Worker:
    """A pool of handler threads consuming Disque queues.

    ``Worker(client_or_nodes, queues=[...], concurrency=N, handler=fn)``: ``N`` threads each
    run ``GETJOB WITHCOUNTERS FROM q1 q2 ...`` (queues are served left to right, so list
    them by priority) and call ``fn(payload)`` — the body decoded as JSON by default
    (``body="bytes"``/``"text"`` to get it raw; a body that is not JSON arrives as bytes).

    - Success: ACKJOB, sent in the same write as the thread's next fetch (a ``GETJOB
      NOHANG``), so a busy worker makes one round trip per job; when that fetch finds
      nothing, the thread blocks in GETJOB as usual. The ``acked`` outcome is logged once
      the node answered the ACK.
    - Long jobs: while a handler runs longer than 0.2 s the worker reads the job's retry
      with SHOW (once) and sends WORKING at 80 % of it, so they are not re-delivered.
    - Failure (exception): NACK; or, with a ``backoff`` policy (or when the handler raises
      :class:`RetryLater`), re-add the body to the queue with a growing ``DELAY``, the
      job's RETRY and remaining TTL, and the attempt number in an envelope, then ACK the
      original (a delay reaching past the TTL dead-letters the job instead).
    - Dead letters: after ``dead_letter_after`` failures (nacks + back-off attempts), or
      when a job arrives with ``dead_letter_deliveries`` additional deliveries (crashing
      workers), it is added to ``Q:dead`` (see :mod:`disquepy.client.deadletter`) and the
      original ACKed.
    - Shutdown: :meth:`run` handles SIGTERM/SIGINT: stop fetching, let running handlers
      finish within ``shutdown_timeout`` seconds, NACK the jobs still running then (and
      any job fetched after the stop). A second signal stops at once.
    - Logs: one record per job outcome on logger ``disquepy.worker``
      (``event=job job=<id> queue=<q> outcome=acked attempt=1 duration_ms=3.1``), the
      same fields in ``record.disque``; a handler's exception is the record's
      ``exc_info`` (its traceback) and the outcome a WARNING.

    ``routes`` (queue -> :class:`Route`) lets each queue have its own handler and policy
    (that is what :class:`~disquepy.worker.Tasks` builds).

    ``priorities=True``: ``queues`` are logical queues with ``high``/``medium``/``low``
    levels (``q:high``, ``q``, ``q:low``, see :mod:`disquepy.client.priority`), fetched
    high first except for a ``low_share`` of the fetches that take low first (so low is
    never starved); dead letters of every level go to the logical queue's ``q:dead``.
    ``metrics``: a :class:`~disquepy.worker.metrics.WorkerMetrics` that counts outcomes
    and times handlers (``--metrics-port`` serves it over HTTP).
    """

    def __init__(self, client_or_nodes: Disque | NodeSpec | Sequence[NodeSpec] | None = None,
                 queues: Sequence[str] | None = None, concurrency: int = 1,
                 handler: Callable[[Any], Any] | None = None, *,
                 routes: Mapping[str, Route] | None = None, body: str = "json",
                 backoff: Backoff | None = None, dead_letter_after: int | None = None,
                 dead_letter_deliveries: int | None = None,
                 dead_letter_queue: str = DEFAULT_DLQ, shutdown_timeout: float = 30.0,
                 poll_timeout_ms: int = 1000, heartbeat: bool = True,
                 ack: str = "ack", add_options: Mapping[str, Any] | None = None,
                 logger: logging.Logger | None = None, priorities: bool = False,
                 low_share: float = DEFAULT_LOW_SHARE, metrics: Any = None) -> None:
        if isinstance(client_or_nodes, Disque):
            self.client = client_or_nodes
            self._own_client = False
        else:
            self.client = Disque(client_or_nodes)
            self._own_client = True
        self.routes: dict[str, Route] = dict(routes or {})
        # priorities: ``queues`` (and routes' keys) are logical queues, each served as its
        # high, medium and low Disque queues (see disquepy.client.priority)
        self._order: PriorityOrder | None = None
        if priorities:
            logical = list(queues) if queues else list(self.routes)
            self._order = PriorityOrder(logical, low_share)
            if handler is None:
                self.routes = {dq: self.routes[split(dq)[0]]
                               for dq in self._order.disque_queues if split(dq)[0] in self.routes}
            queues = self._order.disque_queues
        if handler is not None:
            if not queues:
                raise ValueError("a handler needs queues=[...]")
            for q in queues:
                self.routes.setdefault(q, Route(handler, body, backoff, dead_letter_after,
                                                dead_letter_deliveries,
                                                dict(add_options or {})))
        self.queues = list(queues) if queues else list(self.routes)
        missing = [q for q in self.queues if q not in self.routes]
        if missing or not self.queues:
            raise ValueError(f"no handler for queues {missing or '(none given)'}")
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if ack not in ("ack", "fastack"):
            raise ValueError("ack must be 'ack' or 'fastack'")
        self.concurrency = concurrency
        self.dead_letter_queue = dead_letter_queue
        self.shutdown_timeout = shutdown_timeout
        self.poll_timeout_ms = poll_timeout_ms
        self.heartbeat = heartbeat
        self._fast = ack == "fastack"
        self._ack = self.client.fast_ack if self._fast else self.client.ack
        self.log = logger or log
        self.metrics = metrics  # a disquepy.worker.metrics.WorkerMetrics, or None
        self.stats: Counter = Counter()
        self._stats_lock = threading.Lock()
        self._inflight: dict[str, _InFlight] = {}
        self._inflight_lock = threading.Lock()
        self._stop = threading.Event()  # stop fetching
        # an error no retry mends (a wrong password, a user whose role cannot take jobs):
        # the worker stops, and run() returns False
        self.fatal: Exception | None = None
        self._done = threading.Event()  # every fetch thread has exited
        self._threads: list[threading.Thread] = []
        self._hb_thread: threading.Thread | None = None
        self._hb_wake = threading.Event()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Worker:
        """Start the fetch threads (and the heartbeat thread) and return."""
        if self._threads:
            raise RuntimeError("worker already started")
        for i in range(self.concurrency):
            t = threading.Thread(target=self._fetch_loop, name=f"disque-worker-{i}",
                                 daemon=True)
            t.start()
            self._threads.append(t)
        if self.heartbeat:
            self._hb_thread = threading.Thread(target=self._heartbeat_loop,
                                               name="disque-heartbeat", daemon=True)
            self._hb_thread.start()
        self.log.info("worker started: queues=%s concurrency=%d", ",".join(self.queues),
                      self.concurrency)
        return self

    def request_stop(self) -> None:
        """Stop fetching new jobs (running handlers go on); safe from signal handlers."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        """``True`` once a stop was requested (no new jobs are fetched)."""
        return self._stop.is_set()

    def stop(self, timeout: float | None = None) -> bool:
        """Graceful stop: no new jobs, wait up to ``timeout`` (default
        ``shutdown_timeout``) for running handlers, then NACK the jobs still running.
        Returns ``True`` if no job had to be NACKed."""
        self._stop.set()
        deadline = time.monotonic() + (self.shutdown_timeout if timeout is None else timeout)
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        # threads still alive are either idle in GETJOB (they exit after it) or running
        # a handler past the deadline: those jobs are NACKed now
        clean = self._abandon_inflight() == 0
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

        def on_signal(signum, frame):
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

    # ------------------------------------------------------------------ fetching

    def _fetch_queues(self) -> list[str]:
        """The queues of the next GETJOB, in serving order."""
        return self.queues if self._order is None else self._order.next()

    def _fetch_loop(self) -> None:
        get = self.client.get_jobs
        errors = 0
        # jobs handled successfully whose ACK is not sent yet: it goes out in one write
        # with the next fetch (GETJOB NOHANG), so a busy worker makes one round trip
        # per job instead of two; an idle one then blocks in a plain GETJOB
        acks: list[_Done] = []
        try:
            while not self._stop.is_set():
                try:
                    if acks:
                        batch, acks = acks, []
                        jobs = self._ack_then_fetch(batch)
                        if not jobs:
                            continue
                    else:
                        jobs = get(self._fetch_queues(), timeout_ms=self.poll_timeout_ms,
                                   with_counters=True)
                    errors = 0
                except (rexc.AuthenticationError, NoPermissionError) as e:
                    self.fatal = e
                    self.log.error("event=fatal error=%r: stopping (check --user, "
                                   "--password and the user's role)", str(e))
                    self._stop.set()
                    break
                except DisqueError as e:
                    errors += 1
                    self.log.warning("event=fetch-error error=%r", e)
                    self._stop.wait(min(0.1 * 2 ** errors, 5.0))
                    continue
                for job in jobs:
                    if self._stop.is_set():
                        self._nack_unstarted(job)
                    else:
                        done = self._process(job)
                        if done is not None:
                            acks.append(done)
        finally:
            if acks:  # stopping: the last jobs' ACK alone
                self._ack_done(acks)

    def _ack_then_fetch(self, done: list[_Done]) -> list:
        """ACK the jobs in ``done`` and fetch without blocking, in one round trip (a job
        whose handler returned a result has its own ACK, carrying it)."""
        p = self.client.pipeline()
        self._queue_acks(p, done)
        p.get_jobs(self._fetch_queues(), nohang=True, with_counters=True)
        try:
            *replies, jobs = p.execute()
        except DisqueError as e:  # nothing is known of the ACK: the jobs may come back
            self._acked(done, e)
            raise
        self._acked(done, next((r for r in replies if isinstance(r, Exception)), 0))
        if isinstance(jobs, Exception):
            raise jobs
        return jobs

    def _queue_acks(self, p: Any, done: list[_Done]) -> None:
        ack = p.fast_ack if self._fast else p.ack
        plain = [d.job.id for d in done if d.result is None]
        if plain:
            ack(*plain)
        for d in done:
            if d.result is not None:
                ack(d.job.id, result=d.result)

    def _ack_done(self, done: list[_Done]) -> None:
        p = self.client.pipeline()
        self._queue_acks(p, done)
        try:
            replies = p.execute()
            acked = next((r for r in replies if isinstance(r, Exception)), 0)
        except DisqueError as e:
            acked = e
        self._acked(done, acked)

    def _acked(self, done: list[_Done], reply: Any) -> None:
        """Log each job's outcome from the ACK's reply (an exception: ack-failed)."""
        if isinstance(reply, Exception):
            for d in done:
                self._emit(d.job, d.attempt, "ack-failed", d.t0, error=repr(reply))
            return
        for d in done:
            self._emit(d.job, d.attempt, "acked", d.t0, heartbeats=d.heartbeats)

    def _nack_unstarted(self, job: Job) -> None:
        try:
            self.client.nack(job.id)
        except DisqueError as e:
            self.log.warning("event=nack-error job=%s error=%r", job.id, e)
        self._emit(job, 0, "requeued-on-stop", 0.0)

    # ------------------------------------------------------------------ one job

    def _process(self, job: Job) -> _Done | None:
        """Run the job's handler. A success is returned, to be ACKed by the caller (with
        its next fetch); every other outcome is dealt with here."""
        t0 = time.monotonic()
        route = self.routes[job.queue]
        raw = job.body if isinstance(job.body, bytes) else job.body.encode()
        env = unwrap(raw)
        if env.policy is not None:
            route = policy_route(route, env.policy)
        # a NACK ... DELAY retry keeps the job's ID and counts a nack; older back-off
        # re-adds carried their attempt in the envelope
        attempt = env.attempt + (job.nacks or 0)
        prior_failures = attempt - 1
        if (route.dead_letter_deliveries is not None
                and (job.additional_deliveries or 0) >= route.dead_letter_deliveries):
            err = (f"delivered {job.additional_deliveries} extra times without an "
                   "acknowledgement (worker crashes or timeouts)")
            self._dead_letter(job, route, env.body, err, prior_failures, attempt, t0,
                              "deliveries")
            return
        rec = _InFlight(job, attempt, t0)
        with self._inflight_lock:
            self._inflight[job.id] = rec
        if self.metrics is not None:
            self.metrics.started(job.queue, 1)
        _local.job = job
        _local.attempt = attempt
        exc: BaseException | None = None
        result = None
        try:
            result = route.handler(_decode(env.body, route.body))
        except Exception as e:  # the handler's failure is the job's outcome
            exc = e
        finally:
            _local.job = None
            _local.attempt = 0
            with self._inflight_lock:
                self._inflight.pop(job.id, None)
            if self.metrics is not None:
                self.metrics.started(job.queue, -1)
        if rec.abandoned:
            self._emit(job, attempt, "finished-after-nack", t0, failed=exc is not None)
            return
        if exc is None:
            return _Done(job, attempt, t0, rec.heartbeats, result)
        self._failed(job, route, env.body, exc, prior_failures + 1, attempt, t0)
        return None

    def _failed(self, job: Job, route: Route, body: bytes, exc: BaseException,
                failures: int, attempt: int, t0: float) -> None:
        err = repr(exc)
        # a handler's failure is logged with its traceback; RetryLater is a request
        tb = None if isinstance(exc, RetryLater) else exc
        level = logging.INFO if tb is None else logging.WARNING
        if route.dead_letter_after is not None and failures >= route.dead_letter_after:
            self._dead_letter(job, route, body, err, failures, attempt, t0, "attempts", exc=tb)
            return
        delay = None
        if isinstance(exc, RetryLater):
            delay = exc.delay
            if delay is None:
                delay = (route.backoff or Backoff()).delay(attempt)
        elif route.backoff is not None:
            delay = route.backoff.delay(attempt)
        if delay is not None:
            delay = max(1, int(round(delay)))
            shown = self._show(job)
            left = shown.get("ttl") if shown is not None else None
            if isinstance(left, int) and 0 < left <= delay + 1:
                self._dead_letter(job, route, body, err + " (its TTL ends before the next "
                                  "attempt)", failures, attempt, t0, "ttl", exc=tb)
                return
            try:  # back to its queue after the delay, under the same ID (NACK ... DELAY)
                requeued = self.client.nack(job.id, delay=delay)
            except DisqueError as e:
                self.log.warning("event=retry-error job=%s error=%r", job.id, e)
            else:
                if requeued:
                    self._emit(job, attempt, "retry-later", t0, delay=delay, error=err,
                               level=level, exc=tb)
                    return
        try:
            self.client.nack(job.id)
        except DisqueError as e:
            self._emit(job, attempt, "nack-failed", t0, error=repr(e))
            return
        self._emit(job, attempt, "nacked", t0, error=err, level=level, exc=tb)

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
            with contextlib.suppress(DisqueError):
                self.client.nack(job.id)
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
        self.log.log(level, " ".join(f"{k}={v}" if " " not in str(v) else f"{k}={str(v)!r}"
                                     for k, v in d.items()), exc_info=exc, extra={"disque": d})

    # ------------------------------------------------------------------ heartbeats

    def _heartbeat_loop(self) -> None:
        while not self._done.is_set():
            now = time.monotonic()
            with self._inflight_lock:
                recs = list(self._inflight.values())
            wake = now + 0.1
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

    def _show(self, job: Job) -> dict | None:
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
        with self._inflight_lock:
            recs = list(self._inflight.values())
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
