"""kombu's own transport integration classes (t/integration/common.py, the ones its
Redis, MongoDB and SQS transports subclass) against a real node.

The classes come from the sdist of the installed kombu (kombu_suite.py); nothing is
overridden here except where said."""

from __future__ import annotations

import sys

import pytest
from kombu_suite import fetch

sys.path.insert(0, str(fetch()))  # fails loudly (pip's output) when it cannot be had

from t.integration.common import (  # noqa: E402
    BaseEventLoop,
    BaseExchangeTypes,
    BaseMessage,
    BasePriority,
    BaseTimeToLive,
    BasicFunctionality,
)

from disquepy.kombu.transport import Transport  # noqa: E402


class TestDisqueBasicFunctionality(BasicFunctionality):
    def test_failed_connection_is_a_connection_error(self, invalid_connection):
        """kombu's retry logic must see a refused connection as recoverable."""

        with pytest.raises(Transport.connection_errors):
            invalid_connection.connect()


class TestDisqueExchangeTypes(BaseExchangeTypes):
    pass


class TestDisqueTimeToLive(BaseTimeToLive):
    pass


class TestDisquePriority(BasePriority):
    PRIORITY_ORDER = "asc"  # the default priority_order: AMQP's, 9 highest


class TestDisqueMessage(BaseMessage):
    pass


class TestDisqueEventLoop(BaseEventLoop):
    pass


class TestDisquePriorityDesc(BasePriority):
    """kombu's Redis order (0 highest), as ``priority_order=desc`` gives it."""

    PRIORITY_ORDER = "desc"

    @pytest.fixture
    def connection(self, disque_url):
        import kombu

        return kombu.Connection(disque_url, transport_options={"priority_order": "desc"})
