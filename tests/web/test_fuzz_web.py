"""disque-web under malformed and hostile requests (issue #26: ``make fuzz`` covers the web
routes). Every route of the app's own OpenAPI schema, so a new route is fuzzed the day
it lands, gets seeded random requests: path parameters that are garbage, too long,
encoded or real job IDs; query values out of range; bodies that are JSON mutated
(NaN, 1e999, deep nesting, wrong types, huge strings), truncated or binary; content
types, origins and ``Sec-Fetch-Site`` values a browser or a script could send. Then raw
HTTP on a socket: bad request lines, broken headers, chunked bodies that lie,
``Content-Length`` that lies.

After every case: no 500, every error a JSON ``{"detail": ...}``, the process alive;
at the end the jobs added before are intact on the node, ``/health`` answers, and the
web's log holds no traceback. Budget: ``DISQUEPY_FUZZ_CASES`` random cases (default
40); ``make fuzz`` runs many more (counts written to ``DISQUEPY_FUZZ_REPORT``).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
from collections import Counter

import httpx
from support import raw

CASES = int(os.environ.get("DISQUEPY_FUZZ_CASES", "40"))
SEED = int(os.environ.get("DISQUEPY_FUZZ_SEED", "18"))

GARBAGE_PARTS = ["", "x", "D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-0000", "..", "../..", "%00",
                 "%ff%fe", "é", "\u202e", "a" * 5000, "-1", "0", "1e999", "NaN", "null",
                 "[]", "{}", "'; DROP", "<script>", "D-" + "z" * 60, " ", "%2F%2F"]
NUMBERS = [0, -1, 1, 2**31, 2**63, -(2**63), 10**30, 0.5, "1e999", "NaN", "", "x", "∞"]
CTYPES = [None, "application/json", "application/json; charset=utf-8", "text/plain",
          "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
          "application/JSON", "application/json-patch+json", "", "*/*", "\x7f"]
ORIGINS = [None, "null", "http://evil.test", "http://127.0.0.1:1", ""]
SITES = [None, "same-origin", "none", "cross-site", "same-site", "bogus"]


def value(rng: random.Random, depth: int = 0):
    """A random JSON-ish value (some not JSON at all once serialized by ``dumps``)."""
    k = rng.randrange(9 if depth < 4 else 5)
    if k == 0:
        return rng.choice(NUMBERS)
    if k == 1:
        return rng.choice(GARBAGE_PARTS)
    if k == 2:
        return rng.choice([True, False, None])
    if k == 3:
        return float(rng.choice(["nan", "inf", "-inf"]))
    if k == 4:
        return rng.random() * 10 ** rng.randint(-5, 20)
    if k in (5, 6):
        return {rng.choice(["payload", "priority", "queue", "retry", "delay", "ttl",
                            "max_attempts", "base", "idempotency_key", "x", ""]):
                value(rng, depth + 1) for _ in range(rng.randint(0, 5))}
    return [value(rng, depth + 1) for _ in range(rng.randint(0, 4))]


def body(rng: random.Random) -> bytes:
    k = rng.randrange(8)
    if k == 0:
        return b""
    if k == 1:
        return rng.randbytes(rng.randint(1, 300))
    if k == 2:
        return b"[" * rng.randint(1, 5000)  # deep nesting
    if k == 3:
        return b'{"payload": "' + b"x" * rng.randint(1, 200_000) + b'"}'
    good = {"payload": value(rng), "priority": rng.choice(["high", "medium", "low", "x", 1]),
            "queue": rng.choice(["fz", "fz2", "", "a" * 300, value(rng)])}
    if rng.random() < 0.5:
        good[rng.choice(["retry", "delay", "ttl", "idempotency_key"])] = value(rng)
    text = json.dumps(good if k < 6 else value(rng), allow_nan=True).encode()
    if k == 7 and len(text) > 2:
        cut = rng.randrange(len(text))
        text = text[:cut] + rng.randbytes(rng.randint(0, 3)) + text[cut + 1:]
    return text


def fill(rng: random.Random, template: str, victims: list[str]) -> str:
    def part(m: re.Match) -> str:
        if "job_id" in m.group(1) and victims and rng.random() < 0.4:
            return rng.choice(victims)
        return httpx.URL("http://h/" + rng.choice(GARBAGE_PARTS)).raw_path.decode()[1:]
    return re.sub(r"\{([^}/]+)\}", part, template)


def headers(rng: random.Random, port: int) -> dict[str, bytes]:
    """Headers a browser or a script could send (raw bytes: non-ASCII ones too)."""
    h: dict[str, str] = {}
    ct = rng.choice(CTYPES)
    if ct is not None:
        h["Content-Type"] = ct
    origin = rng.choice(ORIGINS + [f"http://127.0.0.1:{port}"])
    if origin is not None:
        h["Origin"] = origin
    site = rng.choice(SITES)
    if site is not None:
        h["Sec-Fetch-Site"] = site
    if rng.random() < 0.1:
        h["Host"] = rng.choice(["evil.test", f"127.0.0.1:{port}", "", "a" * 300])
    if rng.random() < 0.1:
        h["Idempotency-Key"] = rng.choice(GARBAGE_PARTS)
    if rng.random() < 0.1:
        h["Authorization"] = rng.choice(["Basic !!!", "Bearer x", "Basic " + "A" * 900])
    if rng.random() < 0.1:
        h["X-Fuzz"] = rng.choice(GARBAGE_PARTS)
    return {k: v.encode() for k, v in h.items()}


RAW = {
    "bad request line": b"GARBAGE\r\n\r\n",
    "no version": b"GET /\r\n\r\n",
    "http/0.9": b"GET /health\n\n",
    "huge header": b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX: " + b"a" * 200_000 + b"\r\n\r\n",
    "many headers": b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X: y\r\n" * 5000 + b"\r\n",
    "nul in header": b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX: \x00\r\n\r\n",
    "negative length": b"POST /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                       b"application/json\r\nContent-Length: -5\r\n\r\n{}",
    "length lies (short)": b"POST /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                           b"application/json\r\nContent-Length: 2\r\n\r\n{\"payload\": 1}",
    "two lengths": b"POST /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                   b"\r\nContent-Length: 2\r\nContent-Length: 20\r\n\r\n{}",
    "bad chunk size": b"POST /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                      b"application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
    "chunk lies": b"POST /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                  b"\r\nTransfer-Encoding: chunked\r\n\r\nffff\r\n{}\r\n0\r\n\r\n",
    "length and chunked": b"POST /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                          b"application/json\r\nContent-Length: 4\r\nTransfer-Encoding: "
                          b"chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    "pipelined garbage": b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" + b"\xff" * 100,
    "binary": bytes(range(256)) * 4,
}


def test_web_routes_survive_hostile_requests(server_factory, web_factory, tmp_path):
    from disquepy.client import Disque

    node = server_factory()
    w = web_factory([f"127.0.0.1:{node.port}"])
    dq = Disque([f"127.0.0.1:{node.port}"])
    rng = random.Random(SEED)
    counts: Counter[str] = Counter()
    try:
        keep = {dq.add_job("keep", f"kept-{i}".encode(), delay=3600): f"kept-{i}".encode()
                for i in range(10)}
        victims = [dq.add_job("fz", b"victim", delay=3600) for _ in range(5)]
        with httpx.Client(base_url=w.url, timeout=30) as http:
            schema = http.get("/openapi.json").json()
            routes = [(m.upper(), path) for path, ops in schema["paths"].items()
                      for m in ops if m in ("get", "post", "put", "delete", "patch")]
            assert len(routes) >= 15, routes  # the schema is the app's, whole
            for i in range(CASES * len(routes) // 4 or 1):
                method, template = rng.choice(routes)
                path = fill(rng, template, victims)
                params = {rng.choice(["limit", "cursor", "since", "state", "queue", "page",
                                      "x"]): str(rng.choice(NUMBERS + GARBAGE_PARTS[:8]))
                          for _ in range(rng.randint(0, 3))}
                data = body(rng) if method != "GET" or rng.random() < 0.1 else b""
                what = f"{method} {template} #{i}"
                try:
                    r = http.request(method, path, params=params, content=data,
                                     headers=headers(rng, w.port))
                except httpx.HTTPError as e:  # the server may close a request it refuses
                    assert w.proc.poll() is None, f"{what}: disque-web died ({e})"
                    counts["closed"] += 1
                    continue
                assert r.status_code < 500, f"{what}: {r.status_code} {r.text[:300]}"
                if r.status_code >= 400 and r.headers.get("content-type", "").startswith(
                        "application/json"):
                    assert "detail" in r.json(), f"{what}: {r.text[:300]}"
                counts[f"web:{method} {template}"] += 1
            for name, data in RAW.items():
                reply = b""
                with contextlib.suppress(OSError):  # a reset is an answer too
                    reply = raw(w.port, data, timeout=2)
                assert not reply.startswith(b"HTTP/1.1 5"), (name, reply[:200])
                assert w.proc.poll() is None, f"raw {name}: disque-web died"
                counts["web-raw"] += 1
            assert http.get("/health").status_code == 200
        for jid, b in keep.items():
            job = dq.show(jid)
            assert job is not None and job["body"] == b and job["state"] in (
                "queued", "active"), (jid, job)  # delayed: active until its time
        assert "Traceback" not in w.log(), w.log()[-3000:]
    finally:
        dq.close()
    report = os.environ.get("DISQUEPY_FUZZ_REPORT")
    if report:
        total = Counter({"web-routes": sum(n for k, n in counts.items()
                                           if k.startswith("web:")),
                         "web-raw": counts["web-raw"], "web-closed": counts["closed"]})
        with open(report, "w") as f:
            json.dump(dict(total), f)
