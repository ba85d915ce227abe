"""disque-web's guard (web/guard.py) on real processes: the login (node users, tokens),
the allowed hosts, same-origin JSON-only state changes, and bodies bounded in size and
time (issue #26, item 2). The attacks from a browser are in test_web_guard_browser.py."""

from __future__ import annotations

import base64
import hashlib
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from support import ROLE_USERS, ROOT, wait_for


def basic(user: str) -> dict[str, str]:
    pw = ROLE_USERS[user][0]
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()}


JSON = {"Content-Type": "application/json"}


@pytest.fixture
def login_web(secure_server, web_factory, tmp_path):
    """disque-web --auth nodes in front of a node with a user per role (its own
    connection as the read-only viewer), plus a token file and a metrics token."""
    tokens = tmp_path / "tokens"
    tokens.write_text("# name sha256\nci " + hashlib.sha256(b"ci-token").hexdigest() + "\n")
    metrics = tmp_path / "metrics-tokens"
    metrics.write_text("prom " + hashlib.sha256(b"scrape-me").hexdigest() + "\n")
    w = web_factory([f"127.0.0.1:{secure_server.port}"], "--auth", "nodes",
                    "--token-file", str(tokens), "--metrics-token-file", str(metrics),
                    "--user", "viewer", "--password", ROLE_USERS["viewer"][0])
    return w


def test_every_route_but_health_needs_a_login(login_web):
    with httpx.Client(base_url=login_web.url, timeout=30) as h:
        for path in ("/jobs", "/queues", "/nodes", "/api/overview", "/workers", "/docs",
                     "/openapi.json", "/jobs/D-00000000-000000000000000000000000-0000"):
            r = h.get(path)
            assert r.status_code == 401, (path, r.text)
        assert h.post("/jobs", json={"payload": 1}).status_code == 401
        assert h.get("/health").status_code == 200
        assert h.get("/login").status_code == 200 and "Log in" in h.get("/login").text
        # a page asked for by a browser goes to the login page
        r = h.get("/", headers={"Accept": "text/html"})
        assert r.status_code == 303 and r.headers["location"] == "/login?next=/"
        # /metrics: its own token
        assert h.get("/metrics").status_code == 401
        assert h.get("/metrics", headers={"Authorization": "Bearer ci-token"}).status_code == 401
        r = h.get("/metrics", headers={"Authorization": "Bearer scrape-me"})
        assert r.status_code == 200 and "disquepy_" in r.text


def test_node_users_act_with_their_own_role(login_web, secure_server):
    with httpx.Client(base_url=login_web.url, timeout=30) as h:
        r = h.post("/jobs", json={"payload": {"n": 1}, "queue": "orders", "delay": 60},
                   headers=basic("producer"))
        assert r.status_code == 202, r.text
        jid = r.json()["job_id"]
        # a consumer may not cancel (CANCEL is not in @consumer), nor add
        r = h.post(f"/jobs/{jid}/cancel", headers={**basic("consumer"), **JSON})
        assert r.status_code == 403 and r.json()["code"] == "NOPERM", r.text
        r = h.post("/jobs", json={"payload": 2}, headers=basic("consumer"))
        assert r.status_code == 403 and "'addjob'" in r.json()["detail"]
        # the viewer reads, changes nothing
        assert h.get(f"/jobs/{jid}", headers=basic("viewer")).json()["status"] == "scheduled"
        r = h.post("/queues/orders/pause", headers={**basic("viewer"), **JSON})
        assert r.status_code == 403, r.text
        # a wrong password is no login at all
        bad = {"Authorization": "Basic " + base64.b64encode(b"ops:nope").decode()}
        assert h.get("/jobs", headers=bad).status_code == 401
        # the admin may cancel
        r = h.post(f"/jobs/{jid}/cancel", headers={**basic("ops"), **JSON})
        assert r.status_code == 200 and r.json()["status"] == "cancelled", r.text


