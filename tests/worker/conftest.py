"""Fixtures for the worker tests: a client on the shared empty server, worker processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT

HERE = Path(__file__).resolve().parent



@pytest.fixture
def spawn_worker(tmp_path):
    """spawn(port, "handlers:slow", "--queues", "q", ...) -> Popen of
    ``python -m disquepy.worker`` (stderr to a log file); killed at the end of the test."""
    procs: list[subprocess.Popen] = []

    def spawn(port: int, target: str, *args: str) -> subprocess.Popen:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(HERE)]))
        log = open(tmp_path / f"worker-{len(procs)}.log", "wb")  # noqa: SIM115
        p = subprocess.Popen([sys.executable, "-m", "disquepy.worker", target,
                              "--nodes", f"127.0.0.1:{port}", *args],
                             cwd=HERE, env=env, stdout=log, stderr=subprocess.STDOUT)
        p.log_path = tmp_path / f"worker-{len(procs)}.log"
        procs.append(p)
        return p

    yield spawn
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(10)
