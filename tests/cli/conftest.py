"""Fixtures for the command line tests: run ``disque`` as a real process, real clusters."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cli_support import CLI, NODE_TIMEOUT_MS, Result, cli_env  # noqa: E402


@pytest.fixture
def run_cli(tmp_path):
    """Run ``python -m disquepy.cli ARGS`` to completion; returns :class:`Result`."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)

    def run(*args: object, input: str | None = None, timeout: float = 60) -> Result:
        p = subprocess.run([*CLI, *map(str, args)], input=input, capture_output=True,
                           text=True, timeout=timeout, env=cli_env(home), cwd=tmp_path)
        return Result(p.returncode, p.stdout, p.stderr)

    run.home = home
    return run


@pytest.fixture
def fresh_nodes(server_factory):
    """``fresh_nodes(n)``: n separate nodes, not joined (cluster-node-timeout 1.5 s)."""

    def make(n: int):
        return [server_factory("--cluster-node-timeout", str(NODE_TIMEOUT_MS))
                for _ in range(n)]

    return make
