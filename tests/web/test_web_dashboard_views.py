"""The dashboard's views for a Flower / bull-board user, in a real headless Chromium in
front of real processes: throughput and latency charts whose history survives a page
reload, finished jobs filtered and paged, workers per node, consumer-group dead letters
requeued with a click, and nodes down said so. Screenshots go to
``build/screenshots/`` (or ``$DISQUEPY_SCREENSHOTS``) for a person to look at."""

from __future__ import annotations

import time

import httpx
import pytest
import redis
from chromium import shot
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from support import wait_for
from test_web_dashboard import no_console_errors, open_view, wait

from disquepy.client import Disque
from disquepy.client.workerinfo import WorkerInfo


@pytest.fixture(autouse=True)
def _fresh_page(browser):
    browser.get("about:blank")
    browser.get_log("browser")


def traffic(dq: Disque, seconds: float) -> None:
    """Jobs added, delivered, completed and some failed, for ``seconds``."""
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        for _ in range(20):
            jid = dq.add_job("emails:high" if i % 4 == 0 else "emails", f'{{"n": {i}}}')
            i += 1
            (job,) = dq.get_jobs(["emails:high", "emails"], nohang=True)
            if i % 7 == 0:
                dq.execute_on(dq.node, "FAILJOB", job.id, "ERROR", "SMTP 550: mailbox full")
            else:
                time.sleep(0.002)
                dq.ack(job.id, result={"sent": True})
        assert jid
        time.sleep(0.1)


@pytest.mark.timeout(180)
def test_charts_keep_their_history_across_a_reload(browser, web, http, dq):
    traffic(dq, 7)
    wait_for(lambda: sum(1 for s in http.get("/api/history").json()["samples"]
                         if s["completed_per_sec"] > 0) >= 2, 30, what="samples")
    open_view(browser, web, "overview")
    wait(browser, 20).until(lambda d: d.execute_script(
        "return chart.points.filter(p => p[1][1] > 0).length") >= 2)
    wait(browser, 20).until(lambda d: d.execute_script(
        "return latency.points.filter(p => p[1][0] != null).length") >= 1)
    before = browser.execute_script("return chart.points.length")
    shot(browser, "overview-charts")
    browser.refresh()
    # right after the reload, before any new sample: the history is back
    got = wait(browser, 10).until(lambda d: d.execute_script(
        "return typeof chart !== 'undefined' && chart.points.length"))
    assert got >= before
    assert "job copies" in browser.find_element(By.ID, "st-jobs").text
    no_console_errors(browser)


def test_finished_jobs_filtered_and_paged(browser, server_factory, web_factory):
    node = server_factory()  # its own: outcomes outlive DEBUG FLUSHALL
    web = web_factory([f"127.0.0.1:{node.port}"])
    dq = Disque(f"127.0.0.1:{node.port}")
    for i in range(60):
        jid = dq.add_job("reports", f'{{"report": {i}}}')
        if i % 10 == 3:
            dq.execute_on(dq.node, "CANCEL", jid)
            continue
        (job,) = dq.get_jobs("reports", nohang=True)
        if i % 5 == 0:
            dq.execute_on(dq.node, "FAILJOB", job.id, "ERROR", f"ValueError: row {i}")
        else:
            dq.ack(job.id, result={"rows": i})
        time.sleep(0.002)
    open_view(browser, web, "finished")
    rows = "#finished-table tbody tr"
    wait(browser).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, rows)) == 50)
    first = browser.find_element(By.CSS_SELECTOR, rows).text
    assert "completed" in first and '"rows":59' in first  # the last finished first
    shot(browser, "finished-all")
    browser.find_element(By.ID, "finished-next").click()
    wait(browser).until(lambda d: "Page 2 · 10 jobs" in d.find_element(
        By.ID, "finished-page").text)
    browser.find_element(By.CSS_SELECTOR, '#finished-seg button[data-status="failed"]').click()
    wait(browser).until(lambda d: "Page 1 · 12 jobs" in d.find_element(
        By.ID, "finished-page").text)
    texts = [r.text for r in browser.find_elements(By.CSS_SELECTOR, rows)]
    assert all("failed" in t and "ValueError: row" in t for t in texts)
    shot(browser, "finished-failed")
    browser.find_element(By.CSS_SELECTOR,
                         '#finished-seg button[data-status="cancelled"]').click()
    wait(browser).until(lambda d: "Page 1 · 6 jobs" in d.find_element(
        By.ID, "finished-page").text)
    dq.close()
    no_console_errors(browser)


