"""The dashboard in a real headless Chromium (Debian's chromium + chromium-driver via
selenium), served by a real disque-web process in front of a real node."""

from __future__ import annotations

import time

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

from disquepy.client.deadletter import dead_letter_body


def wait(browser, timeout: float = 15):
    """A wait that retries a condition whose element was replaced by a re-render."""
    return WebDriverWait(browser, timeout, poll_frequency=0.1,
                         ignored_exceptions=(StaleElementReferenceException,))


def open_view(browser, web, fragment: str) -> None:
    browser.get(f"{web.url}/#{fragment}")
    wait(browser).until(lambda d: d.execute_script("return document.readyState") == "complete")


def no_console_errors(browser) -> None:
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors


def test_overview_shows_queues_by_priority_and_nodes(browser, web, http):
    for prio, n in (("high", 2), ("medium", 3), ("low", 4)):
        for i in range(n):
            assert http.post("/jobs", json={"payload": {"i": i}, "queue": "emails",
                                            "priority": prio}).status_code == 202
    open_view(browser, web, "overview")
    row = wait(browser).until(EC.presence_of_element_located(
        (By.CSS_SELECTOR, '#queues-table tr[data-queue="emails"]')))
    wait(browser).until(lambda d: "high 2" in row.text and "low 4" in row.text)
    assert "medium 3" in row.text and "9" in row.text and "running" in row.text
    assert browser.find_element(By.ID, "st-queued").text == "9"
    nodes = browser.find_element(By.CSS_SELECTOR, "#nodes-table tbody").text
    assert "up" in nodes and str(web.port) not in nodes  # the node's port, not the web's
    assert "cluster ok" in browser.find_element(By.ID, "cluster-pill").text
    # the chart is drawn on a canvas of the page's own script (no library)
    assert browser.execute_script("return document.getElementById('chart').width") > 0
    no_console_errors(browser)


def test_submit_over_rest_then_cancel_with_a_click(browser, web, http, dq):
    jid = http.post("/jobs", json={"payload": {"to": "ann@example.net"}, "queue": "mail",
                                   "priority": "high"}).json()["job_id"]
    open_view(browser, web, "jobs")
    row = wait(browser).until(EC.presence_of_element_located(
        (By.CSS_SELECTOR, f'#jobs-table tr[data-id="{jid}"]')))
    assert "mail" in row.text and "high" in row.text and "queued" in row.text
    assert "ann@example.net" in row.text
    row.find_element(By.CSS_SELECTOR, "button[data-act=cancel]").click()
    wait(browser).until(lambda d: "cancelled" in d.find_element(
        By.CSS_SELECTOR, f'#jobs-table tr[data-id="{jid}"]').text)
    assert dq.show(jid) is None and dq.qlen("mail:high") == 0
    assert http.get(f"/jobs/{jid}").json()["status"] == "cancelled"
    no_console_errors(browser)


def test_job_lookup_shows_status_and_cancels(browser, web, http):
    jid = http.post("/jobs", json={"payload": {"n": 7}, "queue": "q", "delay": 600}).json()["job_id"]
    open_view(browser, web, "lookup")
    box = browser.find_element(By.ID, "lookup-id")
    box.send_keys(jid)
    browser.find_element(By.CSS_SELECTOR, "#lookup-form button").click()
    status = wait(browser).until(EC.presence_of_element_located((By.ID, "lookup-status")))
    assert status.text == "scheduled"
    assert '"n": 7' in browser.find_element(By.ID, "lookup-result").text
    browser.find_element(By.ID, "lookup-cancel").click()
    wait(browser).until(lambda d: d.find_element(By.ID, "lookup-status").text == "cancelled")
    open_view(browser, web, "lookup/D-00000000-zPCUrbeByrnG+JCK2hpi3/i4-05a1")
    wait(browser).until(lambda d: "job not found" in d.find_element(By.ID, "lookup-result").text)


