"""The hot ``POST /jobs``, answered in front of FastAPI's routing.

:class:`FastJobs` is a plain ASGI middleware wrapping the FastAPI app, the way ASGI
middleware is documented (``FastJobs(app, submitter)``, handed to uvicorn as the app:
:func:`disquepy.web.app.asgi_app`), so a valid job is answered before FastAPI's own
per-request work starts. For a ``POST /jobs`` whose body is a
valid job (``application/json``, :class:`~disquepy.web.submit.JobIn`, a good
``Idempotency-Key``) it calls the same :meth:`~disquepy.web.submit.Submitter.submit` as
the FastAPI route and sends its answer; everything else (another route, a bad body, a
missing content type...) goes on to FastAPI with the body replayed, so every error has
the route's own form. What it saves is FastAPI's per-request work for the request that
is most of the traffic: routing, dependency solving and validating a dict built from
the JSON (here pydantic reads the bytes directly).
"""

from __future__ import annotations

import collections
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from pydantic import ValidationError
from starlette.responses import JSONResponse

from .guard import is_json
from .submit import MAX_KEY, JobIn, Submitter

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_READ = 8 * 1024 * 1024  # a body larger than this is left to FastAPI (it answers 413)


class FastJobs:
    """ASGI middleware: a valid ``POST /jobs`` answered here, everything else by ``app``."""

    def __init__(self, app: ASGIApp, submitter: Submitter) -> None:
        self.app = app
        self.submitter = submitter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope["method"] != "POST"
                or scope["path"] not in ("/jobs", "/jobs/")):
            await self.app(scope, receive, send)
            return
        key = None
        json_body = False
        for name, value in scope["headers"]:
            if name == b"content-type":
                json_body = is_json(value.decode("latin-1"))
            elif name == b"idempotency-key":
                key = value.decode("latin-1")
        if not json_body or (key is not None and not 0 < len(key) <= MAX_KEY):
            await self.app(scope, receive, send)
            return
        body, messages = await _read_body(receive)
        if body is None:
            await self.app(scope, _replay(messages, receive), send)
            return
        try:
            job = JobIn.model_validate_json(body)
        except ValidationError:
            await self.app(scope, _replay(messages, receive), send)
            return
        status, content, headers = await self.submitter.submit(job, key)
        await JSONResponse(content, status, headers)(scope, receive, send)


async def _read_body(receive: Receive) -> tuple[bytes | None, list[Message]]:
    """The request body (None past MAX_READ or on a disconnect) and the messages read."""
    messages: list[Message] = []
    chunks: list[bytes] = []
    size = 0
    while True:
        m = await receive()
        messages.append(m)
        if m["type"] != "http.request":
            return None, messages
        chunk = m.get("body", b"")
        size += len(chunk)
        if size > MAX_READ:
            return None, messages
        chunks.append(chunk)
        if not m.get("more_body", False):
            return b"".join(chunks), messages


def _replay(messages: list[Message], receive: Receive) -> Receive:
    pending = collections.deque(messages)

    async def again() -> Message:
        if pending:
            return pending.popleft()
        return await receive()
    return again
