"""Failed AUTH attempts slowed per source address, across connections (core/authlimit.py):
the pure bookkeeping, then through the node (an AUTH put off is an ``AuthWait`` shell
request, run again by the shell)."""

from __future__ import annotations

from nodeharness import Harness

from disquepy.core.authlimit import (
    DELAY_MAX_MS,
    FORGET_MS,
    FREE_FAILS,
    MAX_ADDRESSES,
    AuthThrottle,
    source,
)
from disquepy.core.outputs import AuthWait

NOW = 1_700_000_000_000


def test_source_is_the_address_without_the_port():
    assert source("10.0.0.5:52144") == "10.0.0.5"
    assert source("::1:7000") == "::1"
    assert source("?") == "?"


def test_an_address_waits_after_its_free_failures_doubling_to_the_cap():
    t = AuthThrottle()
    for i in range(FREE_FAILS - 1):
        t.failed("a", NOW + i)
        assert t.wait("a", NOW + i) == 0
    t.failed("a", NOW)
    assert [t.wait("a", NOW), t.wait("a", NOW + 60), t.wait("a", NOW + 100)] == [100, 40, 0]
    waits = []
    for _ in range(8):
        t.failed("a", NOW)
        waits.append(t.wait("a", NOW))
    assert waits == [200, 400, 800, 1600, 3200, DELAY_MAX_MS, DELAY_MAX_MS, DELAY_MAX_MS]
    assert t.wait("b", NOW) == 0  # another address is not slowed
    assert t.wait("a", NOW + FORGET_MS) == 0 and "a" not in t.addrs  # forgiven


def test_remembers_a_bounded_number_of_addresses():
    t = AuthThrottle()
    for i in range(MAX_ADDRESSES + 10):
        t.failed(f"10.0.{i // 256}.{i % 256}", NOW)
    assert len(t.addrs) == MAX_ADDRESSES
    assert "10.0.0.0" not in t.addrs  # the oldest went first


def test_reconnecting_does_not_buy_more_tries():
    """Each connection fails once, as a client reconnecting in a loop does: past the
    free failures the address's next AUTH, on any connection, waits."""
    h = Harness(requirepass="right")
    for n in range(FREE_FAILS):
        c = h.node.new_client(addr=f"10.0.0.5:{40000 + n}", now=h.now)
        assert h("AUTH", "wrong", client=c) == "ERR invalid password"
    c = h.node.new_client(addr="10.0.0.5:50000", now=h.now)
    h.node.execute(c, [b"AUTH", b"right"], h.now)
    ((_, req),) = h.node.requests
    assert req == AuthWait(100, (b"AUTH", b"right"))
    assert not c.authed  # not even checked yet
    h.node.requests.clear()
    other = h.node.new_client(addr="10.0.0.6:50000", now=h.now)
    assert h("AUTH", "right", client=other) == b"OK"  # another address: at once
    h.now += 100
    assert h("AUTH", "right", client=c) == b"OK"  # its turn: checked, and right
    assert h("HELLO", 3, "AUTH", "default", "wrong", client=c).startswith("WRONGPASS")
    h.node.execute(c, [b"HELLO", b"3", b"AUTH", b"default", b"right"], h.now)
    ((_, req),) = h.node.requests
    assert isinstance(req, AuthWait) and req.delay_ms == 200