def test_requeue_a_dead_letter_with_a_click(browser, web, http, dq):
    body = dead_letter_body("payments:high", "D-8f2c2a9e-LpYimH7056uJHls97rUkgMY8-059f",
                            b'{"amount": 12}', "RuntimeError('card declined')", 3, 0,
                            attempts=3)
    dl = dq.add_job("payments:dead", body)
    other = dq.add_job("payments:dead", body.replace(b"12", b"99"))
    open_view(browser, web, "dead/payments")
    row = wait(browser).until(EC.presence_of_element_located(
        (By.CSS_SELECTOR, f'#dead-table tr[data-id="{dl}"]')))
    assert "card declined" in row.text and "payments high" in row.text  # name + chip
    row.find_element(By.CSS_SELECTOR, "button[data-act=requeue]").click()
    wait(browser).until(EC.staleness_of(row))
    wait(browser).until(lambda d: not d.find_elements(By.CSS_SELECTOR,
                                                      f'#dead-table tr[data-id="{dl}"]'))
    assert dq.qlen("payments:high") == 1 and dq.qlen("payments:dead") == 1
    assert dq.get_jobs("payments:high", nohang=True)[0].body == b'{"amount": 12}'
    # delete the other one
    row = browser.find_element(By.CSS_SELECTOR, f'#dead-table tr[data-id="{other}"]')
    row.find_element(By.CSS_SELECTOR, "button[data-act=delete]").click()
    wait(browser).until(lambda d: d.find_element(By.ID, "dead-empty").is_displayed())
    assert dq.qlen("payments:dead") == 0
    no_console_errors(browser)


def test_pause_and_resume_with_a_click(browser, web, http, dq):
    http.post("/jobs", json={"payload": 1, "queue": "reports"})
    open_view(browser, web, "overview")
    sel = '#queues-table tr[data-queue="reports"] button[data-act]'
    wait(browser).until(EC.element_to_be_clickable((By.CSS_SELECTOR, sel))).click()
    wait(browser).until(lambda d: "paused" in d.find_element(
        By.CSS_SELECTOR, '#queues-table tr[data-queue="reports"]').text)
    assert dq.pause("reports", "state") == "all"
    wait(browser).until(lambda d: d.find_element(By.CSS_SELECTOR, sel).text == "Resume")
    browser.find_element(By.CSS_SELECTOR, sel).click()
    wait(browser).until(lambda d: "running" in d.find_element(
        By.CSS_SELECTOR, '#queues-table tr[data-queue="reports"]').text)
    assert dq.pause("reports", "state") == "none"


def test_jobs_pages_forward_and_back(browser, web, dq):
    with dq.pipeline() as p:
        for i in range(130):
            p.add_job("many", f"job {i}")
        p.execute()
    open_view(browser, web, "jobs/many")
    rows = "#jobs-table tbody tr"

    def page_ids() -> set[str]:  # in one call: the live refresh may redraw the rows
        return set(browser.execute_script(
            "return [...document.querySelectorAll(arguments[0])].map(r => r.dataset.id)",
            rows))

    wait(browser).until(lambda d: len(page_ids()) >= 50)
    seen = page_ids()
    for _ in range(10):
        nxt = browser.find_element(By.ID, "jobs-next")
        if not nxt.is_enabled():
            break
        before = page_ids()
        nxt.click()
        wait(browser).until(lambda d, before=before: page_ids() and page_ids() != before)
        seen |= page_ids()
    assert len(seen) == 130
    browser.find_element(By.ID, "jobs-prev").click()
    wait(browser).until(lambda d: "Page" in d.find_element(By.ID, "jobs-page").text)


def test_api_docs_render_from_local_assets(browser, web):
    browser.get(f"{web.url}/docs")
    wait(browser, 30).until(EC.presence_of_element_located(
        (By.CSS_SELECTOR, ".opblock-summary-path")))
    paths = {e.text for e in browser.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")}
    assert "/jobs" in paths
    hosts = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => new URL(e.name).host)")
    assert hosts and set(hosts) == {f"127.0.0.1:{web.port}"}


@pytest.fixture(autouse=True)
def _fresh_page(browser):
    """Each test starts from a blank page (no polling left from the previous one)."""
    browser.get("about:blank")
    browser.get_log("browser")


def test_lookup_of_a_completed_job_shows_its_result(browser, web, http, dq):
    jid = http.post("/jobs", json={"payload": {"n": 1}, "queue": "sums"}).json()["job_id"]
    (job,) = dq.get_jobs("sums:medium" if dq.qlen("sums:medium") else "sums", nohang=True)
    dq.ack(job.id, result={"total": 42})
    open_view(browser, web, f"lookup/{jid}")
    status = wait(browser).until(EC.presence_of_element_located((By.ID, "lookup-status")))
    assert status.text == "completed"
    assert browser.find_element(By.ID, "lookup-result-value").text == '{"total":42}'
    text = browser.find_element(By.ID, "lookup-result").text
    assert "Completed" in text and "Finished" in text
    no_console_errors(browser)


