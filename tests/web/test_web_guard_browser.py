"""The attacks of issue #26 (item 2) from a real headless Chromium: a page of another
origin posting to disque-web (auto-submitted forms, a no-cors fetch with a Blob body), a
host name rebound to 127.0.0.1 reading /jobs, and the login page in front of the
dashboard. Screenshots land in the test's tmp_path."""

from __future__ import annotations

import http.server
import threading
import time

import httpx
import pytest
from chromium import make_driver, shot
from support import ROLE_USERS, free_port


class Attacker:
    """A page on another origin (127.0.0.1:<another port>), served by http.server."""

    def __init__(self, html: str) -> None:
        body = html.encode()

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.port = free_port()
        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), H)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()


def attack_page(target: str, jid: str) -> str:
    return f"""<!doctype html><html><body>
<iframe name="f1"></iframe><iframe name="f2"></iframe>
<form id="pause" target="f1" method="POST" action="{target}/queues/victim/pause"
      enctype="text/plain"><input name='{{"direction":"all","x":"' value='"}}'></form>
<form id="cancel" target="f2" method="POST" action="{target}/jobs/{jid}/cancel"></form>
<script>
fetch("{target}/jobs", {{method: "POST", mode: "no-cors",
  body: new Blob(['{{"payload": "evil", "queue": "victim"}}'])}});
fetch("{target}/jobs", {{method: "POST", mode: "no-cors",
  headers: {{"Content-Type": "text/plain"}}, body: '{{"payload": "evil", "queue": "victim"}}'}});
document.getElementById("pause").submit();
document.getElementById("cancel").submit();
setTimeout(() => document.title = "done", 1500);
</script></body></html>"""


def test_another_origins_page_changes_nothing(browser, web, http, tmp_path):
    jid = http.post("/jobs", json={"payload": "mine", "queue": "victim", "delay": 120}).json()[
        "job_id"]
    before = http.get("/jobs?state=all&queue=victim").json()["jobs"]
    evil = Attacker(attack_page(web.url, jid))
    try:
        browser.get(f"http://127.0.0.1:{evil.port}/")
        deadline = time.monotonic() + 15
        while browser.title != "done" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert browser.title == "done"
        browser.save_screenshot(str(tmp_path / "attack.png"))
    finally:
        evil.close()
    after = http.get("/jobs?state=all&queue=victim").json()["jobs"]
    assert [j["job_id"] for j in after] == [j["job_id"] for j in before]  # none added
    assert http.get(f"/jobs/{jid}").json()["status"] == "scheduled"  # not cancelled
    # not paused: QPAUSE would have made the queue exist, paused
    q = http.get("/queues/victim")
    assert q.status_code == 404 or q.json()["paused"] == "none", q.text


@pytest.fixture
def rebinding_browser(tmp_path):
    """A Chromium where rebound.test resolves to 127.0.0.1 (what DNS rebinding makes a
    victim's browser believe)."""
    d = make_driver(str(tmp_path / "profile"),
                    "--host-resolver-rules=MAP rebound.test 127.0.0.1")
    d.set_page_load_timeout(60)
    yield d
    d.quit()


def test_a_rebound_host_name_reads_nothing(rebinding_browser, web, http, tmp_path):
    http.post("/jobs", json={"payload": {"secret": "s3cr3t-body"}, "queue": "rebind"})
    rebinding_browser.get(f"http://rebound.test:{web.port}/jobs?state=all")
    text = rebinding_browser.find_element("tag name", "body").text
    rebinding_browser.save_screenshot(str(tmp_path / "rebound.png"))
    assert "not one this server answers to" in text and "s3cr3t" not in text
    rebinding_browser.get(f"http://127.0.0.1:{web.port}/jobs?state=all")  # its own name
    assert "s3cr3t-body" in rebinding_browser.find_element("tag name", "body").text


def test_the_dashboard_behind_the_login_page(secure_server, web_factory, tmp_path,
                                             rebinding_browser):
    b = rebinding_browser
    w = web_factory([f"127.0.0.1:{secure_server.port}"], "--auth", "nodes",
                    "--user", "viewer", "--password", ROLE_USERS["viewer"][0])
    b.get(w.url + "/")
    deadline = time.monotonic() + 15
    while "/login" not in b.current_url and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "/login" in b.current_url
    shot(b, "login")
    b.find_element("id", "username").send_keys("producer")
    b.find_element("id", "password").send_keys("wrong")
    b.find_element("css selector", "button[type=submit]").click()
    err = b.find_element("id", "login-error")
    deadline = time.monotonic() + 10
    while not err.text and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "wrong user name" in err.text
    b.find_element("id", "password").clear()
    b.find_element("id", "password").send_keys(ROLE_USERS["producer"][0])
    b.find_element("css selector", "button[type=submit]").click()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if b.current_url.rstrip("/") == w.url and b.find_element("id", "who-name").text:
            break
        time.sleep(0.2)
    assert b.find_element("id", "who-name").text == "producer"
    time.sleep(2.5)  # a poll of the overview
    # the empty dashboard's example call logs in as the user does
    deadline = time.monotonic() + 10
    while "-u producer:PASSWORD" not in b.find_element("id", "curl-example").text \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    assert b.find_element("id", "curl-example").text.startswith(
        "curl -u producer:PASSWORD -X POST " + w.url + "/jobs")
    shot(b, "dashboard-signed-in")
    assert "connecting" not in b.find_element("id", "cluster-pill").text
    cookies = {c["name"]: c for c in b.get_cookies()}
    c = cookies["disque_web_session"]
    assert c["httpOnly"] and c["sameSite"] == "Strict"
    assert httpx.get(w.url + "/api/overview").status_code == 401  # not without it
