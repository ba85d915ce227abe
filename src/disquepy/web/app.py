"""The HTTP API and the dashboard: a FastAPI app over the client library.

``create_app(nodes)`` builds it; ``disque-web`` (:mod:`disquepy.web.__main__`) serves it
with uvicorn. Every route talks to the nodes through :class:`~disquepy.client.Disque`
(status, cancel, dead letters, scans) or :class:`~disquepy.client.AsyncDisque` (the hot
``POST /jobs``: :mod:`disquepy.web.submit`), which fail over between nodes on
connection errors. Errors are FastAPI's ``{"detail": ...}``; a route that could not
reach the nodes it needs answers 503 and says so.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import redis.exceptions as rexc
from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel, ConfigDict, Field

from .. import __version__
from ..client import AsyncDisque, Disque, ResponseError
from ..client.deadqueue import delete_dead, list_dead, requeue_dead
from ..client.jobstatus import json_or_text, valid_id
from ..client.priority import PRIORITIES, levels
from ..client.replies import job_node_prefix
from .acting import ActingClient, UserClients, acting_aio
from .cluster import ClusterView, NodesDown
from .fastpath import FastJobs
from .finished import STATES, list_finished
from .guard import Guard, Policy, is_json, json_required
from .history import History
from .jobs import list_jobs
from .metrics import install_metrics
from .submit import (
    MAX_KEY,
    QUEUE_NAME,
    Answer,
    JobAccepted,
    JobIn,
    SubmitPolicy,
    Submitter,
    disque_error,
    error,
    unreachable,
)
from .workers import list_workers

log = logging.getLogger("disquepy.web")
STATIC = Path(__file__).parent / "static"


class RequeueIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ids: list[str] = Field(default_factory=list, max_length=1000)


class PauseIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    direction: Literal["in", "out", "all"] = "all"


def _response(answer: Answer) -> JSONResponse:
    status, body, headers = answer
    return JSONResponse(body, status, headers)


def _error(http_status: int, detail: Any, headers: dict[str, str] | None = None,
           **extra: Any) -> JSONResponse:
    return _response(error(http_status, detail, headers, **extra))


def _json_body(content_type: str | None = Header(None, include_in_schema=False)) -> None:
    """POST /jobs takes JSON only: anything else is a 415 that says so."""
    if not is_json(content_type):
        raise HTTPException(415, json_required(content_type))


def asgi_app(nodes: list[str], policy: Policy | None = None, **options: Any) -> Guard:
    """What uvicorn runs: :func:`create_app`'s app behind the fast ``POST /jobs`` layer
    (:class:`~disquepy.web.fastpath.FastJobs`, a plain ASGI middleware wrapping it: a
    valid job is answered before FastAPI's own per-request work, with the same answer
    as its route), both behind the guard (:mod:`disquepy.web.guard`: the allowed
    hosts, body limits, same-origin and JSON-only state changes, the login; ``policy``,
    by default no login and the loopback names)."""
    app = create_app(nodes, **options)
    return Guard(FastJobs(app, app.state.submitter), policy or Policy(), app.state.users)


def app_from_env() -> Guard:
    """The app of one of ``disque-web --workers N``'s processes: the nodes, the client
    options (user, password, TLS), the app's options and the guard's policy from
    ``DISQUE_NODES``, ``DISQUE_WEB_CONNECTION``, ``DISQUE_WEB_OPTIONS`` and
    ``DISQUE_WEB_POLICY`` (JSON)."""
    nodes = [n.strip() for n in os.environ.get("DISQUE_NODES", "127.0.0.1:7711").split(",")
             if n.strip()]
    connection = json.loads(os.environ.get("DISQUE_WEB_CONNECTION", "{}"))
    options = json.loads(os.environ.get("DISQUE_WEB_OPTIONS", "{}"))
    policy = os.environ.get("DISQUE_WEB_POLICY")
    return asgi_app(nodes, Policy.from_json(policy) if policy else None, **options,
                    **connection)


def create_app(nodes: list[str], *, password: str | None = None, cache_ttl: float = 1.0,
               socket_timeout: float = 10.0, replicate: int | None = None,
               replication_timeout: float = 5.0, default_retry: dict[str, Any] | None = None,
               history_dir: str | None = None, history_interval: float = 2.0,
               **connection: Any) -> FastAPI:
    """The FastAPI app for the cluster reachable through the seed ``nodes``;
    ``connection``: the clients' other options (``username``, ``ssl``, ``ssl_ca_certs``,
    ``ssl_certfile``, ``ssl_keyfile``: see :class:`~disquepy.client.Disque`).

    ``replicate``: copies of each job (None: a majority of the nodes, at most 3);
    ``replication_timeout``: seconds ADDJOB waits for them (less than
    ``socket_timeout``); ``default_retry``: the retry policy stamped on jobs submitted
    without one (the envelope's ``policy``; None: none, the worker's own);
    ``history_dir``: where the processes of ``disque-web --workers N`` share the
    charts' history (:mod:`disquepy.web.history`; None: in this process). Its
    ``state.submitter`` answers ``POST /jobs`` (the route's, and :func:`asgi_app`'s fast
    layer's)."""
    seeds = list(nodes)  # (the name "nodes" is a route below)
    if not 0 < replication_timeout < socket_timeout:
        raise ValueError("replication_timeout must be above 0 and below socket_timeout")
    users = UserClients(seeds, connection, socket_timeout)  # logged-in users' (acting.py)
    connection["password"] = password
    own = Disque(seeds, socket_timeout=socket_timeout, **connection)
    # the routes act as the request's user (its own connections, so the nodes' ACL
    # decides), the cluster overview, metrics and history as the web itself
    client: Any = ActingClient(own)
    view = ClusterView(own, cache_ttl)
    history = History(view, history_interval, directory=history_dir)
    state: dict[str, AsyncDisque] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state["aio"] = AsyncDisque(seeds, socket_timeout=socket_timeout, **connection)
        history.start()
        try:
            yield
        finally:
            history.stop()
            await state["aio"].close()
            await users.close()
            own.close()

    app = FastAPIOffline(
        title="disquepy", version=__version__, lifespan=lifespan,
        description="Jobs over HTTP for a disquepy (Disque) cluster: submit with a priority "
                    "and a retry policy, follow a job's status, cancel it, manage queues "
                    "and dead letters. The dashboard is at `/`, metrics at `/metrics`. "
                    "Errors are `{\"detail\": ...}`; 503 when the nodes a request needs "
                    "are unreachable.",
        static_url="/_docs-assets")
    app.state.client = client
    app.state.users = users
    app.state.view = view
    install_metrics(app, view)
    submitter = Submitter(lambda: acting_aio(state["aio"]),
                          SubmitPolicy(replicate, int(replication_timeout * 1000),
                                       default_retry),
                          app.state.submitted)
    app.state.submitter = submitter

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's form, without the input echoed back (a job's payload can be MBs)
        return JSONResponse({"detail": jsonable([
            {k: v for k, v in e.items() if k not in ("input", "url")} for e in exc.errors()])},
            status_code=422)

    @app.exception_handler(ResponseError)
    async def disque_refused(request: Request, exc: ResponseError) -> JSONResponse:
        return _response(disque_error(exc))

    @app.exception_handler(rexc.RedisError)
    async def nodes_down(request: Request, exc: rexc.RedisError) -> JSONResponse:
        log.warning("request %s %s failed: no node answered (%s)", request.method,
                    request.url.path, exc)
        return _response(unreachable("serve the request", exc))

    @app.exception_handler(NodesDown)
    async def cluster_down(request: Request, exc: NodesDown) -> JSONResponse:
        return _error(503, str(exc), {"Retry-After": "1"}, nodes=exc.nodes)

    # ------------------------------------------------------------------ jobs

    @app.post("/jobs", status_code=202, response_model=JobAccepted, tags=["jobs"],
              dependencies=[Depends(_json_body)],
              responses={409: {"description": "the queue is paused"},
                         413: {"description": "payload too large"},
                         415: {"description": "not a JSON body"},
                         422: {"description": "invalid job"},
                         429: {"description": "the queue is full (MAXLEN)"},
                         503: {"description": "no node could take the job; the body "
                               "names the Idempotency-Key to send again when the outcome "
                               "is unknown"}})
    async def add_job(job: JobIn, idempotency_key: str | None = Header(
                          None, min_length=1, max_length=MAX_KEY,
                          description="the same key sent again returns the first job")
                      ) -> Any:
        """Submit a job; answers 202 with its ID once the cluster holds it (copies on a
        majority of the nodes, at most 3, unless `replicate` says otherwise).

        A retry of the same request (same `Idempotency-Key`) returns the same job. Without
        the header a key is made per request, so a retry *inside* the API (a node failed
        mid-request) never adds the job twice; when the outcome is unknown the 503 names
        that key."""
        return _response(await submitter.submit(job, idempotency_key))

    app.add_api_route("/jobs/", add_job, methods=["POST"], status_code=202,
                      dependencies=[Depends(_json_body)], include_in_schema=False)

    @app.get("/jobs", tags=["jobs"])
    def jobs(state_: Literal["queued", "active", "acked", "wait-repl", "all"] = Query(
                 "queued", alias="state"),
             queue: str | None = Query(None, pattern=QUEUE_NAME),
             priority: Literal["high", "medium", "low"] | None = None,
             cursor: str = Query("0", max_length=40, pattern=r"^\d+(:\d+)?$"),
             count: int = Query(50, ge=1, le=500)) -> dict[str, Any]:
        """A page of jobs in a Disque state (JSCAN over every node, server-side paging):
        pass `next_cursor` back as `cursor` for the next page (`"0"` when done)."""
        return list_jobs(client, None if state_ == "all" else state_, queue, priority,
                         cursor, count)

    @app.get("/jobs/finished", tags=["jobs"],
             responses={400: {"description": "a cursor of another cluster"}})
    def finished(status: list[Literal[STATES]] = Query([]),  # type: ignore[valid-type]
                 queue: str | None = Query(None, pattern=QUEUE_NAME),
                 cursor: str = Query("0", max_length=400, pattern=r"^[0-9x.]+$"),
                 count: int = Query(50, ge=1, le=500)) -> Any:
        """Recently finished jobs, the last finished first: `completed`, `failed`,
        `cancelled`, `expired` (`status` may repeat), from the nodes' outcome stores
        (JOBOUTCOMES, kept `job-outcome-retention` seconds), each job once; paged on
        the server: pass `next_cursor` back as `cursor` (`"0"` when done)."""
        try:
            return list_finished(client, list(status), queue, cursor, count)
        except ValueError as e:
            return _error(400, str(e))

    @app.get("/jobs/{job_id:path}", tags=["jobs"],
             responses={400: {"description": "not a job ID"},
                        404: {"description": "no node knows the job"},
                        503: {"description": "the node that created the job, or every "
                              "node, is unreachable: its status is not known"}})
    def job_status(job_id: str) -> Any:
        """What became of a job: `queued`, `scheduled`, `in_progress`, `retrying`,
        `completed` (with the worker's `result`, if it sent one), `failed` (with its
        `error`), `cancelled`, `expired`."""
        if not valid_id(job_id):
            return _error(400, f"not a job ID: {job_id[:60]!r}")
        st = client.status(job_id).to_dict()
        if st["status"] == "unknown":
            return _unknown(job_id, st["detail"])
        return st

    def _unknown(job_id: str, detail: str) -> JSONResponse:
        """No node that answered knows the job: a 404 when the node that created it
        answered (it keeps the job's outcome), else a 503 naming the nodes not heard."""
        view.invalidate()
        snap, _ = view.snapshot()
        up = [n["id"] for n in snap.nodes if n["up"]]
        down = [n["address"] for n in snap.nodes if not n["up"]]
        if not up:
            raise NodesDown.of(snap.nodes)
        prefix = job_node_prefix(job_id)
        if down and not any(i.startswith(prefix) for i in up):
            return _error(503, f"job status unknown: the node that created it ({prefix}) "
                          f"did not answer, and no other node knows the job (unreachable: "
                          f"{', '.join(down)})", {"Retry-After": "1"}, job_id=job_id,
                          status="unknown", unreachable=down)
        return _error(404, "job not found: " + detail, job_id=job_id, status="unknown")

    @app.post("/jobs/{job_id:path}/cancel", tags=["jobs"],
              responses={409: {"description": "in progress or finished: not cancelled"}})
    def cancel(job_id: str) -> Any:
        """Cancel a queued, scheduled or retrying job."""
        if not valid_id(job_id):
            return _error(400, f"not a job ID: {job_id[:60]!r}")
        r = client.cancel(job_id)
        if not r.cancelled:
            if r.status == "unknown":
                return _unknown(job_id, r.reason)
            return _error(409, r.reason, job_id=job_id, status=r.status)
        app.state.cancelled.labels(r.queue or "", r.priority or "").inc()
        view.invalidate()
        return {"job_id": job_id, "status": "cancelled", "warning": r.reason or None}

    # ------------------------------------------------------------------ queues

    @app.get("/queues", tags=["queues"])
    def queues() -> list[dict[str, Any]]:
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
    def groups() -> list[dict[str, Any]]:
        """Consumer groups (QADD/QGET) by event queue and group: events by state, lag
        (waiting to be delivered), pending (leased, not acknowledged), the age in seconds
        of the oldest event the group has not done, dead letters and the consumers
        waiting in QNOTIFY."""
        return view.groups()

    @app.get("/groups/{queue}/{group}/dead-letters", tags=["groups"])
    def group_dead_letters(queue: str, group: str) -> dict[str, Any]:
        """A consumer group's dead letters (events delivered more than its
        MAXDELIVERIES), from every node (QDEAD), each event once."""
        seen: dict[str, dict[str, Any]] = {}
        down: list[str] = []
        nodes = view.answered()[0].nodes
        for n in nodes:
            if not n["up"]:
                down.append(n["address"])
                continue
            try:
                reply = client.execute_on(n["address"], "QDEAD", queue, group)
            except rexc.RedisError:
                down.append(n["address"])
                continue
            for eid, body, deliveries in reply:
                e = seen.setdefault(eid.decode(), {
                    "id": eid.decode(), "contents": json_or_text(body),
                    "deliveries": int(deliveries), "nodes": []})
                e["nodes"].append(n["address"])
        return {"queue": queue, "group": group, "dead": list(seen.values()),
                "unreachable": down}

    @app.post("/groups/{queue}/{group}/dead-letters/requeue", tags=["groups"])
    def group_requeue(queue: str, group: str, body: RequeueIn | None = None) -> Any:
        """Give dead letters back to the group (`ids`, or all of them): delivered
        again, their delivery count started over."""
        ids = body.ids if body is not None and body.ids else [
            e["id"] for e in group_dead_letters(queue, group)["dead"]]
        done: set[str] = set()
        for n in view.answered()[0].nodes:
            left = [i for i in ids if i not in done]
            if not n["up"] or not left:
                continue
            try:
                held = {e[0].decode() for e in client.execute_on(n["address"], "QDEAD",
                                                                  queue, group)}
                mine = [i for i in left if i in held]
                if mine:
                    client.execute_on(n["address"], "QDEAD", queue, group, "REQUEUE", *mine)
                    done.update(mine)
            except rexc.RedisError:
                continue
        view.invalidate()
        if body is not None and body.ids and not done:
            return _error(404, f"no dead letter {ids[0]!r} of {group!r} in {queue!r}")
        return {"requeued": len(done)}

    def _pause(name: str, flag: str) -> dict[str, Any]:
        states = {}
        for prio, dq in levels(name):
            states[prio] = client.pause(dq, flag, "bcast")
        view.invalidate()
        return {"queue": name, "paused": states}

    @app.post("/queues/{name}/pause", tags=["queues"])
    def pause(name: str, body: PauseIn | None = None) -> dict[str, Any]:
        """Pause a queue (all its priority levels, on every node): `in` refuses new jobs,
        `out` stops deliveries, `all` both."""
        return _pause(name, (body or PauseIn()).direction)

    @app.post("/queues/{name}/resume", tags=["queues"])
    def resume(name: str) -> dict[str, Any]:
        return _pause(name, "none")

    @app.get("/queues/{name}/dead-letters", tags=["dead letters"])
    def dead_letters(name: str, count: int = Query(100, ge=1, le=1000)) -> list[dict[str, Any]]:
        """Jobs of the queue that failed their last attempt, oldest first."""
        out = []
        for dl in list_dead(client, name, count, cluster=True)[:count]:
            out.append({"id": dl.id, "job_id": dl.original_id, "queue": dl.queue,
                        "error": dl.error, "failed_at": dl.failed_at / 1000,
                        "attempts": dl.extra.get("attempts", dl.nacks),
                        "payload": json_or_text(dl.body)})
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
    def requeue_all(name: str) -> dict[str, Any]:
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

    # (the parameter "nodes" is copied to seeds above)
    @app.get("/nodes", tags=["cluster"],  # type: ignore[no-redef]
             responses={503: {"description": "no node answered (the body lists them)"}})
    def nodes() -> list[dict[str, Any]]:
        """Every node: up or down, memory, connections, ops/s, jobs."""
        return view.nodes()

    @app.get("/api/overview", tags=["cluster"],
             responses={503: {"description": "no node answered (the body lists them)"}})
    def overview() -> dict[str, Any]:
        """Nodes, queues and totals in one call (what the dashboard polls)."""
        d = view.overview()
        d["priorities"] = list(PRIORITIES)
        return d

    @app.get("/workers", tags=["cluster"],
             responses={503: {"description": "no node answered"}})
    def workers() -> dict[str, Any]:
        """The workers connected to each node (CLIENT LIST: connections a worker named
        with CLIENT SETNAME): host, pid, queues, concurrency, jobs done and failed,
        connected for (s) and last seen (s ago)."""
        return list_workers(client)

    @app.get("/api/history", tags=["cluster"])
    def history_samples(since: float | None = None) -> dict[str, Any]:
        """Throughput and latency samples kept by disque-web (every few seconds, the
        last hour): jobs added, delivered, completed, failed per second; wait and
        processing time percentiles (ms). `since`: only the samples after it."""
        return {"interval": history.interval, "samples": history.samples(since)}

    @app.get("/health", tags=["cluster"],
             responses={503: {"description": "no node answered"}})
    def health() -> Any:
        """200 while at least one node answers (`nodes_up` of `nodes`), else 503."""
        snap, _ = view.snapshot()
        up = sum(1 for n in snap.nodes if n["up"])
        body = {"ok": up > 0, "nodes": len(snap.nodes), "nodes_up": up}
        if not up:
            return _error(503, "no Disque node reachable", {"Retry-After": "1"}, **body)
        return body

    app.add_api_route("/healthz", health, methods=["GET"], include_in_schema=False)

    # ------------------------------------------------------------------ dashboard, metrics

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    def dashboard() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    return app


def jsonable(v: Any) -> Any:
    from fastapi.encoders import jsonable_encoder

    return jsonable_encoder(v, custom_encoder={Exception: str})
