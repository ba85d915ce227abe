"""`make run`'s command (scripts/cluster.py --nodes 1 --web PORT): a node and disque-web
as real processes, the dashboard's URL printed, a job submitted with curl's request,
and both processes gone after Ctrl-C."""

from __future__ import annotations

import re
import signal
import subprocess
import sys

import httpx
import pytest
from support import ROOT, end_process, free_port, port_is_free, wait_for


@pytest.mark.timeout(120)
def test_run_starts_a_node_and_the_dashboard_then_stops_both(tmp_path):
    node, web = free_port(), free_port()
    out = tmp_path / "out.txt"
    with open(out, "wb") as f:
        p = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "cluster.py"), "--nodes",
                              "1", "--port", str(node), "--dir", str(tmp_path / "run"),
                              "--web", str(web)], stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        wait_for(lambda: b"dashboard:" in out.read_bytes(), timeout=60,
                 what="the dashboard URL")
        text = out.read_text()
        assert f"node up on port {node}" in text
        url = re.search(r"dashboard: (\S+)", text).group(1)
        assert url == f"http://127.0.0.1:{web}/"
        # the curl line it prints, as a newcomer would paste it
        curl = re.search(r"try: curl -X POST (\S+) -H '([^']+)' -d '([^']+)'", text)
        assert curl, text
        r = httpx.post(curl.group(1), content=curl.group(3),
                       headers=dict([curl.group(2).split(": ")]))
        assert r.status_code == 202, r.text
        jid = r.json()["job_id"]
        assert httpx.get(f"{url}jobs/{jid}").json()["status"] == "queued"
        assert "<title>" in httpx.get(url).text
        assert "disquepy_up" in httpx.get(f"{url}metrics").text
        p.send_signal(signal.SIGINT)
        assert p.wait(30) == 0
        wait_for(lambda: port_is_free(node) and port_is_free(web), timeout=15,
                 what="the node and disque-web to exit")
    finally:
        end_process(p, timeout=15)


def test_run_refuses_a_busy_web_port(tmp_path):
    import socket

    node = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        web = s.getsockname()[1]
        r = subprocess.run([sys.executable, str(ROOT / "scripts" / "cluster.py"), "--nodes",
                            "1", "--port", str(node), "--dir", str(tmp_path / "run"),
                            "--web", str(web)], capture_output=True, text=True, cwd=ROOT,
                           timeout=40)
    assert r.returncode == 2 and f"port {web} is already in use" in r.stderr
    assert not (tmp_path / "run").exists() and port_is_free(node)
