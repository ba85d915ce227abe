"""``/metrics`` of a real disque-web in front of real nodes, parsed with
prometheus-client's own parser."""

from __future__ import annotations

import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from disquepy.client import Disque

JSON = {"Content-Type": "application/json"}  # a change is JSON (web/guard.py)


def scrape(url: str) -> tuple[dict, dict]:
    """({(name, sorted labels): value}, {family name: type})."""
    r = httpx.get(url + "/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    fams = list(text_string_to_metric_families(r.text))
    return ({(s.name, tuple(sorted(s.labels.items()))): s.value
             for f in fams for s in f.samples}, {f.name: f.type for f in fams})


def test_metrics_per_node_and_queue_by_priority(web, http, dq, server):
    node = f"127.0.0.1:{server.port}"
    # counters live as long as the node and the web process (shared by the session's
    # tests): compared as increases over this test
    before, _ = scrape(web.url)
    for prio, n in (("high", 2), ("medium", 3), ("low", 1)):
        for i in range(n):
            assert http.post("/jobs", json={"payload": i, "queue": "mail",
                                            "priority": prio}).status_code == 202
    got = dq.get_jobs("mail:high", count=1, nohang=True)
    dq.ack(got[0].id)
    jid = http.post("/jobs", json={"payload": 9, "queue": "mail", "priority": "low"}).json()
    assert http.post(f"/jobs/{jid['job_id']}/cancel", headers=JSON).status_code == 200
    dq.add_job("mail:dead", b'{"queue": "mail", "id": "D-x", "error": "e"}')
    dq.pause("mail:low", "in")
    time.sleep(0.3)  # the web's snapshot cache (0.2 s in the tests)
    m, types = scrape(web.url)

    def q(name, prio, **extra):
        return (name, tuple(sorted({"node": node, "queue": "mail", "priority": prio,
                                    **extra}.items())))

    assert m[("disquepy_up", (("node", node),))] == 1
    assert m[q("disquepy_queue_jobs", "high", state="queued")] == 1
    assert m[q("disquepy_queue_jobs", "medium", state="queued")] == 3
    assert m[q("disquepy_queue_jobs", "low", state="queued")] == 1
    assert m[q("disquepy_queue_enqueued_total", "high")] == 2
    assert m[q("disquepy_queue_delivered_total", "high")] == 1
    assert m[q("disquepy_queue_paused", "low")] == 1 and m[q("disquepy_queue_paused", "high")] == 0
    assert m[q("disquepy_queue_oldest_job_age_seconds", "medium")] >= 0
    assert m[q("disquepy_queue_blocked_consumers", "medium")] == 0
    dead = ("node", node), ("queue", "mail")
    assert m[("disquepy_queue_dead_letters", dead)] == 1
    assert m[("disquepy_jobs_dead_lettered_total", dead)] == 1
    def grew(key):
        return m[key] - before.get(key, 0)

    assert grew(("disquepy_jobs_added_total", (("node", node),))) == 8
    assert grew(("disquepy_jobs_delivered_total", (("node", node),))) == 1
    assert grew(("disquepy_jobs_acked_total", (("node", node),))) == 1
    assert m[("disquepy_memory_used_bytes", (("node", node),))] > 0
    assert m[("disquepy_connected_clients", (("node", node),))] >= 1
    assert grew(("disquepy_web_jobs_submitted_total", (("priority", "high"),
                                                       ("queue", "mail")))) == 2
    assert grew(("disquepy_web_jobs_cancelled_total", (("priority", "low"),
                                                       ("queue", "mail")))) == 1
    # conventions: counters are counters (exposed as *_total), gauges in base units,
    # no *_created series, and never a job ID as a label
    assert types["disquepy_jobs_added"] == "counter"
    assert types["disquepy_queue_jobs"] == "gauge"
    assert not any(name.endswith("_created") for name, _ in m)
    assert not any(v.startswith("D-") for _, labels in m for _, v in labels)


def test_consumer_groups_per_node_queue_and_group(web, dq, server):
    node = f"127.0.0.1:{server.port}"
    ids = [dq.qadd("signups", f"e{i}", expire=600) for i in range(3)]
    leased = dq.qget("signups", "mail", lease=60)
    assert leased is not None and leased.id in ids
    first = dq.qget("signups", "stats", lease=60)
    assert dq.qack("signups", "stats", first.id)
    time.sleep(0.3)  # the web's snapshot cache
    m, types = scrape(web.url)

    def g(name, group, **extra):
        return (name, tuple(sorted({"node": node, "queue": "signups", "group": group,
                                    **extra}.items())))

    assert m[g("disquepy_group_events", "mail", state="total")] == 3
    assert m[g("disquepy_group_events", "mail", state="inprogress")] == 1
    assert m[g("disquepy_group_pending", "mail")] == 1
    assert m[g("disquepy_group_lag", "mail")] == 2
    assert m[g("disquepy_group_events", "stats", state="done")] == 1
    assert m[g("disquepy_group_lag", "stats")] == 2
    assert m[g("disquepy_group_pending", "stats")] == 0
    assert m[g("disquepy_group_oldest_pending_seconds", "mail")] >= 0
    assert types["disquepy_group_lag"] == "gauge"
    assert not any(v in ids for _, labels in m for _, v in labels)  # no event IDs


def test_a_down_node_reads_up_0_and_the_scrape_still_answers(make_cluster, web_factory):
    servers, _ = make_cluster(2)
    w = web_factory([f"127.0.0.1:{s.port}" for s in servers])
    c = Disque(f"127.0.0.1:{servers[0].port}")
    try:
        c.add_job("q", "x")
    finally:
        c.close()
    servers[1].kill()
    time.sleep(0.3)
    m, _ = scrape(w.url)
    ups = {dict(labels)["node"].rsplit(":", 1)[1]: v for (name, labels), v in m.items()
           if name == "disquepy_up"}
    assert ups == {str(servers[0].port): 1, str(servers[1].port): 0}


def test_grafana_dashboard_queries_only_metrics_that_exist(web, http, dq):
    """docs/grafana-dashboard.json: valid JSON, and every disquepy_* series it queries is
    one that disque-web's /metrics or a worker's metrics expose."""
    import json
    import re

    from prometheus_client import generate_latest
    from support import ROOT

    from disquepy.worker.metrics import WorkerMetrics

    dash = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dash["templating"]["list"] if "definition" in v]
    used = {n for e in exprs for n in re.findall(r"\bdisquepy_\w+", e)}
    assert len(used) >= 15, used

    http.post("/jobs", json={"payload": 1, "queue": "mail"})
    jid = http.post("/jobs", json={"payload": 2, "queue": "mail"}).json()["job_id"]
    dq.add_job("mail:dead", b"{}")
    dq.fail(jid, "e", reason="attempts")  # a dead-lettered count, with its reason
    time.sleep(0.3)
    web_names = {name for name, _ in scrape(web.url)[0]}
    wm = WorkerMetrics()
    wm.started("mail", 1)
    wm.observe("mail", "dead-lettered", 0.1, "attempts")
    worker_names = {s.name for f in text_string_to_metric_families(
        generate_latest(wm.registry).decode()) for s in f.samples}
    missing = used - web_names - worker_names
    assert not missing, missing


