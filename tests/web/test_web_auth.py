"""``disque-web --user --password --tls --cacert --cert --key``: the HTTP API in front of a
node with users per role, over mutual TLS (real processes)."""

from __future__ import annotations

import subprocess
import sys

import httpx
from support import ROLE_USERS, ROOT


def web_args(s, user: str) -> list[str]:
    return ["--user", user, "--password", ROLE_USERS[user][0], "--tls", "--cacert",
            s.tls["cacert"], "--cert", s.tls["cert"], "--key", s.tls["key"]]


def test_web_as_a_producer_and_as_a_viewer_over_tls(secure_server, web_factory):
    s = secure_server
    nodes = [f"127.0.0.1:{s.tls_port}"]
    prod = web_factory(nodes, *web_args(s, "producer"))
    view = web_factory(nodes, *web_args(s, "viewer"))
    with httpx.Client(base_url=prod.url, timeout=30) as http:
        r = http.post("/jobs", json={"payload": {"n": 1}, "queue": "orders"})
        assert r.status_code == 202, r.text
        jid = r.json()["job_id"]
    with httpx.Client(base_url=view.url, timeout=30) as http:
        assert http.get(f"/jobs/{jid}").status_code == 200  # reads: allowed
        assert http.get("/nodes").status_code == 200
        assert http.get("/").status_code == 200  # the dashboard's snapshot reads only
        r = http.post("/jobs", json={"payload": {"n": 2}, "queue": "orders"})
        assert r.status_code == 403, r.text
        assert r.json()["code"] == "NOPERM"
        assert "User viewer has no permissions to run the 'addjob' command" in r.json()["detail"]


def test_web_refuses_tls_files_without_tls():
    p = subprocess.run([sys.executable, "-m", "disquepy.web", "--cacert", "ca.crt"],
                       capture_output=True, text=True, timeout=60,
                       env={"PYTHONPATH": str(ROOT / "src")})
    assert p.returncode == 2 and "--cacert, --cert and --key need --tls" in p.stderr