def test_the_login_session_cookie(login_web):
    with httpx.Client(base_url=login_web.url, timeout=30) as h:
        r = h.post("/login", json={"username": "producer", "password": "wrong"})
        assert r.status_code == 401 and "set-cookie" not in r.headers
        r = h.post("/login", json={"username": "producer",
                                   "password": ROLE_USERS["producer"][0]})
        assert r.status_code == 200 and r.json() == {"user": "producer"}
        cookie = r.headers["set-cookie"]
        assert "disque_web_session=" in cookie
        low = cookie.lower()
        assert "httponly" in low and "samesite=strict" in low and "path=/" in low
        assert h.get("/session").json() == {"user": "producer", "login": ["nodes", "token"]}
        r = h.post("/jobs", json={"payload": 1, "queue": "mine"})
        assert r.status_code == 202, r.text
        r = h.post("/queues/mine/pause", headers=JSON)  # a producer may not PAUSE
        assert r.status_code == 403, r.text
        assert h.post("/logout", headers=JSON).status_code == 200
        assert h.get("/jobs").status_code == 401  # the session is gone
        assert h.get("/session").json()["user"] is None
    with httpx.Client(base_url=login_web.url, timeout=30) as h:  # a token logs in too
        assert h.post("/login", json={"token": "nope"}).status_code == 401
        assert h.post("/login", json={"token": "ci-token"}).json() == {"user": "ci"}
        assert h.get("/nodes").status_code == 200
        r = h.get("/nodes", headers={"Cookie": "disque_web_session=forged"})
        assert r.status_code == 401
    with httpx.Client(base_url=login_web.url, timeout=30) as h:
        assert h.get("/nodes", headers={"Authorization": "Bearer ci-token"}).status_code == 200


def test_failed_logins_from_one_address_are_stopped(login_web):
    with httpx.Client(base_url=login_web.url, timeout=30) as h:
        codes = [h.post("/login", json={"username": "ops", "password": f"guess{i}"}).status_code
                 for i in range(12)]
        assert codes[:10] == [401] * 10 and codes[10:] == [429, 429], codes
        r = h.post("/login", json={"username": "ops", "password": ROLE_USERS["ops"][0]})
        assert r.status_code == 429 and int(r.headers["retry-after"]) <= 61


