"""Fixtures for the web tests: a real ``disque-web`` process (uvicorn) on a free loopback
port in front of real nodes, an HTTP client, and a real headless Chromium (selenium)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest
from chromium import chromium_paths, make_driver
from support import ROOT, end_process, free_port


class Web:
    """One ``disque-web`` process (``python -m disquepy.web``) on 127.0.0.1."""

    def __init__(self, nodes: list[str], workdir: Path, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(workdir) / f"web-{self.port}.log"
        env = dict(os.environ)
        env.setdefault("PYTHONPATH", str(ROOT / "src"))
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "disquepy.web", "--nodes", ",".join(nodes),
                 "--port", str(self.port), "--cache-ttl", "0.2", *args],
                stdout=log, stderr=subprocess.STDOUT, env=env)
        self.wait_ready()

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"disque-web exited with {self.proc.returncode}:\n"
                                   + self.log())
            try:
                # 401: up, behind a login (--auth nodes, --token-file)
                if httpx.get(self.url + "/openapi.json", timeout=2).status_code in (200, 401):
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"disque-web not ready on {self.port}:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self) -> None:
        end_process(self.proc)


@pytest.fixture(scope="session")
def web_proc(shared_server, tmp_path_factory):
    """One disque-web in front of the shared server, for the whole session."""
    w = Web([f"127.0.0.1:{shared_server.port}"], tmp_path_factory.mktemp("web"))
    yield w
    w.kill()


@pytest.fixture
def web(server, web_proc):
    """The session's disque-web, its node emptied for this test."""
    time.sleep(0.25)  # let the web's cached cluster snapshot (0.2 s) expire
    return web_proc


@pytest.fixture
def http(web):
    with httpx.Client(base_url=web.url, timeout=30) as c:
        yield c



@pytest.fixture
def web_factory(tmp_path):
    """make(nodes, *args) -> a new disque-web process, killed at the end of the test."""
    made: list[Web] = []

    def make(nodes: list[str], *args: str) -> Web:
        w = Web(nodes, tmp_path, *args)
        made.append(w)
        return w

    yield make
    for w in made:
        w.kill()


# ---------------------------------------------------------------- the browser

@pytest.fixture(scope="session")
def browser():
    """A headless Chromium. Missing chromium: the test fails under CI=true, else skips
    with the command that installs it."""
    binary, driver = chromium_paths()
    if binary is None or driver is None:
        msg = "chromium and chromium-driver are needed: apt-get install chromium chromium-driver"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    profile = tempfile.mkdtemp(prefix="disquepy-chromium-")
    d = make_driver(profile)
    d.set_page_load_timeout(60)
    yield d
    d.quit()
    shutil.rmtree(profile, ignore_errors=True)
