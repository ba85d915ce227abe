"""The HTTP API on real processes: a disque-web (uvicorn) in front of real nodes."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from support import wait_for

from disquepy.client import Disque
from disquepy.client.priority import PriorityOrder
from disquepy.worker import Worker

JSON = {"Content-Type": "application/json"}  # a change is JSON (web/guard.py)


def submit(http, **job) -> dict:
    r = http.post("/jobs", json=job)
    assert r.status_code == 202, r.text
    return r.json()


def test_submit_returns_202_and_queues_by_priority(http, dq):
    r = http.post("/jobs/", json={"payload": {"msg": "urgent"}, "priority": "high"})
    assert r.status_code == 202
    body = r.json()
    assert body["status"] == "queued" and body["priority"] == "high"
    assert r.headers["location"] == f"/jobs/{body['job_id']}"
    assert dq.qlen("default:high") == 1 and dq.qlen("default") == 0
    submit(http, payload={"msg": "medium"}, priority="low", queue="emails")
    submit(http, payload={"msg": "plain"}, queue="emails")
    assert dq.qlen("emails:low") == 1 and dq.qlen("emails") == 1
    job = dq.get_jobs(PriorityOrder(["default", "emails"], 0).next(), nohang=True)[0]
    assert job.id == body["job_id"] and job.json() == {"msg": "urgent"}


def test_status_of_a_queued_job(http):
    jid = submit(http, payload={"n": 1}, queue="emails", priority="low", ttl=600)["job_id"]
    st = http.get(f"/jobs/{jid}").json()
    assert st["job_id"] == jid and st["status"] == "queued"
    assert st["queue"] == "emails" and st["priority"] == "low" and st["payload"] == {"n": 1}
    assert 590 <= st["ttl"] <= 600 and st["attempt"] == 1


def test_delayed_job_is_scheduled(http, dq):
    r = submit(http, payload=1, queue="later", delay=120)
    assert r["status"] == "scheduled"
    assert http.get(f"/jobs/{r['job_id']}").json()["status"] == "scheduled"
    assert dq.qlen("later") == 0


def test_idempotency_key_returns_the_first_job(http, dq):
    h = {"Idempotency-Key": "order-42"}
    a = http.post("/jobs", json={"payload": {"order": 42}, "queue": "orders"}, headers=h)
    b = http.post("/jobs", json={"payload": {"order": 42}, "queue": "orders"}, headers=h)
    assert a.status_code == b.status_code == 202
    assert a.json()["job_id"] == b.json()["job_id"]
    assert dq.qlen("orders") == 1
    c = http.post("/jobs", json={"payload": {"order": 42}, "queue": "orders"})
    assert c.json()["job_id"] != a.json()["job_id"] and dq.qlen("orders") == 2


@pytest.mark.parametrize("job, words", [
    ({"priority": "high"}, ["payload", "Field required"]),
    ({"payload": 1, "priority": "urgent"}, ["priority", "'high', 'medium' or 'low'"]),
    ({"payload": 1, "delay": -1}, ["delay", "greater than or equal to 0"]),
    ({"payload": 1, "ttl": 10, "delay": 10}, ["delay must be shorter than ttl"]),
    ({"payload": 1, "queue": "has space"}, ["queue"]),
    ({"payload": 1, "queue": ":high"}, ["queue"]),
    ({"payload": 1, "colour": "red"}, ["colour", "Extra inputs"]),
    ({"payload": 1, "retry": {"max_attempts": 0}}, ["retry.max_attempts"]),
    ({"payload": 1, "retry": {"strategy": "random"}}, ["retry.strategy"]),
])
def test_bad_jobs_get_a_clear_422(http, dq, job, words):
    r = http.post("/jobs", json=job)
    assert r.status_code == 422
    detail = r.json()["detail"]  # FastAPI's form: a list of {loc, msg, type}
    msg = " ".join(".".join(map(str, e["loc"])) + ": " + e["msg"] for e in detail)
    for w in words:
        assert w in msg
    assert all("input" not in e for e in detail)  # the payload is not echoed back
    assert dq.info()["registered_jobs"] == 0


@pytest.mark.parametrize("raw", [b'{"payload": NaN}', b'{"payload": 1e999}',
                                 b'{"payload": [1, {"x": -Infinity}]}'])
def test_nan_and_infinity_are_refused_not_stored(http, dq, raw):
    r = http.post("/jobs", content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 422, r.text
    assert any("NaN and infinite numbers" in e["msg"] for e in r.json()["detail"])
    assert dq.info()["registered_jobs"] == 0


@pytest.mark.parametrize("ctype", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_a_body_that_is_not_said_to_be_json_is_a_415(http, dq, ctype):
    headers = {} if ctype is None else {"Content-Type": ctype}
    r = http.post("/jobs", content=b'{"payload": 1}', headers=headers)
    assert r.status_code == 415, r.text
    assert "Content-Type: application/json" in r.json()["detail"]
    ok = http.post("/jobs", content=b'{"payload": 1}',
                   headers={"Content-Type": "application/json; charset=utf-8"})
    assert ok.status_code == 202
    assert dq.info()["registered_jobs"] == 1


def test_not_json_and_wrong_ids(http):
    r = http.post("/jobs", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and "JSON" in r.json()["detail"][0]["msg"]
    assert http.get("/jobs/nope").status_code == 400
    assert http.post("/jobs/nope/cancel", headers=JSON).status_code == 400
    r = http.get("/jobs/D-00000000-zPCUrbeByrnG+JCK2hpi3/i4-05a1")
    assert r.status_code == 404 and r.json()["status"] == "unknown"


def test_cancel_a_queued_job(http, dq):
    jid = submit(http, payload={"x": 1}, queue="emails")["job_id"]
    r = http.post(f"/jobs/{jid}/cancel", headers=JSON)
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    assert dq.qlen("emails") == 0 and dq.show(jid) is None
    assert http.get(f"/jobs/{jid}").json()["status"] == "cancelled"
    assert http.post(f"/jobs/{jid}/cancel", headers=JSON).status_code == 200  # twice: still cancelled


def test_cancel_a_scheduled_job(http, dq):
    jid = submit(http, payload=1, queue="later", delay=300)["job_id"]
    assert http.post(f"/jobs/{jid}/cancel", headers=JSON).status_code == 200
    assert dq.show(jid) is None


def test_cancel_refuses_a_job_in_progress(http, dq):
    jid = submit(http, payload={"x": 1}, queue="emails")["job_id"]
    assert dq.get_jobs("emails", nohang=True)[0].id == jid  # a worker holds it now
    r = http.post(f"/jobs/{jid}/cancel", headers=JSON)
    assert r.status_code == 409
    assert r.json()["status"] == "in_progress" and "in progress" in r.json()["detail"]
    assert http.get(f"/jobs/{jid}").json()["status"] == "in_progress"
    assert dq.show(jid) is not None
    dq.ack(jid)
    assert http.get(f"/jobs/{jid}").json()["status"] == "completed"
    assert http.post(f"/jobs/{jid}/cancel", headers=JSON).status_code == 409


def test_failing_job_retries_then_lands_in_dead_letters_as_failed(http, dq):
    calls = []

    def handler(payload):
        calls.append(payload)
        raise RuntimeError("boom: " + payload["what"])

    jid = submit(http, payload={"what": "disk full"}, queue="imports", priority="high",
                 retry={"max_attempts": 2, "strategy": "fixed", "base": 1})["job_id"]
    wd = Disque(dq.node)
    w = Worker(wd, ["imports"], 1, handler, priorities=True, poll_timeout_ms=200).start()
    try:
        dead = wait_for(lambda: http.get("/queues/imports/dead-letters").json(), 30,
                        what="a dead letter")
    finally:
        w.stop(5)
        wd.close()  # (its named connection would stay a "worker" on the shared server)
    assert len(calls) == 2  # max_attempts, with the fixed back-off between them
    assert dead[0]["job_id"] == jid and "boom: disk full" in dead[0]["error"]
    assert dead[0]["queue"] == "imports:high" and dead[0]["payload"] == {"what": "disk full"}
    st = http.get(f"/jobs/{jid}").json()
    assert st["status"] == "failed" and "boom: disk full" in st["error"]
    assert st["queue"] == "imports" and st["priority"] == "high"
    # /queues is a snapshot up to --cache-ttl (0.2 s) old: it may predate the dead letter
    q = wait_for(lambda: (v := http.get("/queues/imports").json())["dead"] and v, 5,
                 what="the queue's snapshot to count the dead letter")
    assert q["dead"] == 1 and q["depth"] == 0
    # requeue by the original job's ID: back in its priority level
    r = http.post(f"/queues/imports/dead-letters/{jid}/requeue", headers=JSON)
    assert r.status_code == 200 and r.json() == {"requeued": 1}
    assert dq.qlen("imports:high") == 1 and dq.qlen("imports:dead") == 0
    assert http.post(f"/queues/imports/dead-letters/{jid}/requeue", headers=JSON).status_code == 404


def test_delete_dead_letter(http, dq):
    from disquepy.client.deadletter import dead_letter_body

    dl = dq.add_job("q:dead", dead_letter_body("q", "D-x", b'{"a":1}', "err", 3, 0))
    assert http.delete(f"/queues/q/dead-letters/{dl}", headers=JSON).json() == {"deleted": 1}
    assert dq.qlen("q:dead") == 0
    assert http.delete(f"/queues/q/dead-letters/{dl}", headers=JSON).status_code == 404


def test_queues_stats_and_pause(http, dq):
    for prio, n in (("high", 2), ("medium", 3), ("low", 4)):
        for _ in range(n):
            submit(http, payload=1, queue="emails", priority=prio)
    time.sleep(0.3)
    qs = {q["name"]: q for q in http.get("/queues").json()}
    e = qs["emails"]
    assert e["depth"] == 9 and e["paused"] == "none"
    assert {p: e["levels"][p]["depth"] for p in ("high", "medium", "low")} == \
        {"high": 2, "medium": 3, "low": 4}
    assert e["levels"]["low"]["queue"] == "emails:low" and e["oldest_age"] >= 0
    assert http.get("/queues/nope").status_code == 404

    r = http.post("/queues/emails/pause", json={"direction": "in"})
    assert r.json()["paused"] == {"high": "in", "medium": "in", "low": "in"}
    r = http.post("/jobs", json={"payload": 1, "queue": "emails"})
    assert r.status_code == 409 and "paused" in r.json()["detail"].lower()
    assert http.get("/queues/emails").json()["paused"] == "in"
    http.post("/queues/emails/resume", headers=JSON)
    submit(http, payload=1, queue="emails")
    assert dq.qlen("emails") == 4


def test_blocked_consumers_are_counted(http, dq, server):
    c = Disque(f"127.0.0.1:{server.port}")
    # one consumer of the three priority levels, as a worker blocks: counted once
    t = threading.Thread(target=c.get_jobs, args=(["jobs:high", "jobs", "jobs:low"],),
                         kwargs={"timeout_ms": 3000})
    t.start()
    try:
        dq.add_job("jobs:low", "x", delay=60)  # the queue exists, nothing to take
        q = wait_for(lambda: next((q for q in http.get("/queues").json()
                                   if q["name"] == "jobs" and q["blocked"]), None),
                     5, what="a blocked consumer")
        assert q["blocked"] == 1
        assert {p: q["levels"][p]["blocked"] for p in q["levels"]} == \
            {"high": 1, "medium": 1, "low": 1}
        assert http.get("/api/overview").json()["totals"]["blocked"] == 1
    finally:
        t.join()
        c.close()


def test_jobs_paging_sees_every_job_once(http, dq):
    with dq.pipeline() as p:
        for i in range(1200):
            p.add_job("bulk" if i % 3 else "bulk:high", str(i))
        ids = set(p.execute())
    dq.add_job("bulk:dead", b"{}")  # a dead letter: listed in its own view, not here
    seen: list[str] = []
    cursor, pages = "0", 0
    while True:
        d = http.get("/jobs", params={"state": "queued", "count": 100, "cursor": cursor}).json()
        seen += [j["job_id"] for j in d["jobs"]]
        pages += 1
        cursor = d["next_cursor"]
        if cursor == "0":
            break
        assert pages < 100
    assert len(seen) == len(set(seen)) == 1200 and set(seen) == ids
    assert pages >= 6
    d = http.get("/jobs", params={"queue": "bulk", "priority": "high", "count": 500}).json()
    assert d["jobs"] and all(j["priority"] == "high" for j in d["jobs"])
    assert http.get("/jobs", params={"count": 0}).status_code == 422
    assert http.get("/jobs", params={"cursor": "abc"}).status_code == 422


def test_nodes(http, server):
    nodes = http.get("/nodes").json()
    assert len(nodes) == 1 and nodes[0]["state"] == "up"
    assert nodes[0]["address"].endswith(f":{server.port}")
    assert nodes[0]["used_memory"] > 0 and nodes[0]["connected_clients"] >= 1


def test_docs_are_served_without_a_cdn(http):
    html = http.get("/docs").text
    assert "/_docs-assets/swagger-ui-bundle.js" in html and "cdn" not in html.lower()
    assert http.get("/_docs-assets/swagger-ui-bundle.js").status_code == 200
    assert http.get("/_docs-assets/swagger-ui.css").status_code == 200
    assert "redoc.standalone.js" in http.get("/redoc").text
    spec = http.get("/openapi.json").json()
    assert {"/jobs", "/jobs/{job_id}", "/jobs/{job_id}/cancel", "/queues",
            "/queues/{name}/dead-letters", "/nodes"} <= set(spec["paths"])


def test_node_failure_mid_traffic_fails_over_without_duplicates(make_cluster, web_factory):
    servers, _ = make_cluster(3)
    w = web_factory([f"127.0.0.1:{s.port}" for s in servers])
    accepted: list[str] = []
    errors: list[int] = []
    with httpx.Client(base_url=w.url, timeout=30) as http:
        for i in range(10):
            accepted.append(submit(http, payload={"i": i}, queue="ha")["job_id"])
        # the node the API's clients use is not known from outside: kill two of three,
        # every later POST must either be taken by the survivor or refused with 503
        servers[0].kill()
        servers[1].kill()
        for i in range(10, 30):
            r = http.post("/jobs", json={"payload": {"i": i}, "queue": "ha", "replicate": 1})
            if r.status_code == 202:
                accepted.append(r.json()["job_id"])
            else:
                assert r.status_code == 503, r.text
                errors.append(r.status_code)
    assert len(accepted) == len(set(accepted))
    survivor = Disque(f"127.0.0.1:{servers[2].port}")
    try:
        later = accepted[10:]
        assert later, f"no POST succeeded after the failure ({len(errors)} x 503)"
        bodies = [survivor.show(j) for j in later]
        assert all(b is not None for b in bodies)
        # each accepted request is one job: no body twice among the survivor's queued jobs
        queued = [survivor.show(j)["body"] for j in survivor.jscan(queue="ha", state="queued")]
        assert len(queued) == len(set(queued))
    finally:
        survivor.close()


def test_a_completed_job_shows_the_workers_result(http, dq):
    jid = submit(http, payload={"a": 1}, queue="sums")["job_id"]
    (job,) = dq.get_jobs("sums:medium" if dq.qlen("sums:medium") else "sums", nohang=True)
    assert job.id == jid
    dq.ack(jid, result={"total": 3})
    st = http.get(f"/jobs/{jid}").json()
    assert st["status"] == "completed" and st["result"] == {"total": 3}
    assert st["finished_at"] >= st["created_at"] and st["error"] is None


def test_concurrent_posts_each_get_their_own_job(http, web, dq):
    """Concurrent POST /jobs from 16 connections at once: each request gets its own
    job, with its own body."""
    got: dict[int, str] = {}
    lock = threading.Lock()

    def post(k: int) -> None:
        with httpx.Client(base_url=web.url, timeout=30) as c:
            for i in range(k * 25, k * 25 + 25):
                r = c.post("/jobs", json={"payload": {"i": i}, "queue": "pipe"})
                assert r.status_code == 202, r.text
                with lock:
                    got[i] = r.json()["job_id"]

    threads = [threading.Thread(target=post, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(got) == 400 and len(set(got.values())) == 400
    for i, jid in got.items():  # each ID is the job of the request that got it
        assert dq.show(jid)["body"] == f'{{"i":{i}}}'.encode()
    assert dq.qlen("pipe") == 400


def test_posts_after_the_node_restarts(server_factory, web_factory):
    """The pipe to the node reconnects after the node went away and came back; a POST in
    between gets a 503, never a job added twice."""
    s = server_factory()
    w = web_factory([f"127.0.0.1:{s.port}"])
    with httpx.Client(base_url=w.url, timeout=30) as http:
        first = submit(http, payload=1, queue="rs")["job_id"]
        s.kill()
        r = http.post("/jobs", json={"payload": 2, "queue": "rs"})
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        s.start()
        second = submit(http, payload=3, queue="rs")["job_id"]
        again = http.post("/jobs", json={"payload": 3, "queue": "rs"},
                          headers={"Idempotency-Key": "k1"}).json()["job_id"]
        assert http.post("/jobs", json={"payload": 3, "queue": "rs"},
                         headers={"Idempotency-Key": "k1"}).json()["job_id"] == again
    assert first != second != again


def test_consumer_groups_over_http(http, dq):
    ids = [dq.qadd("signups", f"user {i}", expire=600) for i in range(4)]
    mail = dq.qget("signups", "mail", lease=60)
    assert dq.qack("signups", "mail", mail.id)
    assert dq.qget("signups", "mail", lease=60) is not None  # one in progress
    assert dq.qget("signups", "stats", lease=0) is not None  # EX 0: done at once

    def fetch():
        return {(g["queue"], g["group"]): g for g in http.get("/groups").json()}

    wait_for(lambda: len(fetch()) == 2, what="both groups listed (snapshot cache)")
    g = fetch()
    m, s = g[("signups", "mail")], g[("signups", "stats")]
    assert (m["total"], m["done"], m["pending"], m["inprogress"], m["lag"]) == (4, 1, 1, 1, 2)
    assert (s["total"], s["done"], s["pending"], s["lag"]) == (4, 1, 0, 3)
    for x in (m, s):  # the oldest event not done yet: waiting or in progress
        assert x["oldest_not_done_age"] is not None and 0 <= x["oldest_not_done_age"] < 60
    assert m["dead"] == s["dead"] == 0
    assert m["nodes"] == 1
    over = http.get("/api/overview").json()["groups"]
    assert {(x["queue"], x["group"]) for x in over} == set(g)
    assert not any(i in str(over) for i in ids)  # counts, not events
