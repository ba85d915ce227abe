"""disque-web under faults, on real processes: a 3-node cluster with one node killed
keeps POST /jobs, the dashboard's data and every route working, with no accepted job
lost; nodes that do not answer are a 503 that says so, never an empty cluster or a
404; a job submitted without a retry policy gets disque-web's --default-retry."""

from __future__ import annotations

import json
import time

import httpx
from support import wait_for

from disquepy.client import Disque
from disquepy.client.envelope import unwrap

JSON = {"Content-Type": "application/json"}  # a change is JSON (web/guard.py)


def test_one_node_of_three_down_keeps_every_route_working(make_cluster, web_factory):
    servers, _ = make_cluster(3)
    w = web_factory([f"127.0.0.1:{s.port}" for s in servers])
    accepted: dict[str, int] = {}
    with httpx.Client(base_url=w.url, timeout=30) as http:
        for i in range(12):
            r = http.post("/jobs", json={"payload": {"i": i}, "queue": "ha"})
            assert r.status_code == 202, r.text
            accepted[r.json()["job_id"]] = i
        some = next(iter(accepted))
        holders = []
        for s in servers:
            with Disque(f"127.0.0.1:{s.port}") as c:
                shown = c.show(some)
                if shown is not None:
                    holders.append(s)
                    assert shown["repl"] == 2  # a majority of three
        assert len(holders) == 2
        # kill the node that created the first job: its jobs have a copy elsewhere
        victim = next(s for s in servers if c_id(s).startswith(some[2:10]))
        victim.kill()
        t0 = time.monotonic()
        for i in range(12, 24):  # at once: before the others notice the node is gone
            r = http.post("/jobs", json={"payload": {"i": i}, "queue": "ha"})
            assert r.status_code == 202, r.text
            accepted[r.json()["job_id"]] = i
        assert time.monotonic() - t0 < 20
        # every accepted job is still known, its payload intact, by the survivors
        for jid, i in accepted.items():
            st = http.get(f"/jobs/{jid}")
            assert st.status_code == 200, st.text
            # queued, or held by a copy for the node that queued it (in_progress: it may
            # have been delivered there)
            assert st.json()["status"] in ("queued", "in_progress"), st.text
            assert st.json()["payload"] == {"i": i}
        over = http.get("/api/overview")
        assert over.status_code == 200
        totals = over.json()["totals"]
        assert (totals["nodes"], totals["nodes_up"]) == (3, 2)
        # depth: the jobs queued on the nodes that answered (the dead node's are held as
        # copies by the others until their retry time queues them again)
        assert 12 <= http.get("/queues/ha").json()["depth"] <= 24
        down = [n for n in http.get("/nodes").json() if n["state"] == "down"]
        assert [n["address"] for n in down] == [f"127.0.0.1:{victim.port}"]
        page = http.get("/jobs", params={"queue": "ha", "count": 100}).json()
        assert page["unreachable"] == [f"127.0.0.1:{victim.port}"]
        assert http.get("/health").json() == {"ok": True, "nodes": 3, "nodes_up": 2}
        later = list(accepted)[12]  # queued on a node that answers
        assert http.post(f"/jobs/{later}/cancel", headers=JSON).json()["status"] == "cancelled"
        assert http.get(f"/jobs/{later}").json()["status"] == "cancelled"
        # one queued on the dead node: its copies cannot say nobody works on it
        r = http.post(f"/jobs/{some}/cancel", headers=JSON)
        assert r.status_code == 409 and r.json()["status"] == "in_progress", r.text


def c_id(server) -> str:
    with Disque(f"127.0.0.1:{server.port}") as c:
        return c.execute_on(f"127.0.0.1:{server.port}", "HELLO")[1].decode()


