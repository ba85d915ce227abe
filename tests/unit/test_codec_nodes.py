"""codec/nodes.py: the one host:port parser and HELLO's reply, for both sides."""

from __future__ import annotations

import pytest

from disquepy.codec.nodes import Hello, NodeInfo, parse_address, parse_hello


@pytest.mark.parametrize("text,want", [
    ("10.0.0.1:7712", ("10.0.0.1", 7712)),
    ("node-a:7711", ("node-a", 7711)),
    (":7713", ("127.0.0.1", 7713)),
    ("7714", ("127.0.0.1", 7714)),
    ("node-b", ("node-b", 7711)),
    ("  node-c:1  ", ("node-c", 1)),
    ("[::1]:7715", ("::1", 7715)),
    ("[::1]", ("::1", 7711)),
    ("::1:7716", ("::1", 7716)),  # nodes.conf writes IPv6 so: the last colon ends the host
    (("h", 7717), ("h", 7717)),
    (("", "7718"), ("127.0.0.1", 7718)),
])
def test_every_form_of_an_address(text, want):
    assert parse_address(text) == want


@pytest.mark.parametrize("text,why", [
    ("127.0.0.1:x", "expected HOST:PORT"),
    ("h:", "expected HOST:PORT"),
    ("h:-1", "expected HOST:PORT"),
    ("h:0", "port out of range"),
    ("h:65536", "port out of range"),
])
def test_a_bad_port_is_refused_naming_the_text(text, why):
    with pytest.raises(ValueError, match=why) as e:
        parse_address(text)
    assert repr(text) in str(e.value)


def test_defaults_are_the_callers():
    assert parse_address(":7711", default_host="") == ("", 7711)  # nodes.conf's own line
    with pytest.raises(ValueError):  # no port where one is required
        parse_address("h", default_port=0)
    assert parse_address("7712", default_host="10.1.1.1") == ("10.1.1.1", 7712)


def test_hello_in_bytes_or_text():
    reply = [1, b"a" * 40, [b"a" * 40, b"", b"7711", b"1"], [b"b" * 40, b"10.0.0.2", 7712, 100]]
    h = parse_hello(reply, ("10.0.0.1", 17711))
    assert h == Hello(1, "a" * 40, [NodeInfo("a" * 40, "10.0.0.1", 17711, 1),
                                    NodeInfo("b" * 40, "10.0.0.2", 7712, 100)])
    assert h.nodes[1].address == "10.0.0.2:7712"
    as_text = [1, "a" * 40, ["a" * 40, "10.0.0.1", "7711", "1"]]
    assert parse_hello(as_text).nodes == [NodeInfo("a" * 40, "10.0.0.1", 7711, 1)]
    # a node with no host is left so when nobody says where the reply came from
    assert parse_hello(reply).nodes[0].host == ""