def test_node_job_counters_and_time_histograms(web, http, dq, server):
    """The nodes' JOBMETRICS through /metrics: what happened to a queue's jobs (each
    event counted once), dead letters by reason, wait and processing histograms."""
    node = f"127.0.0.1:{server.port}"
    ids = [http.post("/jobs", json={"payload": i, "queue": "metq", "priority": "high"})
           .json()["job_id"] for i in range(5)]
    time.sleep(0.12)  # they wait in the queue
    jobs = dq.get_jobs("metq:high", count=5, nohang=True)
    assert len(jobs) == 5
    time.sleep(0.3)  # and are processed
    dq.ack(ids[0])
    dq.ack(ids[1], result="ok")
    dq.nack(ids[2])
    dq.nack(ids[3], delay=600)
    dq.fail(ids[4], "ValueError", reason="attempts")
    queued = http.post("/jobs", json={"payload": 9, "queue": "metq", "priority": "high"})
    assert http.post(f"/jobs/{queued.json()['job_id']}/cancel", headers=JSON).status_code == 200
    time.sleep(0.3)  # the web's snapshot cache
    m, types = scrape(web.url)
    lab = (("node", node), ("priority", "high"), ("queue", "metq"))
    counts = {k: m[(f"disquepy_queue_jobs_{k}_total", lab)] for k in (
        "added", "delivered", "acked", "nacked", "retried", "requeued", "expired",
        "cancelled")}
    assert counts == {"added": 6, "delivered": 5, "acked": 2, "nacked": 1, "retried": 1,
                      "requeued": 0, "expired": 0, "cancelled": 1}
    assert m[("disquepy_queue_jobs_dead_lettered_total", (*lab, ("reason", "attempts")))] == 1
    assert types["disquepy_queue_wait_seconds"] == "histogram"
    assert m[("disquepy_queue_wait_seconds_count", lab)] == 5

    def le(bound):
        return tuple(sorted((*lab, ("le", bound))))

    assert m[("disquepy_queue_wait_seconds_bucket", le("0.05"))] == 0
    assert m[("disquepy_queue_wait_seconds_bucket", le("+Inf"))] == 5
    assert 0.5 <= m[("disquepy_queue_wait_seconds_sum", lab)] < 5
    # processing: the two acked jobs, 0.3 s and a little more
    assert m[("disquepy_queue_processing_seconds_count", lab)] == 2
    assert m[("disquepy_queue_processing_seconds_bucket", le("0.25"))] == 0
    assert m[("disquepy_queue_processing_seconds_bucket", le("+Inf"))] == 2
    assert m[("disquepy_queue_processing_seconds_sum", lab)] >= 0.6


def test_several_workers_share_the_port_and_their_counters(server, web_factory):
    """disque-web --workers 2: both processes serve; /metrics sums this process's own
    counters over them (prometheus-client's multiprocess files), whichever answers."""
    w = web_factory([f"127.0.0.1:{server.port}"], "--workers", "2")
    for i in range(30):
        with httpx.Client(base_url=w.url, timeout=30) as c:  # new connections: both
            assert c.post("/jobs", json={"payload": i, "queue": "wk"}).status_code == 202
    assert Disque(f"127.0.0.1:{server.port}").qlen("wk") == 30
    key = ("disquepy_web_jobs_submitted_total", (("priority", "medium"), ("queue", "wk")))
    for _ in range(4):  # each scrape may be served by either worker: the same total
        m, _ = scrape(w.url)
        assert m[key] == 30
        assert m[("disquepy_queue_jobs_added_total", (("node", f"127.0.0.1:{server.port}"),
                                                     ("priority", "medium"),
                                                     ("queue", "wk")))] >= 30
