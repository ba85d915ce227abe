"""The C record layer of TLS client connections (server/_ctls.c) against the
ssl.SSLObject path it replaces: the same plaintext from any split of the ciphertext,
many records in one call, close_notify, a forged record, wrong objects refused.

``make test`` builds the extension (it needs OpenSSL's headers, which ``make`` installs):
these tests fail, not skip, when it is missing.
"""

from __future__ import annotations

import contextlib
import ssl

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tlscerts import CA

from disquepy.server import _ctls, tls  # an ImportError where it was not built


@pytest.fixture(scope="module")
def contexts(tmp_path_factory):
    ca = CA(tmp_path_factory.mktemp("certs"))
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(*ca.issue("server"))
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.load_verify_locations(ca.cert_path)
    client.check_hostname = False
    return server, client


class Pair:
    """A client and a server SSLObject over memory BIOs, handshake done; ``records`` is
    the C record layer on the server's side."""

    def __init__(self, contexts) -> None:
        sctx, cctx = contexts
        self.si, self.so, self.ci, self.co = (ssl.MemoryBIO() for _ in range(4))
        self.server = sctx.wrap_bio(self.si, self.so, server_side=True)
        self.client = cctx.wrap_bio(self.ci, self.co)
        for _ in range(10):
            for side in (self.client, self.server):
                with contextlib.suppress(ssl.SSLWantReadError):
                    side.do_handshake()
            self.si.write(self.co.read())
            self.ci.write(self.so.read())
            if self.server.version() and self.client.version():
                break
        assert self.server.version() == "TLSv1.3"
        self.records = _ctls.Records(self.server._sslobj, self.si, self.so)

    def client_sends(self, *messages: bytes) -> bytes:
        """The ciphertext of ``messages``, one TLS write (one or more records) each."""
        for m in messages:
            self.client.write(m)
        return self.co.read()

    def client_reads(self, ciphertext: bytes) -> bytes:
        self.ci.write(ciphertext)
        out = b""
        while True:
            try:
                out += self.client.read(1 << 20)
            except ssl.SSLWantReadError:
                return out


def test_the_c_layer_is_the_one_the_server_uses():
    assert tls.C_RECORDS is _ctls
    assert _ctls.openssl_version_number() == ssl.OPENSSL_VERSION_NUMBER


def test_requests_in_and_replies_out(contexts):
    p = Pair(contexts)
    assert p.records.receive(p.client_sends(b"PING\r\n")) == b"PING\r\n"
    assert p.records.receive(b"") == b""  # nothing new: nothing, no error
    assert p.client_reads(p.records.send(b"+PONG\r\n")) == b"+PONG\r\n"
    # several records in one read, and a reply of many records (4 MiB: 256+ records)
    many = [b"%05d" % n * 100 for n in range(50)]
    assert p.records.receive(p.client_sends(*many)) == b"".join(many)
    big = bytes(range(256)) * (4 << 12)
    assert p.client_reads(p.records.send(big)) == big
    assert p.records.receive(p.client_sends(big)) == big
    assert not p.records.eof


@settings(max_examples=60, deadline=None)
@given(messages=st.lists(st.binary(min_size=1, max_size=40000), min_size=1, max_size=6),
       cuts=st.lists(st.integers(min_value=0, max_value=1 << 20), max_size=12))
def test_any_split_of_the_ciphertext_gives_the_same_plaintext_as_sslobject(
        contexts, messages, cuts):
    c_pair, py_pair = Pair(contexts), Pair(contexts)
    wire_c, wire_py = c_pair.client_sends(*messages), py_pair.client_sends(*messages)
    bounds = sorted({0, len(wire_c), *(x % (len(wire_c) + 1) for x in cuts)})
    got_c = b"".join(c_pair.records.receive(wire_c[a:b])
                     for a, b in zip(bounds, bounds[1:], strict=False))
    got_py = b""
    for a, b in zip(bounds, bounds[1:], strict=False):  # the Python path: read until
        py_pair.si.write(wire_py[a:b])  # OpenSSL wants more
        while True:
            try:
                got_py += py_pair.server.read(tls.READ_SIZE)
            except ssl.SSLWantReadError:
                break
    assert got_c == got_py == b"".join(messages)


def test_close_notify_after_requests(contexts):
    p = Pair(contexts)
    p.client.write(b"ADDJOB q x 0\r\n")
    with contextlib.suppress(ssl.SSLWantReadError):  # our close_notify is out; the
        p.client.unwrap()  # answer is not awaited
    assert p.records.receive(p.co.read()) == b"ADDJOB q x 0\r\n"
    assert p.records.eof
    assert p.records.receive(b"") == b""


def test_a_forged_record_is_an_error_not_data(contexts):
    p = Pair(contexts)
    wire = bytearray(p.client_sends(b"DEBUG FLUSHALL\r\n"))
    wire[-1] ^= 1  # the tag no longer matches
    with pytest.raises(_ctls.Error, match="DECRYPTION_FAILED_OR_BAD_RECORD_MAC|BAD_RECORD_MAC"):
        p.records.receive(bytes(wire))
    assert issubclass(_ctls.Error, OSError)
    assert tls.describe(_ctls.Error("BAD_RECORD_MAC")) == "BAD_RECORD_MAC"


def test_only_the_objects_it_knows(contexts):
    p = Pair(contexts)
    with pytest.raises(TypeError):
        _ctls.Records(p.server, p.si, p.so)  # the Python wrapper, not its C object
    with pytest.raises(TypeError):
        _ctls.Records(p.server._sslobj, b"", p.so)
    with pytest.raises(ValueError, match="does not use these BIOs"):
        _ctls.Records(p.server._sslobj, p.so, p.si)
    with pytest.raises(ValueError, match="not initialised"):
        _ctls.Records.__new__(_ctls.Records).receive(b"x")


@settings(max_examples=200, deadline=None)
@given(prefix=st.binary(max_size=64), garbage=st.binary(min_size=1, max_size=20000),
       header=st.sampled_from([b"", b"\x17\x03\x03", b"\x15\x03\x03", b"\x16\x03\x03",
                               b"\x17\x03\x03\x40\x01", b"\x17\x03\x03\x00\x00"]))
def test_bytes_from_the_network_give_plaintext_or_an_error_never_more(contexts, prefix,
                                                                      header, garbage):
    """Whatever follows a handshake: the requests sent before it come out, then either
    nothing yet (an incomplete record), or _ctls.Error; and after an error, no data."""
    p = Pair(contexts)
    good = p.client_sends(b"PING\r\n" + prefix)
    out = p.records.receive(good)
    assert out == b"PING\r\n" + prefix
    try:
        extra = p.records.receive(header + garbage)
    except _ctls.Error as e:
        assert str(e) and str(e) == str(e).upper()  # OpenSSL's reason, like ssl's
        return
    assert extra == b""  # forged records never authenticate: at most, not complete yet