def test_workers_per_node(browser, web, server):
    started = int(time.time()) - 3700
    conns = []
    for info in (WorkerInfo("build-7", 4242, ("emails", "reports"), 8, 1532, 3, started),
                 WorkerInfo("build-8", 977, ("thumbnails",), 2, 88, 0, started + 3000)):
        r = redis.Redis(port=server.port)
        r.execute_command("CLIENT", "SETNAME", info.name())
        conns.append(r)
    try:
        open_view(browser, web, "workers")
        row = wait(browser).until(EC.presence_of_element_located(
            (By.CSS_SELECTOR, '.workers-table tr[data-pid="4242"]')))
        cells = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
        assert cells[:6] == ["build-7", "4242", "emailsreports", "8", "1,532", "3"]  # chips
        assert cells[8] == "now"  # last seen
        assert browser.find_elements(By.CSS_SELECTOR, '.workers-table tr[data-pid="977"]')
        assert "2 workers" in browser.find_element(By.ID, "workers-nodes").text
        shot(browser, "workers")
    finally:
        for r in conns:
            r.close()
    # they disconnect: the view says so on its own (live refresh)
    wait(browser, 15).until(lambda d: d.find_element(By.ID, "workers-empty").is_displayed())
    no_console_errors(browser)


def test_group_dead_letters_requeued_with_a_click(browser, web, dq):
    poison = dq.qadd("signups", '{"user": "mallory"}', expire=600)
    dq.qadd("signups", '{"user": "ann"}', expire=600)
    for _ in range(2):
        assert dq.qget("signups", "mail", lease=0.1, max_deliveries=2).id == poison
        time.sleep(0.15)
    dq.qget("signups", "mail", max_deliveries=2)
    open_view(browser, web, "dead/signups/mail")
    row = wait(browser, 20).until(EC.presence_of_element_located(
        (By.CSS_SELECTOR, f'#gdead-table tr[data-id="{poison}"]')))
    assert "mallory" in row.text and "2" in row.text
    shot(browser, "group-dead-letters")
    row.find_element(By.CSS_SELECTOR, "button[data-act=requeue]").click()
    wait(browser).until(lambda d: d.find_element(By.ID, "gdead-empty").is_displayed())
    assert dq.qget("signups", "mail", lease=10).id == poison
    no_console_errors(browser)


@pytest.mark.timeout(180)
def test_nodes_down_are_said_so(browser, make_cluster, web_factory):
    servers, _ = make_cluster(3)
    w = web_factory([f"127.0.0.1:{s.port}" for s in servers])
    # no queue yet: the hint to submit a job names this dashboard's own address
    open_view(browser, w, "overview")
    empty = wait(browser, 20).until(EC.visibility_of_element_located((By.ID, "queues-empty")))
    assert f"curl -X POST {w.url.rstrip('/')}/jobs" in empty.text
    with httpx.Client(base_url=w.url, timeout=30) as http:
        for i in range(9):
            assert http.post("/jobs", json={"payload": i, "queue": "orders"}).status_code == 202
    servers[2].kill()
    open_view(browser, w, "overview")
    banner = wait(browser, 20).until(EC.visibility_of_element_located((By.ID, "banner")))
    wait(browser, 20).until(lambda d: "1 of 3 nodes unreachable" in banner.text)
    assert f"127.0.0.1:{servers[2].port}" in banner.text
    wait(browser).until(lambda d: "down" in d.find_element(
        By.CSS_SELECTOR, "#nodes-table tbody").text)
    shot(browser, "one-node-down")
    for s in servers[:2]:
        s.kill()
    wait(browser, 30).until(lambda d: "Cluster unreachable" in d.find_element(
        By.ID, "banner").text)
    assert not browser.find_element(By.ID, "queues-empty").is_displayed()
    assert "nodes unreachable" in browser.find_element(By.ID, "cluster-pill").text
    shot(browser, "all-nodes-down")