def test_nodes_down_are_a_503_on_every_route(server_factory, web_factory):
    a, b = server_factory(), server_factory()
    w = web_factory([f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"])
    with httpx.Client(base_url=w.url, timeout=30) as http:
        jid = http.post("/jobs", json={"payload": 1, "queue": "q", "replicate": 1}).json()[
            "job_id"]
        a.kill()
        b.kill()
        for method, path in (("GET", f"/jobs/{jid}"), ("POST", f"/jobs/{jid}/cancel"),
                             ("GET", "/jobs"), ("GET", "/queues"), ("GET", "/queues/q"),
                             ("GET", "/groups"), ("GET", "/nodes"), ("GET", "/api/overview"),
                             ("GET", "/health"), ("GET", "/healthz"),
                             ("GET", "/queues/q/dead-letters"), ("POST", "/queues/q/pause"),
                             ("GET", "/jobs/finished"), ("GET", "/workers"),
                             ("GET", "/groups/q/g/dead-letters")):
            r = http.request(method, path, headers=JSON)
            assert r.status_code == 503, (path, r.text)
            assert "detail" in r.json() and "node" in r.json()["detail"], (path, r.text)
        r = http.post("/jobs", json={"payload": 2, "queue": "q"})
        assert r.status_code == 503, r.text
        key = r.json()["idempotency_key"]
        assert r.headers["idempotency-key"] == key and key in r.json()["detail"]
        # /metrics still answers, with the nodes down
        assert "disquepy_up{" in http.get("/metrics").text
        # the key named in the 503 is a client's key: sent back, it is one job
        a.start()
        b.start()
        wait_for(lambda: http.get("/health").status_code == 200, 30, what="nodes back")
        h = {"Idempotency-Key": key}
        one = http.post("/jobs", json={"payload": 2, "queue": "q"}, headers=h)
        two = http.post("/jobs", json={"payload": 2, "queue": "q"}, headers=h)
        assert one.status_code == two.status_code == 202
        assert one.json()["job_id"] == two.json()["job_id"]


def test_a_job_whose_creating_node_is_down_is_not_reported_missing(make_cluster, web_factory):
    servers, _ = make_cluster(3)
    w = web_factory([f"127.0.0.1:{s.port}" for s in servers])
    with httpx.Client(base_url=w.url, timeout=30) as http:
        # one copy only, on the node the web uses: with that node gone nobody knows it
        jid = http.post("/jobs", json={"payload": 1, "queue": "q", "replicate": 1}).json()[
            "job_id"]
        creator = next(s for s in servers if c_id(s).startswith(jid[2:10]))
        creator.kill()
        r = http.get(f"/jobs/{jid}")
        assert r.status_code == 503, r.text
        assert "the node that created it" in r.json()["detail"]
        assert r.json()["unreachable"] == [f"127.0.0.1:{creator.port}"]
        # an ID no node ever made, with its creating node up: 404
        other = next(s for s in servers if s is not creator)
        fake = "D-" + c_id(other)[:8] + jid[10:]
        assert http.get(f"/jobs/{fake}").status_code == 404


def test_default_retry_is_stamped_on_jobs_without_one(server, web_factory, dq):
    policy = {"max_retries": 3, "strategy": "fixed", "base": 2}
    w = web_factory([f"127.0.0.1:{server.port}"], "--default-retry", json.dumps(policy))
    with httpx.Client(base_url=w.url, timeout=30) as http:
        plain = http.post("/jobs", json={"payload": {"a": 1}, "queue": "r"}).json()["job_id"]
        own = http.post("/jobs", json={"payload": {"a": 2}, "queue": "r",
                                       "retry": {"max_attempts": 1}}).json()["job_id"]
    env = unwrap(dq.show(plain)["body"])
    assert env.policy == {"max_attempts": 4, "strategy": "fixed", "base": 2.0, "cap": 3600.0}
    assert json.loads(env.body) == {"a": 1} and env.attempt == 1
    assert unwrap(dq.show(own)["body"]).policy["max_attempts"] == 1


def test_bad_options_are_refused_with_one_line(web_factory, tmp_path):
    import subprocess
    import sys

    from support import ROOT

    for args, words in ((["--default-retry", '{"max_attempts": 0}'], "max_attempts"),
                        (["--default-retry", '{"tries": 3}'], "tries"),
                        (["--default-retry", "nope"], "--default-retry"),
                        (["--replicate", "two"], "--replicate"),
                        (["--replication-timeout", "30"], "--replication-timeout")):
        p = subprocess.run([sys.executable, "-m", "disquepy.web", *args], capture_output=True,
                           text=True, timeout=60, env={"PYTHONPATH": str(ROOT / "src")})
        assert p.returncode == 2 and words in p.stderr, p.stderr
