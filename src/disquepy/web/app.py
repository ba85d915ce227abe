"""The HTTP API and the dashboard: a FastAPI app over the client library.

``create_app(nodes)`` builds it; ``disque-web`` (:mod:`disquepy.web.__main__`) serves it
with uvicorn. Every route talks to the nodes through :class:`~disquepy.client.Disque`
(status, cancel, dead letters, scans) or :class:`~disquepy.client.AsyncDisque` (the hot
``POST /jobs``), which fail over between nodes on connection errors.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import redis.exceptions as rexc
from fastapi import FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .. import __version__
from ..client import AsyncDisque, Disque, ResponseError
from ..client.deadqueue import delete_dead, list_dead, requeue_dead
from ..client.envelope import wrap
from ..client.jobstatus import valid_id
from ..client.priority import DEFAULT_PRIORITY, PRIORITIES, levels, queue_for
from .cluster import ClusterView
from .fastpath import FastJobs, NodePipe
from .jobs import list_jobs
from .metrics import install_metrics

log = logging.getLogger("disquepy.web")
STATIC = Path(__file__).parent / "static"
QUEUE_NAME = r"^[^\s:][^\s]{0,199}$"  # no spaces; ":" only inside (":high"... are levels)
MAX_BODY = 4 * 1024 * 1024  # bytes of a job's payload once encoded


# ---------------------------------------------------------------------------- models


class RetryPolicy(BaseModel):
    """How a failed job is retried by a disquepy worker, then dead-lettered."""

    model_config = ConfigDict(extra="forbid")
    max_attempts: int = Field(3, ge=1, le=100, description="attempts before the dead letters")
    strategy: Literal["fixed", "exponential"] = "exponential"
    base: float = Field(1.0, gt=0, le=86400, description="seconds before the first retry")
    cap: float = Field(3600.0, gt=0, le=7 * 86400,
                       description="longest delay between attempts (exponential)")


class JobIn(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "examples": [{"payload": {"msg": "urgent"}, "priority": "high"}]})
    payload: Any = Field(..., description="any JSON value; the job's body")
    queue: str = Field("default", pattern=QUEUE_NAME, description="the logical queue")
    priority: Literal["high", "medium", "low"] = DEFAULT_PRIORITY
    delay: int = Field(0, ge=0, le=365 * 86400, description="seconds before it is queued")
    ttl: int | None = Field(None, ge=1, le=3650 * 86400,
                            description="seconds the job may live (default: the node's, 1 day)")
    requeue_after: int | None = Field(
        None, ge=0, le=86400,
        description="Disque's RETRY: seconds without an ACK before the job is queued again")
    replicate: int | None = Field(None, ge=1, le=1000, description="copies in the cluster")
    retry: RetryPolicy | None = Field(None, description="retry policy (a disquepy worker "
                                      "applies it; omitted: the worker's own settings)")

    @model_validator(mode="after")
    def _ttl_after_delay(self) -> JobIn:
        if self.ttl is not None and self.delay >= self.ttl:
            raise ValueError("delay must be shorter than ttl")
        return self


class JobAccepted(BaseModel):
    job_id: str
    status: str
    queue: str
    priority: str


class PauseIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    direction: Literal["in", "out", "all"] = "all"


def _error(http_status: int, message: str, headers: dict | None = None,
           **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=http_status, headers=headers)


_DISQUE_HTTP = {"PAUSED": 409, "MAXLEN": 429, "NOREPL": 503, "OOM": 503, "LEAVING": 503,
                "TRYAGAIN": 503, "BADID": 400, "NOPERM": 403}


def _disque_error(exc: ResponseError) -> JSONResponse:
    return _error(_DISQUE_HTTP.get(exc.code or "", 400), str(exc), code=exc.code)


def _nodes_down(method: str, path: str, exc: BaseException) -> JSONResponse:
    log.warning("request %s %s failed: no node answered (%s)", method, path, exc)
    return _error(503, f"no Disque node could serve the request: {exc}",
                  headers={"Retry-After": "1"})


def _job_body(job: JobIn) -> bytes:
    body = json.dumps(job.payload, separators=(",", ":")).encode()
    if job.retry is not None:
        body = wrap(body, 1, None, job.retry.model_dump())
    return body


def _prepare(job: JobIn, idempotency_key: str | None) -> tuple[str, bytes, dict] | None:
    """A valid job's ADDJOB: (Disque queue, body, add_job options), or None when the
    body is too large. Without an Idempotency-Key a key is made per request, so a retry
    inside the API (a node failed mid-request) never adds the job twice."""
    body = _job_body(job)
    if len(body) > MAX_BODY:
        return None
    key = ("h:" + idempotency_key) if idempotency_key else next(_keys)
    return (queue_for(job.queue, job.priority), body,
            {"delay": job.delay or None, "ttl": job.ttl, "retry": job.requeue_after,
             "replicate": job.replicate, "idempotent": key})


def _request_keys():
    """Idempotency keys of requests without one: unique per process (a random prefix
    drawn at start) and per request (a counter), cheaper than a token per request."""
    prefix = "w:" + secrets.token_urlsafe(12) + ":"
    n = 0
    while True:
        n += 1
        yield prefix + str(n)


_keys = _request_keys()


def _accepted(job: JobIn, jid: str) -> dict:
    return {"job_id": jid, "status": "scheduled" if job.delay else "queued",
            "queue": job.queue, "priority": job.priority}


# ---------------------------------------------------------------------------- app


class WebApp(FastAPI):
    """The FastAPI app, with the hot ``POST /jobs`` answered before its layers
    (:class:`~disquepy.web.fastpath.FastJobs`, set as ``fast`` by :func:`create_app`)."""

    fast: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.fast is not None and scope["type"] == "http" and scope["method"] == "POST":
            await self.fast(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)


def app_from_env() -> FastAPIOffline:
    """The app of one of ``disque-web --workers N``'s processes: the nodes, the client
    options (user, password, TLS) and the cache TTL from ``DISQUE_NODES``,
    ``DISQUE_WEB_CONNECTION`` (JSON) and ``DISQUE_WEB_CACHE_TTL``."""
    nodes = [n.strip() for n in os.environ.get("DISQUE_NODES", "127.0.0.1:7711").split(",")
             if n.strip()]
    connection = json.loads(os.environ.get("DISQUE_WEB_CONNECTION", "{}"))
    return create_app(nodes, cache_ttl=float(os.environ.get("DISQUE_WEB_CACHE_TTL", "1.0")),
                      **connection)


def create_app(nodes: list[str], *, password: str | None = None, cache_ttl: float = 1.0,
               socket_timeout: float = 10.0, **connection) -> FastAPIOffline:
    """The FastAPI app for the cluster reachable through the seed ``nodes``;
    ``connection``: the clients' other options (``username``, ``ssl``, ``ssl_ca_certs``,
    ``ssl_certfile``, ``ssl_keyfile``: see :class:`~disquepy.client.Disque`)."""
    seeds = list(nodes)  # (the name "nodes" is a route below)
    connection["password"] = password
    client = Disque(seeds, socket_timeout=socket_timeout, **connection)
    view = ClusterView(client, cache_ttl)
    state: dict[str, AsyncDisque] = {}
    # the hot POST /jobs' ADDJOBs (fastpath.py); over TLS they go through the client
    pipe = None if connection.get("ssl") else NodePipe(
        connection.get("username"), password, socket_timeout)

    @asynccontextmanager
    async def lifespan(app):
        state["aio"] = AsyncDisque(seeds, socket_timeout=socket_timeout, **connection)
        try:
            yield
        finally:
            if pipe is not None:
                pipe.close()
            await state["aio"].close()
            client.close()

    app = FastAPIOffline(
        title="disquepy", version=__version__, lifespan=lifespan,
        description="Jobs over HTTP for a disquepy (Disque) cluster: submit with a priority "
                    "and a retry policy, follow a job's status, cancel it, manage queues "
                    "and dead letters. The dashboard is at `/`, metrics at `/metrics`.",
        static_url="/_docs-assets")
    app.state.client = client
    app.state.view = view

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for e in exc.errors():
            where = ".".join(str(p) for p in e.get("loc", ()) if p != "body")
            problems.append(f"{where or 'body'}: {e.get('msg')}")
        return _error(422, "invalid request: " + "; ".join(problems),
                      detail=jsonable(exc.errors()))

    @app.exception_handler(ResponseError)
    async def disque_error(request: Request, exc: ResponseError) -> JSONResponse:
        return _disque_error(exc)

    @app.exception_handler(rexc.RedisError)
    async def nodes_down(request: Request, exc: rexc.RedisError) -> JSONResponse:
        return _nodes_down(request.method, request.url.path, exc)

    # ------------------------------------------------------------------ jobs

    @app.post("/jobs", status_code=202, response_model=JobAccepted, tags=["jobs"],
              responses={409: {"description": "the queue is paused"},
                         422: {"description": "invalid job"},
                         503: {"description": "no node could take the job"}})
    async def add_job(job: JobIn, response: Response,
                      idempotency_key: str | None = Header(
                          None, max_length=200,
                          description="the same key sent again returns the first job")
                      ) -> Any:
        """Submit a job; answers 202 with its ID once the cluster holds it.

        A retry of the same request (same `Idempotency-Key`) returns the same job. Without
        the header a key is made per request, so a retry *inside* the API (a node failed
        mid-request) never adds the job twice."""
        prepared = _prepare(job, idempotency_key)
        if prepared is None:
            size = len(_job_body(job))
            return _error(413, f"payload too large: {size} bytes, at most {MAX_BODY}")
        queue, body, opts = prepared
        jid = await state["aio"].add_job(queue, body, **opts)
        _submitted(job)
        response.headers["Location"] = f"/jobs/{jid}"
        return _accepted(job, jid)

    counters: dict[tuple[str, str], Any] = {}  # the submitted counter's children

    def _submitted(job: JobIn) -> None:
        c = counters.get((job.queue, job.priority))
        if c is None:
            if len(counters) > 10_000:
                counters.clear()
            c = counters[(job.queue, job.priority)] = app.state.submitted.labels(
                job.queue, job.priority)
        c.inc()

    def _fast_error(exc: BaseException) -> JSONResponse:
        if isinstance(exc, ResponseError):
            return _disque_error(exc)
        if isinstance(exc, rexc.RedisError):
            return _nodes_down("POST", "/jobs", exc)
        log.error("POST /jobs failed", exc_info=exc)
        return _error(500, "internal error")

    async def _fallback(queue: str, body: bytes, **opts: Any) -> str:
        return await state["aio"].add_job(queue, body, **opts)

    # FastAPIOffline builds a FastAPI: made a WebApp (a subclass adding no state) so the
    # fast path runs before FastAPI's own layers
    app.__class__ = WebApp
    app.fast = FastJobs(super(WebApp, app).__call__, model=JobIn, prepare=_prepare,
                        client=lambda: state["aio"], fallback=_fallback, accepted=_accepted,
                        submitted=_submitted, error=_fast_error, pipe=pipe)

    app.add_api_route("/jobs/", add_job, methods=["POST"], status_code=202,
                      include_in_schema=False)

    @app.get("/jobs", tags=["jobs"])
    def jobs(state_: Literal["queued", "active", "acked", "wait-repl", "all"] = Query(
                 "queued", alias="state"),
             queue: str | None = Query(None, pattern=QUEUE_NAME),
             priority: Literal["high", "medium", "low"] | None = None,
             cursor: str = Query("0", max_length=40, pattern=r"^\d+(:\d+)?$"),
             count: int = Query(50, ge=1, le=500)) -> dict:
        """A page of jobs in a Disque state (JSCAN over every node, server-side paging):
        pass `next_cursor` back as `cursor` for the next page (`"0"` when done)."""
        return list_jobs(client, None if state_ == "all" else state_, queue, priority,
                         cursor, count)

    @app.get("/jobs/{job_id:path}", tags=["jobs"],
             responses={400: {"description": "not a job ID"},
                        404: {"description": "no node knows the job"}})
    def job_status(job_id: str) -> Any:
        """What became of a job: `queued`, `scheduled`, `in_progress`, `retrying`,
        `completed` (with the worker's `result`, if it sent one), `failed` (with its
        `error`), `cancelled`, `expired`."""
        if not valid_id(job_id):
            return _error(400, f"not a job ID: {job_id[:60]!r}")
        st = client.status(job_id).to_dict()
        if st["status"] == "unknown":
            return _error(404, "job not found: " + st["detail"], job_id=job_id,
                          status="unknown")
        return st

    @app.post("/jobs/{job_id:path}/cancel", tags=["jobs"],
              responses={409: {"description": "in progress or finished: not cancelled"}})
    def cancel(job_id: str) -> Any:
        """Cancel a queued, scheduled or retrying job."""
        if not valid_id(job_id):
            return _error(400, f"not a job ID: {job_id[:60]!r}")
        r = client.cancel(job_id)
        if not r.cancelled:
            code = 404 if r.status == "unknown" else 409
            return _error(code, r.reason, job_id=job_id, status=r.status)
        app.state.cancelled.labels(r.queue or "", r.priority or "").inc()
        view.invalidate()
        return {"job_id": job_id, "status": "cancelled", "warning": r.reason or None}

    # ------------------------------------------------------------------ queues

    @app.get("/queues", tags=["queues"])
    def queues() -> list[dict]:
        """Every logical queue with its depth per priority, rates, consumers, pause state,
        oldest job's age and dead letters (summed over the nodes)."""
        return view.queues()

    @app.get("/queues/{name}", tags=["queues"], responses={404: {"description": "no such queue"}})
    def queue(name: str) -> Any:
        q = view.queue(name)
        if q is None:
            return _error(404, f"no queue named {name!r} on any node")
        return q

    @app.get("/groups", tags=["groups"])
    def groups() -> list[dict]:
        """Consumer groups (QADD/QGET) by event queue and group: events by state, lag
        (waiting to be delivered), pending (leased, not acknowledged), the age in seconds
        of the oldest event the group has not done, dead letters and the consumers
        waiting in QNOTIFY."""
        return view.groups()

    def _pause(name: str, flag: str) -> dict:
        states = {}
        for prio, dq in levels(name):
            states[prio] = client.pause(dq, flag, "bcast")
        view.invalidate()
        return {"queue": name, "paused": states}

    @app.post("/queues/{name}/pause", tags=["queues"])
    def pause(name: str, body: PauseIn | None = None) -> dict:
        """Pause a queue (all its priority levels, on every node): `in` refuses new jobs,
        `out` stops deliveries, `all` both."""
        return _pause(name, (body or PauseIn()).direction)

    @app.post("/queues/{name}/resume", tags=["queues"])
    def resume(name: str) -> dict:
        return _pause(name, "none")

    @app.get("/queues/{name}/dead-letters", tags=["dead letters"])
    def dead_letters(name: str, count: int = Query(100, ge=1, le=1000)) -> list[dict]:
        """Jobs of the queue that failed their last attempt, oldest first."""
        out = []
        for dl in list_dead(client, name, count, cluster=True)[:count]:
            out.append({"id": dl.id, "job_id": dl.original_id, "queue": dl.queue,
                        "error": dl.error, "failed_at": dl.failed_at / 1000,
                        "attempts": dl.extra.get("attempts", dl.nacks),
                        "payload": _payload(dl.body)})
        return out

    @app.post("/queues/{name}/dead-letters/{dead_id:path}/requeue", tags=["dead letters"])
    def requeue(name: str, dead_id: str) -> Any:
        """Queue a dead letter's job again (by the dead letter's or the job's ID)."""
        n = requeue_dead(client, name, [dead_id], cluster=True)
        if not n:
            return _error(404, f"no dead letter {dead_id!r} in {name!r}")
        view.invalidate()
        return {"requeued": n}

    @app.post("/queues/{name}/dead-letters/requeue", tags=["dead letters"])
    def requeue_all(name: str) -> dict:
        n = requeue_dead(client, name, None, cluster=True)
        view.invalidate()
        return {"requeued": n}

    @app.delete("/queues/{name}/dead-letters/{dead_id:path}", tags=["dead letters"])
    def delete(name: str, dead_id: str) -> Any:
        n = delete_dead(client, name, [dead_id])
        if not n:
            return _error(404, f"no dead letter {dead_id!r} in {name!r}")
        view.invalidate()
        return {"deleted": n}

    # ------------------------------------------------------------------ cluster

    @app.get("/nodes", tags=["cluster"])
    def nodes() -> list[dict]:
        """Every node: up or down, memory, connections, ops/s, jobs."""
        return view.nodes()

    @app.get("/api/overview", tags=["cluster"])
    def overview() -> dict:
        """Nodes, queues and totals in one call (what the dashboard polls)."""
        d = view.overview()
        d["priorities"] = list(PRIORITIES)
        return d

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> Any:
        ok = any(n["state"] == "up" for n in view.nodes())
        return JSONResponse({"ok": ok}, status_code=200 if ok else 503)

    # ------------------------------------------------------------------ dashboard, metrics

    install_metrics(app, view)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    def dashboard() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    return app


def _payload(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace")


def jsonable(v: Any) -> Any:
    from fastapi.encoders import jsonable_encoder

    return jsonable_encoder(v, custom_encoder={Exception: str})
