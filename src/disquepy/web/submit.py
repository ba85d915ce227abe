"""``POST /jobs``: the job a request describes, and what submitting it answers.

One implementation for both ways a request reaches it: the FastAPI route
(:func:`disquepy.web.app.create_app`) and the fast layer in front of FastAPI
(:mod:`disquepy.web.fastpath`) both call :meth:`Submitter.submit`, which returns the
status, body and headers of the answer; tests/web/test_web_post_parity.py sends the
same requests through both and compares the answers.

What the cluster is asked (:class:`SubmitPolicy`, from ``disque-web``'s options):

* **REPLICATE a majority of the cluster's nodes** (HELLO's list, down ones included),
  at most 3: 1 of 1, 2 of 2, 2 of 3, 3 of 4 or more. A job answered 202 is held by that
  many nodes, so it survives the loss of any one of them (of two, from 5 nodes up);
  with one node of three down, two copies can still be made, so ``POST /jobs`` keeps
  working. A request's own ``replicate`` wins.
* **Synchronous replication with a timeout** (``--replication-timeout``, 5 s) shorter
  than the client's socket timeout, so the node itself answers in time: the job ID
  once the copies exist (202), or ``-NOREPL`` after it deleted the job (503: nothing
  was accepted, a retry is safe). ``ASYNC`` is not used: the reply would come before
  the copies, and a node lost then would lose a job already answered 202.
* **ADDJOBs of concurrent requests share writes**: each request is one
  :meth:`~disquepy.client.AsyncDisque.add_job`, which the client sends the way it
  sends ``add_jobs`` batches (:class:`~disquepy.client.batch.Wire`: the ADDJOBs of one
  event-loop iteration in one write, each request getting its own reply and its own
  error handling).
* **An idempotency key on every ADDJOB**: the request's ``Idempotency-Key`` header, or
  one made per request. A failure whose outcome is unknown (the connection to a node
  lost mid-request, no node confirming) is a 503 naming the key (and a header with it):
  the request sent again with ``Idempotency-Key: <key>`` returns the job if it was kept,
  never a second one.
* Errors a node answers for a job that was not accepted keep their 4xx (a paused queue
  409, a full one 429); anything else the nodes refuse is a 5xx: a request that passed
  validation is never blamed on the client.
"""

from __future__ import annotations

import json
import logging
import math
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import redis.exceptions as rexc
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..client import AsyncDisque, ResponseError
from ..client.envelope import DEFAULT_POLICY, wrap
from ..client.priority import DEFAULT_PRIORITY, queue_for

log = logging.getLogger("disquepy.web")

QUEUE_NAME = r"^[^\s:][^\s]{0,199}$"  # no spaces; ":" only inside (":high"... are levels)
MAX_BODY = 4 * 1024 * 1024  # bytes of a job's payload once encoded
MAX_KEY = 200  # characters of an Idempotency-Key


# ---------------------------------------------------------------------------- models


class RetryPolicy(BaseModel):
    """How a failed job is retried by a disquepy worker, then dead-lettered: the job
    envelope's :class:`~disquepy.client.envelope.RetryPolicy` as the API takes it (its
    defaults are that one's, Disqueue's)."""

    model_config = ConfigDict(extra="forbid")
    max_attempts: int = Field(DEFAULT_POLICY.max_attempts, ge=1, le=100,
                              description="runs in all before the dead letters (the "
                                          "first and max_attempts - 1 retries)")
    strategy: Literal["fixed", "exponential"] = DEFAULT_POLICY.strategy  # type: ignore[assignment]
    base: float = Field(DEFAULT_POLICY.base, gt=0, le=86400,
                        description="seconds before the first retry")
    cap: float = Field(DEFAULT_POLICY.cap, gt=0, le=7 * 86400,
                       description="longest delay between attempts (exponential)")


class JobIn(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "examples": [{"payload": {"msg": "urgent"}, "priority": "high"}]})
    payload: Any = Field(..., description="any JSON value; the job's body")
    queue: str = Field("default", pattern=QUEUE_NAME, description="the logical queue")
    priority: Literal["high", "medium", "low"] = DEFAULT_PRIORITY  # type: ignore[assignment]
    delay: int = Field(0, ge=0, le=365 * 86400, description="seconds before it is queued")
    ttl: int | None = Field(None, ge=1, le=3650 * 86400,
                            description="seconds the job may live (default: the node's, 1 day)")
    requeue_after: int | None = Field(
        None, ge=0, le=86400,
        description="Disque's RETRY: seconds without an ACK before the job is queued again")
    replicate: int | None = Field(None, ge=1, le=1000, description="copies in the cluster "
                                  "(default: a majority of the nodes, at most 3)")
    retry: RetryPolicy | None = Field(None, description="retry policy (a disquepy worker "
                                      "applies it; omitted: disque-web's --default-retry, "
                                      "else the worker's own settings)")

    @field_validator("payload")
    @classmethod
    def _plain_json(cls, v: Any) -> Any:
        if not _finite(v):
            raise ValueError("payload must be JSON: NaN and infinite numbers are not")
        return v

    @model_validator(mode="after")
    def _ttl_after_delay(self) -> JobIn:
        if self.ttl is not None and self.delay >= self.ttl:
            raise ValueError("delay must be shorter than ttl")
        return self