@pytest.mark.timeout(300)
def test_pages_with_100k_queued_jobs_render_under_a_second(browser, web, dq, record_property):
    """The #15 target: a dashboard page with 100k queued jobs renders in under 1 s in
    Chromium (from navigation to its table filled)."""
    batch = 5000
    for start in range(0, 100_000, batch):
        with dq.pipeline() as p:
            for i in range(start, start + batch):
                p.add_job("big", f'{{"i": {i}}}')
            p.execute()
    assert dq.qlen("big") == 100_000
    for fragment, sel, n in (("jobs/big", "#jobs-table tbody tr[data-id]", 50),
                             ("overview", '#queues-table tr[data-queue="big"]', 1)):
        best = None
        for _ in range(3):  # the best of three: the machine is shared
            browser.get("about:blank")
            t0 = time.monotonic()
            browser.get(f"{web.url}/#{fragment}")
            wait(browser, 30).until(
                lambda d, sel=sel, n=n: len(d.find_elements(By.CSS_SELECTOR, sel)) >= n)
            took = time.monotonic() - t0
            best = took if best is None else min(best, took)
        record_property(f"render_100k_{fragment.split('/')[0]}_s", round(best, 3))
        assert best < 1.0, (fragment, best)
    assert "100,000" in browser.find_element(By.CSS_SELECTOR,
                                             '#queues-table tr[data-queue="big"]').text


def test_overview_shows_consumer_groups(browser, web, http, dq, tmp_path):
    open_view(browser, web, "overview")
    wait(browser).until(lambda d: "cluster ok" in d.find_element(By.ID, "cluster-pill").text)
    assert not browser.find_element(By.ID, "groups-card").is_displayed()  # none yet
    for i in range(10):
        dq.qadd("signups", f"user {i}", expire=600)
    for _ in range(3):  # mail: 3 done, 2 in progress, 5 waiting
        assert dq.qack("signups", "mail", dq.qget("signups", "mail", lease=60).id)
    dq.qget("signups", "mail", lease=60)
    dq.qget("signups", "mail", lease=60)
    for _ in range(10):  # audit: all done
        assert dq.qget("signups", "audit", lease=0) is not None
    row = wait(browser, 20).until(EC.visibility_of_element_located(
        (By.CSS_SELECTOR, '#groups-table tr[data-group="mail"]')))
    cells = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
    assert cells[:2] == ["signups", "mail"]
    assert cells[2].endswith("3 / 10") and cells[3:5] == ["5", "2"]
    assert cells[5].endswith("s") and cells[6] == "0"  # oldest not done: seconds
    audit = browser.find_element(By.CSS_SELECTOR, '#groups-table tr[data-group="audit"]')
    acells = [td.text for td in audit.find_elements(By.TAG_NAME, "td")]
    assert acells[2].endswith("10 / 10") and acells[5] == "–"  # all done: none
    widths = browser.execute_script(
        "return [...document.querySelectorAll('#groups-table tr[data-group=\"mail\"] .bar span')]"
        ".map(s => s.style.width)")
    assert widths == ["30%", "20%", "50%"]  # done, in progress, waiting
    browser.find_element(By.ID, "groups-card").screenshot(str(tmp_path / "groups.png"))
    no_console_errors(browser)


def test_no_login_shows_no_signed_in_user_and_no_log_out(browser, web, http):
    """Without --auth nodes or --token-file (make run's disque-web) nobody signs in:
    the header has no "signed in as" and no Log out button, and no element the page
    keeps ``hidden`` is drawn (a CSS display rule used to beat the attribute)."""
    assert http.get("/session").json() == {"user": None, "login": []}
    open_view(browser, web, "overview")
    wait(browser).until(lambda d: "cluster ok" in d.find_element(By.ID, "cluster-pill").text)
    header = browser.find_element(By.TAG_NAME, "header").text
    assert "signed in as" not in header and "Log out" not in header, header
    assert not browser.find_element(By.ID, "logout").is_displayed()
    drawn = browser.execute_script(
        "return [...document.querySelectorAll('[hidden]')]"
        ".filter(e => getComputedStyle(e).display !== 'none').map(e => e.id || e.className)")
    assert drawn == [], drawn
    no_console_errors(browser)
