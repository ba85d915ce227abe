"""The cluster-secret handshake (server/bus.py ``Handshake``), bytes in, bytes out."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from hypothesis import given
from hypothesis import strategies as st

from disquepy.codec.bus import encode_frame
from disquepy.server.bus import HS_HELLO, HS_MAC, Handshake, HandshakeError

SECRET = b"0123456789abcdef-secret"


def run(connector: Handshake, acceptor: Handshake, chunk: int = 1 << 20) -> None:
    """Both hellos cross, then the connector's proof, then the acceptor's."""
    def deliver(hs, data):
        out = b""
        for i in range(0, len(data), chunk):
            out += hs.feed(data[i:i + chunk])
        return out

    proof_c = deliver(connector, acceptor.hello())
    assert len(proof_c) == HS_MAC and not connector.done
    assert deliver(acceptor, connector.hello()) == b""
    proof_a = deliver(acceptor, proof_c)
    assert acceptor.done and len(proof_a) == HS_MAC
    assert deliver(connector, proof_a) == b""
    assert connector.done


@pytest.mark.parametrize("chunk", [1, 3, 37, 1 << 20])
def test_same_secret_both_sides_proven(chunk):
    run(Handshake(SECRET, True), Handshake(SECRET, False), chunk)


def test_wire_format_is_the_documented_one():
    nc, ns = b"c" * 32, b"s" * 32
    c, a = Handshake(SECRET, True, nonce=nc), Handshake(SECRET, False, nonce=ns)
    assert c.hello() == b"DQBA\x01" + nc and len(c.hello()) == HS_HELLO
    proof = c.feed(a.hello())
    assert proof == hmac.new(SECRET, b"disquepy bus v1 connector" + nc + ns,
                             hashlib.sha256).digest()
    a.feed(c.hello())
    assert a.feed(proof) == hmac.new(SECRET, b"disquepy bus v1 acceptor" + nc + ns,
                                     hashlib.sha256).digest()


def test_wrong_secret_refused_by_the_acceptor_before_it_proves_anything():
    c, a = Handshake(b"another secret, 16+ chars", True), Handshake(SECRET, False)
    proof = c.feed(a.hello())
    a.feed(c.hello())
    with pytest.raises(HandshakeError, match="wrong cluster-secret"):
        a.feed(proof)
    assert not a.done


def test_acceptor_without_the_secret_is_refused_by_the_connector():
    c, a = Handshake(SECRET, True), Handshake(b"impostor impostor impostor", False)
    proof = c.feed(a.hello())
    a_bad = Handshake(b"impostor impostor impostor", False, nonce=a.nonce)
    a_bad.feed(c.hello())
    # an impostor acceptor cannot forge its proof without the secret: any 32 bytes fail
    with pytest.raises(HandshakeError, match="wrong cluster-secret"):
        c.feed(b"\0" * HS_MAC)
    assert not c.done and len(proof) == HS_MAC


def test_a_reflected_proof_is_refused():
    """The connector's own proof sent back to it is not the acceptor's proof."""
    c, a = Handshake(SECRET, True), Handshake(SECRET, False)
    proof = c.feed(a.hello())
    with pytest.raises(HandshakeError, match="wrong cluster-secret"):
        c.feed(proof)


def test_a_peer_that_sends_frames_without_handshake_is_refused():
    a = Handshake(SECRET, False)
    with pytest.raises(HandshakeError, match="no cluster-secret handshake"):
        a.feed(encode_frame([1, "x" * 40, 7711, 0]))
    with pytest.raises(HandshakeError, match="no cluster-secret handshake"):
        Handshake(SECRET, False).feed(b"\x00")  # refused at the first wrong byte


def test_an_unknown_version_is_refused():
    with pytest.raises(HandshakeError, match="unsupported handshake version 2"):
        Handshake(SECRET, False).feed(b"DQBA\x02" + b"n" * 32)


def test_echoed_nonce_refused():
    a = Handshake(SECRET, False)
    with pytest.raises(HandshakeError, match="echoed"):
        a.feed(a.hello())


def test_bytes_after_the_handshake_are_kept_for_the_frame_reader():
    c, a = Handshake(SECRET, True), Handshake(SECRET, False)
    proof = c.feed(a.hello())
    a.feed(c.hello())
    frame = encode_frame([1, "x", 7711, 0])
    a.feed(proof + frame)
    assert a.done and a.rest == frame


@given(st.binary(max_size=200))
def test_garbage_never_authenticates(data):
    a = Handshake(SECRET, False)
    try:
        a.feed(data)
    except HandshakeError:
        return
    assert not a.done


def test_refusal_log_is_rate_limited_per_key():
    import logging

    from disquepy.server.log import RateLimited

    class Capture(logging.Handler):
        def __init__(self):
            super().__init__()
            self.lines = []

        def emit(self, record):
            self.lines.append(record.getMessage())

    logger = logging.getLogger("test-ratelimit")
    logger.propagate = False
    cap = Capture()
    logger.addHandler(cap)
    now = [100.0]
    rl = RateLimited(logger, interval=10.0, max_keys=3, clock=lambda: now[0])
    assert rl.warning("a", "refused %s", "a") is True
    for _ in range(5):
        now[0] += 1
        assert rl.warning("a", "refused %s", "a") is False
    assert rl.warning("b", "refused %s", "b") is True  # another key: its own budget
    now[0] += 10
    assert rl.warning("a", "refused %s", "a") is True
    assert cap.lines == ["refused a", "refused b",
                         "refused a (5 more like this in the last 10s)"]
    for k in "cdefg":  # bounded: never more than max_keys remembered
        rl.warning(k, "x")
    assert len(rl._next) <= 3