def _finite(v: Any, depth: int = 0) -> bool:
    """No NaN or infinity anywhere in ``v`` (Python's JSON reads them; JSON has none)."""
    if isinstance(v, float):
        return math.isfinite(v)
    if depth > 200:  # deeper than any JSON parser here accepts anyway
        return True
    if isinstance(v, dict):
        return all(_finite(x, depth + 1) for x in v.values())
    if isinstance(v, list):
        return all(_finite(x, depth + 1) for x in v)
    return True


class JobAccepted(BaseModel):
    job_id: str
    status: str
    queue: str
    priority: str


# ---------------------------------------------------------------------------- errors

# a Disque error code -> HTTP status; anything else the nodes refuse is a 502
DISQUE_HTTP = {"PAUSED": 409, "MAXLEN": 429, "NOREPL": 503, "OOM": 503, "LEAVING": 503,
               "TRYAGAIN": 503, "BADID": 400, "NOPERM": 403, "NOJOB": 404, "BUSY": 409}

Answer = tuple[int, dict[str, Any], dict[str, str]]  # status, JSON body, headers


def error(http_status: int, detail: Any, headers: dict[str, str] | None = None,
          **extra: Any) -> Answer:
    """An error answer in FastAPI's form: ``{"detail": ...}`` (and fields that help)."""
    return http_status, {"detail": detail, **extra}, headers or {}


def disque_error(exc: ResponseError) -> Answer:
    status = DISQUE_HTTP.get(exc.code or "", 502)
    return error(status, str(exc), {"Retry-After": "1"} if status == 503 else None,
                 code=exc.code)


def unreachable(what: str, exc: BaseException) -> Answer:
    return error(503, f"no Disque node could {what}: {exc}", {"Retry-After": "1"})


# ---------------------------------------------------------------------------- submitting


@dataclass(frozen=True, slots=True)
class SubmitPolicy:
    """What ``disque-web`` asks of the cluster for each job (see the module's text)."""

    replicate: int | None = None  # None: a majority of the nodes, at most 3
    timeout_ms: int = 5000  # ADDJOB's replication timeout
    default_retry: dict[str, Any] | None = None  # stamped on jobs without a retry policy


def majority(nodes: int) -> int:
    """Copies a job gets by default in a cluster of ``nodes``: a majority, at most 3."""
    return max(1, min(3, nodes // 2 + 1))


def _request_keys() -> Iterator[str]:
    """Idempotency keys of requests without one: unique per process (a random prefix
    drawn at start) and per request (a counter), cheaper than a token per request. They
    are in the keys' namespace a client uses, so a client may send one back."""
    prefix = "auto-" + secrets.token_urlsafe(12) + "-"
    n = 0
    while True:
        n += 1
        yield prefix + str(n)


class Submitter:
    """Submits a validated :class:`JobIn`: ``await submit(job, key)`` is the answer of
    ``POST /jobs`` (status, body, headers), whichever way the request came in."""

    def __init__(self, client: Callable[[], AsyncDisque], policy: SubmitPolicy,
                 counter: Any = None) -> None:
        self.client = client  # the app's AsyncDisque (made in its lifespan)
        self.policy = policy
        self.counter = counter  # prometheus Counter (queue, priority), or None
        self._children: dict[tuple[str, str], Any] = {}
        self._keys = _request_keys()

    def body(self, job: JobIn) -> bytes:
        body = json.dumps(job.payload, separators=(",", ":")).encode()
        policy = job.retry.model_dump() if job.retry is not None else self.policy.default_retry
        if policy is not None:
            body = wrap(body, 1, None, policy)
        return body

    async def submit(self, job: JobIn, idempotency_key: str | None) -> Answer:
        body = self.body(job)
        if len(body) > MAX_BODY:
            return error(413, f"payload too large: {len(body)} bytes, at most {MAX_BODY}")
        key = idempotency_key or next(self._keys)
        aio = self.client()
        try:
            replicate = job.replicate or self.policy.replicate
            if replicate is None:
                if not aio.topology.nodes:
                    await aio.connect()  # HELLO: how many nodes the cluster has
                replicate = majority(len(aio.topology.nodes))
            jid = await aio.add_job(
                queue_for(job.queue, job.priority), body, self.policy.timeout_ms,
                replicate=replicate, delay=job.delay or None, ttl=job.ttl,
                retry=job.requeue_after, idempotent="h:" + key)
        except ResponseError as e:
            return disque_error(e)
        except rexc.RedisError as e:
            log.warning("POST /jobs: no node confirmed the job (%s); key %s", e, key)
            return error(
                503, f"no Disque node confirmed the job ({e}). If one received it, it is "
                "kept under this request's idempotency key: send the request again with "
                f"the header 'Idempotency-Key: {key}' to get that job, never a second one.",
                {"Retry-After": "1", "Idempotency-Key": key}, idempotency_key=key)
        self._count(job)
        return 202, {"job_id": jid, "status": "scheduled" if job.delay else "queued",
                     "queue": job.queue, "priority": job.priority}, {"Location": f"/jobs/{jid}"}

    def _count(self, job: JobIn) -> None:
        if self.counter is None:
            return
        c = self._children.get((job.queue, job.priority))
        if c is None:
            if len(self._children) > 10_000:
                self._children.clear()
            c = self._children[(job.queue, job.priority)] = self.counter.labels(
                job.queue, job.priority)
        c.inc()
