"""The cluster-secret handshake, version 2 (server/busauth.py ``Handshake``), and the
MAC'd records after it, bytes in, bytes out."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from hypothesis import given
from hypothesis import strategies as st

from disquepy.codec.bus import encode_frame
from disquepy.server.busauth import (
    HELLO_LEN,
    MAC,
    RECORD_MAX,
    Handshake,
    HandshakeError,
    RecordError,
    Sealer,
    Unsealer,
)

SECRET = b"0123456789abcdef-secret"
A, B, C = "a" * 40, "b" * 40, "c" * 40  # node IDs


def pair(connector_id=A, acceptor_id=B, expect=B, secret_c=SECRET, secret_a=SECRET,
         binding_c=b"", binding_a=b""):
    return (Handshake(secret_c, True, connector_id, expect, binding_c),
            Handshake(secret_a, False, acceptor_id, binding=binding_a))


def run(connector: Handshake, acceptor: Handshake, chunk: int = 1 << 20) -> None:
    """Both hellos cross, then the connector's proof, then the acceptor's."""
    def deliver(hs, data):
        out = b""
        for i in range(0, len(data), chunk):
            out += hs.feed(data[i:i + chunk])
        return out

    proof_c = deliver(connector, acceptor.hello())
    assert len(proof_c) == MAC and not connector.done
    assert deliver(acceptor, connector.hello()) == b""
    proof_a = deliver(acceptor, proof_c)
    assert acceptor.done and len(proof_a) == MAC
    assert deliver(connector, proof_a) == b""
    assert connector.done


@pytest.mark.parametrize("chunk", [1, 3, 37, 78, 1 << 20])
def test_same_secret_both_sides_proven(chunk):
    c, a = pair()
    run(c, a, chunk)
    assert c.peer_id == B and a.peer_id == A
    assert c.frame_key == a.frame_key and len(c.frame_key) == 32


def test_a_node_met_by_address_accepts_any_node_id():
    c, a = pair(expect=None)
    run(c, a)
    assert c.peer_id == B


def test_wire_format_is_the_documented_one():
    nc, na = b"c" * 32, b"n" * 32
    c = Handshake(SECRET, True, A, B, nonce=nc)
    a = Handshake(SECRET, False, B, nonce=na)
    assert c.hello() == b"DQBA\x02C" + nc + A.encode() and len(c.hello()) == HELLO_LEN
    assert a.hello() == b"DQBA\x02A" + na + B.encode()
    transcript = b"disquepy bus v2" + A.encode() + B.encode() + nc + na + b"\x00\x00"
    proof = c.feed(a.hello())
    assert proof == hmac.new(SECRET, b"connector proof" + transcript, hashlib.sha256).digest()
    a.feed(c.hello())
    assert a.feed(proof) == hmac.new(SECRET, b"acceptor proof" + transcript,
                                     hashlib.sha256).digest()
    assert a.frame_key == hmac.new(SECRET, b"frame key" + transcript, hashlib.sha256).digest()


def test_wrong_secret_refused_by_the_acceptor_before_it_proves_anything():
    c, a = pair(secret_c=b"another secret, 16+ chars")
    proof = c.feed(a.hello())
    a.feed(c.hello())
    with pytest.raises(HandshakeError, match="wrong cluster-secret"):
        a.feed(proof)
    assert not a.done


def test_acceptor_without_the_secret_is_refused_by_the_connector():
    c, a = pair()
    c.feed(a.hello())
    with pytest.raises(HandshakeError, match="wrong cluster-secret"):
        c.feed(b"\0" * MAC)
    assert not c.done


def test_relayed_to_another_node_refused_by_the_connector():
    """A connects to what it believes is B's address; whoever listens there relays A's
    handshake to C: C says who it is, and A refuses before proving anything."""
    c = Handshake(SECRET, True, A, expect=B)
    other = Handshake(SECRET, False, C)
    with pytest.raises(HandshakeError, match="the node there is cccccccc, not bbbbbbbb"):
        c.feed(other.hello())


def test_relay_that_rewrites_the_acceptor_id_fails_its_mac():
    """The relay rewrites C's hello to say B: A's proof is then over B's ID, C checks
    it over its own and refuses."""
    c = Handshake(SECRET, True, A, expect=B)
    other = Handshake(SECRET, False, C)
    forged = other.hello()[:-40] + B.encode()
    proof = c.feed(forged)
    other.feed(c.hello())
    with pytest.raises(HandshakeError, match="wrong cluster-secret"):
        other.feed(proof)


def test_relay_between_two_tls_channels_fails_its_mac():
    c, a = pair(binding_c=b"channel one", binding_a=b"channel two")
    proof = c.feed(a.hello())
    a.feed(c.hello())
    with pytest.raises(HandshakeError, match="wrong cluster-secret"):
        a.feed(proof)


def test_reflections_refused():
    # a node's own hello sent back to it: same role, and its own ID and nonce
    c = Handshake(SECRET, True, A)
    with pytest.raises(HandshakeError, match="same role"):
        c.feed(c.hello())
    a = Handshake(SECRET, False, A)
    with pytest.raises(HandshakeError, match="same role"):
        a.feed(a.hello())
    # its acceptor's hello (its own ID, from its own listener) reaches its connector
    with pytest.raises(HandshakeError, match="own ID"):
        Handshake(SECRET, True, A).feed(Handshake(SECRET, False, A).hello())
    # the connector's own proof sent back to it is not the acceptor's
    c, a = pair()
    proof = c.feed(a.hello())
    with pytest.raises(HandshakeError, match="wrong cluster-secret"):
        c.feed(proof)


def test_echoed_nonce_refused():
    c = Handshake(SECRET, True, A, nonce=b"x" * 32)
    a = Handshake(SECRET, False, B, nonce=b"x" * 32)
    with pytest.raises(HandshakeError, match="echoed"):
        c.feed(a.hello())


def test_a_peer_that_sends_frames_without_handshake_is_refused():
    a = Handshake(SECRET, False, B)
    with pytest.raises(HandshakeError, match="no cluster-secret handshake"):
        a.feed(encode_frame([1, "x" * 40, 7711, 0]))
    with pytest.raises(HandshakeError, match="no cluster-secret handshake"):
        Handshake(SECRET, False, B).feed(b"\x00")  # refused at the first wrong byte


def test_old_and_unknown_versions_are_refused_clearly():
    with pytest.raises(HandshakeError, match="version 1 .* upgrade every node"):
        Handshake(SECRET, False, B).feed(b"DQBA\x01" + b"n" * 32)
    with pytest.raises(HandshakeError, match="version 1"):
        Handshake(SECRET, True, A, B).feed(b"DQBA\x01")  # told at its fifth byte
    with pytest.raises(HandshakeError, match="unsupported cluster bus handshake version 3"):
        Handshake(SECRET, False, B).feed(b"DQBA\x03C" + b"n" * 72)


def test_malformed_node_id_refused():
    bad = b"DQBA\x02C" + b"n" * 32 + b"Z" * 40
    with pytest.raises(HandshakeError, match="malformed"):
        Handshake(SECRET, False, B).feed(bad)


def test_bytes_after_the_handshake_are_kept_for_the_records():
    c, a = pair()
    proof = c.feed(a.hello())
    a.feed(c.hello())
    frame = encode_frame([1, "x", 7711, 0])
    a.feed(proof + frame)
    assert a.done and a.rest == frame


@given(st.binary(max_size=200))
def test_garbage_never_authenticates(data):
    a = Handshake(SECRET, False, B)
    try:
        a.feed(data)
    except HandshakeError:
        return
    assert not a.done


# ------------------------------------------------------------------ records
KEY = b"k" * 32


def stream(chunks) -> bytes:
    return b"".join(bytes(c) for c in chunks)


@pytest.mark.parametrize("size", [1, 100, RECORD_MAX, RECORD_MAX + 1, 3 * RECORD_MAX + 7])
@pytest.mark.parametrize("step", [1, 7, 4096, 1 << 20])
def test_records_round_trip_in_any_chunking(size, step):
    if step == 1 and size > 200:
        step = 997
    s, u = Sealer(KEY), Unsealer(KEY)
    data = bytes(range(256)) * (size // 256) + b"z" * (size % 256)
    wire = stream(s.seal(data)) + stream(s.seal(b"second"))
    got = b"".join(u.feed(wire[i:i + step]) for i in range(0, len(wire), step))
    assert got == data + b"second" and len(u) == 0


def test_a_forged_altered_replayed_or_reordered_record_is_refused():
    s = Sealer(KEY)
    one, two = stream(s.seal(b"one")), stream(s.seal(b"two"))
    forged = stream(Sealer(b"x" * 32).seal(b"one"))
    altered = one[:5] + b"X" + one[6:]
    for wire in (forged, altered, two, one + one, two + one):
        u = Unsealer(KEY)
        with pytest.raises(RecordError):
            u.feed(wire)
    u = Unsealer(KEY)
    assert u.feed(one + two) == b"onetwo"
    u = Unsealer(KEY)  # one whole record a read: the fast path, in order only
    assert u.feed(one) == b"one" and u.feed(two) == b"two"
    with pytest.raises(RecordError):
        u.feed(two)


def test_record_lengths_are_bounded():
    for n in (0, RECORD_MAX + 1, 1 << 31):
        with pytest.raises(RecordError, match="bad record length"):
            Unsealer(KEY).feed(n.to_bytes(4, "big") + b"x" * 20)
