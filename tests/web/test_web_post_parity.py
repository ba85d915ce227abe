"""One POST /jobs: the fast layer in front of FastAPI (web/fastpath.py) answers exactly
as the FastAPI route does. The same table of requests goes through an app with the fast
layer and one without it (both against the same real node), and the status, body and
headers must match; valid jobs must be answered by the fast layer itself."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from disquepy.web.app import asgi_app, create_app
from disquepy.web.guard import Policy

J = {"Content-Type": "application/json"}
BIG = json.dumps({"payload": "x" * (4 * 1024 * 1024 + 10)}).encode()  # over 4 MiB encoded
HUGE = json.dumps({"payload": "y" * (9 * 1024 * 1024)}).encode()  # over what is read

# (name, body, headers): each is sent once through each app
CASES: list[tuple[str, bytes, dict[str, str]]] = [
    ("minimal", b'{"payload": {"a": 1}}', J),
    ("every field", json.dumps({
        "payload": {"to": "ann@example.net"}, "queue": "emails", "priority": "high",
        "delay": 0, "ttl": 600, "requeue_after": 30, "replicate": 1,
        "retry": {"max_attempts": 4, "strategy": "fixed", "base": 2, "cap": 60}}).encode(), J),
    ("high", b'{"payload": 1, "priority": "high", "queue": "p"}', J),
    ("low", b'{"payload": 1, "priority": "low", "queue": "p"}', J),
    ("medium", b'{"payload": 1, "priority": "medium", "queue": "p"}', J),
    ("delayed", b'{"payload": [1, 2], "delay": 120}', J),
    ("payload types", b'{"payload": [null, true, 1.5, "\\u00e9\\ud83d\\ude00", {}]}', J),
    ("unicode queue", '{"payload": 1, "queue": "fila-ç"}'.encode(), J),
    ("charset", b'{"payload": 1}', {"Content-Type": "application/json; charset=utf-8"}),
    ("+json", b'{"payload": 1}', {"Content-Type": "application/vnd.jobs+json"}),
    ("numeric string delay", b'{"payload": 1, "delay": "5"}', J),
    ("float delay", b'{"payload": 1, "delay": 5.0}', J),
    ("fractional delay", b'{"payload": 1, "delay": 1.5}', J),
    ("bool delay", b'{"payload": 1, "delay": true}', J),
    ("null ttl", b'{"payload": 1, "ttl": null}', J),
    ("duplicate field", b'{"payload": 1, "payload": 2}', J),
    ("invalid json", b'{not json', J),
    ("truncated json", b'{"payload": ', J),
    ("empty body", b"", J),
    ("array body", b"[]", J),
    ("null body", b"null", J),
    ("no payload", b'{"priority": "high"}', J),
    ("bad priority", b'{"payload": 1, "priority": "urgent"}', J),
    ("priority number", b'{"payload": 1, "priority": 5}', J),
    ("queue number", b'{"payload": 1, "queue": 7}', J),
    ("queue with space", b'{"payload": 1, "queue": "a b"}', J),
    ("queue level", b'{"payload": 1, "queue": ":high"}', J),
    ("negative delay", b'{"payload": 1, "delay": -1}', J),
    ("delay over ttl", b'{"payload": 1, "delay": 10, "ttl": 10}', J),
    ("extra field", b'{"payload": 1, "colour": "red"}', J),
    ("retry not object", b'{"payload": 1, "retry": "x"}', J),
    ("retry bad field", b'{"payload": 1, "retry": {"max_attempts": 0}}', J),
    ("NaN", b'{"payload": NaN}', J),
    ("1e999", b'{"payload": 1e999}', J),
    ("-Infinity inside", b'{"payload": {"a": [-Infinity]}}', J),
    ("too large", BIG, J),
    ("too large to read", HUGE, J),
    ("no content type", b'{"payload": 1}', {}),
    ("text/plain", b'{"payload": 1}', {"Content-Type": "text/plain"}),
    ("form", b"payload=1", {"Content-Type": "application/x-www-form-urlencoded"}),
    ("key", b'{"payload": {"order": 42}}', {**J, "Idempotency-Key": "order-42"}),
    ("key again", b'{"payload": {"order": 42}}', {**J, "Idempotency-Key": "order-42"}),
    ("empty key", b'{"payload": 1}', {**J, "Idempotency-Key": ""}),
    ("long key", b'{"payload": 1}', {**J, "Idempotency-Key": "k" * 201}),
    ("paused queue", b'{"payload": 1, "queue": "stopped"}', J),
    ("unknown replication", b'{"payload": 1, "replicate": 3}', J),
]


def _inner_recorder(layer, seen: list[str]) -> None:
    """Record the requests the fast layer hands on to FastAPI (test-only wrapping)."""
    inner = layer.app

    async def recording(scope, receive, send):
        if scope["type"] == "http":
            seen.append(f"{scope['method']} {scope['path']}")
        await inner(scope, receive, send)
    layer.app = recording


def _normal(r: httpx.Response, keyed: bool) -> tuple:
    body = r.json()
    headers = {k: v for k, v in r.headers.items() if k in ("content-type", "retry-after")}
    if r.status_code == 202 and not keyed:  # a new job each time: its ID differs
        assert r.headers["location"] == f"/jobs/{body['job_id']}"
        body = {**body, "job_id": "<id>"}
    elif "location" in r.headers:
        headers["location"] = r.headers["location"]
    return r.status_code, body, headers


@pytest.mark.timeout(120)
def test_the_fast_layer_answers_as_the_route_does(server, dq):
    dq.add_job("stopped", "x")
    dq.pause("stopped", "in")
    nodes = [f"127.0.0.1:{server.port}"]
    # the guard (web/guard.py, answering to the test's host name, its own body cap above
    # the table's largest: test_web_guard.py tests it) in front of FastJobs(app), and a
    # FastAPI app
    policy = Policy(allowed_hosts=frozenset({"t"}), max_body=64 << 20)
    guarded, plain = asgi_app(nodes, policy), create_app(nodes)
    fast = guarded.app
    handed_on: list[str] = []

    async def main() -> list:
        out = []
        async with fast.app.router.lifespan_context(fast.app), \
                plain.router.lifespan_context(plain):
            cf = httpx.AsyncClient(transport=httpx.ASGITransport(app=guarded),
                                   base_url="http://t")
            cp = httpx.AsyncClient(transport=httpx.ASGITransport(app=plain), base_url="http://t")
            async with cf, cp:
                _inner_recorder(fast, handed_on)
                for path in ("/jobs", "/jobs/"):
                    for name, body, headers in CASES:
                        handed_on.clear()
                        a = await cf.post(path, content=body, headers=headers)
                        by_fast = not handed_on
                        b = await cp.post(path, content=body, headers=headers)
                        out.append((f"{name} {path}", a, b, by_fast))
        return out

    results = asyncio.run(main())
    statuses = {}
    for name, a, b, by_fast in results:
        keyed = "key" in name
        assert _normal(a, keyed) == _normal(b, keyed), name
        statuses[name] = a.status_code
        slash = name.replace(" /jobs/", " /jobs")  # the same answer with the slash
        if slash != name:
            assert a.status_code == statuses[slash], name
        if a.status_code == 202:
            assert by_fast, f"{name}: a valid job went on to FastAPI"
            assert dq.show(a.json()["job_id"]) is not None
            assert dq.show(b.json()["job_id"]) is not None
    # the table covers what it says it does
    st = {k.removesuffix(" /jobs"): v for k, v in statuses.items() if k.endswith(" /jobs")}
    assert st["minimal"] == st["delayed"] == st["key"] == 202
    assert st["invalid json"] == st["NaN"] == st["1e999"] == 422
    assert st["too large"] == st["too large to read"] == 413
    assert st["no content type"] == st["text/plain"] == 415
    assert st["paused queue"] == 409 and st["unknown replication"] == 503
    keyed = [r for r in results if r[0].split(" /")[0] in ("key", "key again")]
    ids = {r.json()["job_id"] for _, a, b, _ in keyed for r in (a, b)}
    assert len(ids) == 1  # one job for one key, whichever path took it
