"""The API behind the dashboard's views, on real processes: recently finished jobs
(JOBOUTCOMES over the cluster), workers (CLIENT LIST), the charts' history (kept by
disque-web, the same from every process of --workers 2), consumer-group dead letters."""

from __future__ import annotations

import time

import httpx
import redis
from support import wait_for

from disquepy.client import Disque
from disquepy.client.workerinfo import WorkerInfo


def finish_jobs(c: Disque, queue: str, n: int, fail_every: int = 0) -> list[str]:
    """n jobs added, taken and acked (or failed), in order: their IDs."""
    ids = []
    for i in range(n):
        jid = c.add_job(queue, f'{{"i": {i}}}')
        (job,) = c.get_jobs(queue, nohang=True)
        assert job.id == jid
        if fail_every and i % fail_every == 0:
            c.execute_on(c.node, "FAILJOB", jid, "ERROR", f"boom {i}")
        else:
            c.ack(jid, result={"i": i})
        ids.append(jid)
        time.sleep(0.002)  # distinct finishing times
    return ids


def page_all(http, **params) -> list[dict]:
    out, cursor = [], "0"
    for _ in range(100):
        d = http.get("/jobs/finished", params={**params, "cursor": cursor}).json()
        out += d["jobs"]
        cursor = d["next_cursor"]
        if cursor == "0":
            return out
    raise AssertionError("paging did not end")


def test_finished_jobs_over_a_cluster_once_each_newest_first(make_cluster, web_factory):
    servers, _ = make_cluster(3)
    addrs = [f"127.0.0.1:{s.port}" for s in servers]
    w = web_factory(addrs)
    made: list[str] = []
    for k, a in enumerate(addrs):  # jobs created on every node, replicated to others
        with Disque(a, shuffle=False) as c:
            made += finish_jobs(c, "mail" if k % 2 else "mail:high", 7, fail_every=3)
    with httpx.Client(base_url=w.url, timeout=30) as http:
        got = wait_for(lambda: (lambda x: x if len(x) == 21 else None)(
            page_all(http, count=4)), 20, what="21 outcomes")
        assert sorted(j["job_id"] for j in got) == sorted(made)  # each once
        fin = [j["finished_at"] for j in got]
        assert fin == sorted(fin, reverse=True)
        failed = page_all(http, status="failed", count=2)
        assert len(failed) == 9 and all(j["status"] == "failed" for j in failed)
        assert all(j["error"].startswith("boom") for j in failed)
        done = [j for j in got if j["status"] == "completed"]
        assert all(isinstance(j["result"], dict) for j in done)
        high = page_all(http, queue="mail", status="completed")
        assert len(high) == 12 and {j["queue"] for j in high} == {"mail"}
        assert {j["priority"] for j in high} == {"high", "medium"}
        both = page_all(http, status=["failed", "cancelled"])
        assert len(both) == 9
        assert http.get("/jobs/finished", params={"status": "queued"}).status_code == 422
        assert http.get("/jobs/finished", params={"cursor": "1.2"}).status_code == 400


def test_workers_are_listed_per_node(server, web):
    info = WorkerInfo("web-1", 4242, ("emails", "reports"), 4, done=17, failed=2,
                      started=int(time.time()) - 60)
    conns = []
    for name in (info.name(), info.name(), "not-a-worker"):
        r = redis.Redis(port=server.port)
        r.execute_command("CLIENT", "SETNAME", name)
        conns.append(r)
    try:
        with httpx.Client(base_url=web.url, timeout=30) as http:
            d = http.get("/workers").json()
    finally:
        for r in conns:
            r.close()
    assert d["workers"] == 1
    (node,) = d["nodes"]
    assert node["state"] == "up" and node["address"].endswith(f":{server.port}")
    (wk,) = node["workers"]
    assert (wk["host"], wk["pid"], wk["queues"], wk["concurrency"]) == \
        ("web-1", 4242, ["emails", "reports"], 4)
    assert (wk["done"], wk["failed"], wk["connections"]) == (17, 2, 2)
    assert wk["connected_for"] >= 0 and wk["last_seen"] >= 0


def test_history_is_kept_by_the_web_and_shared_by_its_processes(server, web_factory, dq):
    w = web_factory([f"127.0.0.1:{server.port}"], "--workers", "2")
    with httpx.Client(base_url=w.url, timeout=30) as http:
        def traffic():
            for i in range(5):
                assert http.post("/jobs", json={"payload": i, "queue": "h"}).status_code == 202
            for job in dq.get_jobs("h", count=5, nohang=True):
                dq.ack(job.id)

        def busy():
            # traffic on every poll: the sampler's first snapshot (its baseline) may come
            # after a burst sent before it on a loaded machine, and then shows no rate
            traffic()
            s = http.get("/api/history").json()["samples"]
            return s if any(x["added_per_sec"] > 0 for x in s) and any(
                x["completed_per_sec"] > 0 for x in s) else None

        samples = wait_for(busy, 30, step=0.25, what="samples with the traffic")
        one = samples[-1]
        for k in ("t", "added_per_sec", "delivered_per_sec", "completed_per_sec",
                  "failed_per_sec", "wait_p50_ms", "wait_p95_ms", "processing_p50_ms",
                  "processing_p95_ms", "queued", "nodes_up"):
            assert k in one
        assert sum(x["added_per_sec"] for x in samples) > 0
        # every process answers the same history (a reload may reach either)
        seen = set()
        for _ in range(12):
            s = http.get("/api/history").json()["samples"]
            seen.add(tuple(x["t"] for x in s if x["t"] <= samples[-1]["t"]))
        assert len(seen) == 1
        later = http.get("/api/history", params={"since": samples[-1]["t"]}).json()
        assert all(x["t"] > samples[-1]["t"] for x in later["samples"])


def test_consumer_group_dead_letters_listed_and_requeued(http, dq):
    poison = dq.qadd("signups", "poison", expire=600)
    fine = dq.qadd("signups", "fine", expire=600)
    for _ in range(2):
        assert dq.qget("signups", "mail", lease=0.1, max_deliveries=2).id == poison
        time.sleep(0.15)
    assert dq.qget("signups", "mail", max_deliveries=2).id == fine
    d = http.get("/groups/signups/mail/dead-letters").json()
    assert [(e["id"], e["contents"], e["deliveries"]) for e in d["dead"]] == \
        [(poison, "poison", 2)]
    r = http.post("/groups/signups/mail/dead-letters/requeue", json={"ids": [poison]})
    assert r.json() == {"requeued": 1}
    assert http.get("/groups/signups/mail/dead-letters").json()["dead"] == []
    assert dq.qget("signups", "mail", lease=10).id == poison  # delivered again
    assert http.post("/groups/signups/mail/dead-letters/requeue",
                     json={"ids": [poison]}).status_code == 404
