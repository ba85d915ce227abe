"""Fixtures for the client tests: a client on the shared empty server, real clusters."""

from __future__ import annotations

import pytest

from disquepy.client import Disque


@pytest.fixture
def dq(server):
    """A disquepy client on the shared, emptied server."""
    c = Disque([f"127.0.0.1:{server.port}"])
    yield c
    c.close()
