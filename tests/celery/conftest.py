"""Fixtures for the kombu transport and Celery tests: kombu connections to real nodes."""

from __future__ import annotations

import pytest
from support import free_port


@pytest.fixture
def disque_url(server) -> str:
    """``disque://`` URL of the shared node, emptied for this test."""
    return f"disque://127.0.0.1:{server.port}"


@pytest.fixture
def connection(disque_url):
    """A kombu connection to a real node (the fixture kombu's integration classes use)."""
    import kombu

    import disquepy.kombu  # noqa: F401  (registers disque://)

    return kombu.Connection(disque_url)


@pytest.fixture
def invalid_connection():
    """A kombu connection to a port nothing listens on."""
    import kombu

    import disquepy.kombu  # noqa: F401

    return kombu.Connection(f"disque://127.0.0.1:{free_port()}")