def test_state_changes_come_from_this_origin_as_json(web, http):
    r = http.post("/jobs", json={"payload": 1, "queue": "csrf", "delay": 60})
    assert r.status_code == 202
    jid = r.json()["job_id"]
    for headers in ({}, {"Content-Type": "text/plain"},
                    {"Content-Type": "application/x-www-form-urlencoded"},
                    {"Content-Type": "multipart/form-data; boundary=x"}):
        r = http.post(f"/jobs/{jid}/cancel", headers=headers, content=b"confirm=1")
        assert r.status_code == 415, (headers, r.text)
        assert "Content-Type: application/json" in r.json()["detail"]
    # a form's empty body still names its type; only a bodiless, typeless request passes
    r = http.post(f"/jobs/{jid}/cancel",
                  headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 415, r.text
    for headers in ({"Origin": "http://evil.test"}, {"Origin": "null"},
                    {"Origin": f"http://localhost:{web.port}"},  # another origin, same site
                    {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"}):
        r = http.post(f"/jobs/{jid}/cancel", headers={**headers, **JSON})
        assert r.status_code == 403, (headers, r.text)
        r = http.post(f"/jobs/{jid}/cancel", headers=headers)  # bodiless, as curl's
        assert r.status_code == 403, (headers, r.text)
        r = http.post("/jobs", json={"payload": 1}, headers=headers)
        assert r.status_code == 403, (headers, r.text)
    assert http.get(f"/jobs/{jid}").json()["status"] == "scheduled"  # nothing went through
    own = {"Origin": web.url, "Sec-Fetch-Site": "same-origin", **JSON}
    r = http.post(f"/jobs/{jid}/cancel", headers=own)
    assert r.status_code == 200 and r.json()["status"] == "cancelled", r.text
    # Disqueue's own call: curl -X POST .../cancel, no body, no Content-Type, no Origin
    jid = http.post("/jobs", json={"payload": 2, "queue": "csrf", "delay": 60}).json()["job_id"]
    r = http.post(f"/jobs/{jid}/cancel")
    assert r.status_code == 200 and r.json()["status"] == "cancelled", r.text


def test_a_host_not_allowed_reads_nothing(web, http):
    http.post("/jobs", json={"payload": {"secret": "s3cr3t"}, "queue": "rebind"})
    for host in ("evil.test", f"evil.test:{web.port}", "127.0.0.1.evil.test", "", "[::2]"):
        r = http.get("/jobs?state=all", headers={"Host": host})
        assert r.status_code == 400 and "s3cr3t" not in r.text, (host, r.text)
    for host in (f"127.0.0.1:{web.port}", f"localhost:{web.port}", "localhost"):
        assert http.get("/jobs?state=all", headers={"Host": host}).status_code == 200
    # every answer says: never in a frame
    assert http.get("/health").headers["x-frame-options"] == "DENY"


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_an_endless_chunked_body_is_cut_off(web):
    before = rss_kb(web.proc.pid)
    s = socket.create_connection(("127.0.0.1", web.port))
    s.sendall(b"POST /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Transfer-Encoding: chunked\r\n\r\n")
    chunk = b"%x\r\n" % 65536 + b"x" * 65536 + b"\r\n"
    sent = 0
    with pytest.raises(OSError):  # the server closes the connection
        while sent < 200 << 20:
            s.sendall(chunk)
            sent += 65536
    assert sent <= 32 << 20, sent  # cut off at the 8 MiB cap (plus socket buffers)
    s.close()
    assert rss_kb(web.proc.pid) - before < 60_000
    r = httpx.post(web.url + "/jobs", content=b"[" * (9 << 20), headers=JSON)
    assert r.status_code == 413, r.text


def test_half_sent_bodies_are_closed_after_the_body_timeout(server, web_factory):
    w = web_factory([f"127.0.0.1:{server.port}"], "--body-timeout", "2")
    conns = []
    for _ in range(300):
        s = socket.create_connection(("127.0.0.1", w.port))
        s.sendall(b"POST /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                  b"\r\nContent-Length: 1000\r\n\r\n{\"payload\":")
        conns.append(s)
    time.sleep(2.5)
    closed = 0
    deadline = time.monotonic() + 10
    for s in conns:
        s.settimeout(max(0.1, deadline - time.monotonic()))
        data = b""
        try:
            while chunk := s.recv(4096):
                data += chunk
        except OSError:
            pass
        if data.startswith(b"HTTP/1.1 408"):
            closed += 1
        s.close()
    assert closed == 300
    assert httpx.get(w.url + "/health").status_code == 200


def test_half_sent_heads_are_closed_after_the_head_timeout(server, web_factory):
    """Slowloris: request heads that never end, on new and on kept-alive connections,
    are closed HEAD_TIMEOUT seconds after they began; whole requests still pass."""
    from disquepy.web.httpproto import HEAD_TIMEOUT

    w = web_factory([f"127.0.0.1:{server.port}"])
    conns = []
    for i in range(100):
        s = socket.create_connection(("127.0.0.1", w.port))
        if i % 2:  # a whole request first, then a head that never ends on the same one
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            got = b""
            while b"\r\n\r\n" not in got:
                got += s.recv(4096)
            head, _, rest = got.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200")
            length = int(re.search(rb"content-length: (\d+)", head, re.I).group(1))
            while len(rest) < length:  # the whole answer read: what comes next is new
                rest += s.recv(4096)
        s.sendall(b"GET /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        conns.append(s)
    t0 = time.monotonic()
    assert httpx.get(w.url + "/health").status_code == 200  # others are served meanwhile
    closed = 0
    for s in conns:
        s.settimeout(max(0.1, t0 + HEAD_TIMEOUT + 10 - time.monotonic()))
        try:
            closed += s.recv(4096) == b""  # closed, no answer
        except OSError as e:  # a reset is a close too; a timeout is not
            closed += isinstance(e, ConnectionResetError)
        s.close()
    waited = time.monotonic() - t0
    assert closed == 100
    assert HEAD_TIMEOUT - 1 <= waited < HEAD_TIMEOUT + 10, waited
    wait_for(lambda: "no whole request head within" in w.log(), what="the log line")


def test_a_non_loopback_address_without_a_login_refuses_to_start():
    p = subprocess.run([sys.executable, "-m", "disquepy.web", "--host", "0.0.0.0"],
                       capture_output=True, text=True, timeout=60,
                       env={"PYTHONPATH": str(ROOT / "src")})
    assert p.returncode == 2, p.stderr
    assert "refusing to listen on 0.0.0.0 without a login" in p.stderr
    assert "--insecure-no-auth" in p.stderr


def test_the_default_logs_that_it_has_no_login(web):
    wait_for(lambda: "no login (--auth nodes or --token-file)" in web.log(),
             what="the warning")
