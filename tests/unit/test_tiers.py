"""The test tiers (tests/conftest.py, `make test-fast`): everything in tests/unit and
tests/sim is `fast`, and a fast test cannot open a network socket."""

from __future__ import annotations

import socket

import pytest
from support import TESTS, tier


def test_a_fast_test_cannot_bind_or_connect_a_network_socket():
    with socket.socket() as s, pytest.raises(AssertionError, match="tests/integration"):
        s.bind(("127.0.0.1", 0))
    with socket.socket() as s, pytest.raises(AssertionError, match="fast-tier"):
        s.connect_ex(("127.0.0.1", 9))
    a, b = socket.socketpair()  # a local pair (an event loop's self-pipe) is no network
    a.close()
    b.close()


def test_each_directory_is_its_tier(request):
    assert request.node.get_closest_marker("fast") is not None  # this very test
    assert tier(TESTS / "unit" / "test_resp.py", []) == "fast"
    assert tier(TESTS / "sim" / "test_sim_ci.py", ["ci"]) == "fast"
    assert tier(TESTS / "integration" / "test_server.py", ["server"]) == "server"
    assert tier(TESTS / "spark" / "test_connector.py", ["single"]) == "spark"
    assert tier(TESTS / "web" / "test_web_dashboard.py", ["browser", "web"]) == "browser"
    assert tier(TESTS / "web" / "test_web_api.py", ["http"]) == "server"
