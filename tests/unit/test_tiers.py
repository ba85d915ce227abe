"""The test tiers (tests/conftest.py, `make test-fast`): everything in tests/unit and
tests/sim is `fast`, and a fast test cannot open a network socket."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_a_fast_test_cannot_bind_or_connect_a_network_socket():
    with socket.socket() as s, pytest.raises(AssertionError, match="tests/integration"):
        s.bind(("127.0.0.1", 0))
    with socket.socket() as s, pytest.raises(AssertionError, match="fast-tier"):
        s.connect_ex(("127.0.0.1", 9))
    a, b = socket.socketpair()  # a local pair (an event loop's self-pipe) is no network
    a.close()
    b.close()


def test_unit_and_sim_are_the_fast_tier_and_nothing_there_is_left_out():
    def collected(*args: str) -> list[str]:
        res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only",
                              "-p", "no:cacheprovider", *args, "tests/unit", "tests/sim"],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)
        return [ln for ln in res.stdout.splitlines() if "::" in ln]

    fast = collected("-m", "fast")
    assert len(fast) > 500 and any(t.startswith("tests/sim/") for t in fast)
    assert collected("-m", "not fast") == []
