"""The TLS transport of client connections (server/tls.py, TlsServerProtocol) in process,
over memory BIOs: the application gets exactly the plaintext the client sent, however
the ciphertext is split across reads; replies come back as records; close_notify closes;
bytes that are not a valid record after the handshake close the connection, are logged
and deliver nothing."""

from __future__ import annotations

import contextlib
import ssl

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tlscerts import CA

from disquepy.server.protocol import ClientBatch
from disquepy.server.tls import TlsServerProtocol


@pytest.fixture(scope="module")
def contexts(tmp_path_factory):
    ca = CA(tmp_path_factory.mktemp("certs"))
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(*ca.issue("server"))
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.load_verify_locations(ca.cert_path)
    client.check_hostname = False
    return server, client


class Raw:
    """The TCP transport under the TLS one: what the server sends, and how it ended."""

    def __init__(self) -> None:
        self.sent = bytearray()
        self.writes = 0
        self.ended: str | None = None

    def write(self, data: bytes) -> None:
        self.sent += data
        self.writes += 1

    def take(self) -> bytes:
        out, self.sent = bytes(self.sent), bytearray()
        return out

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 5555) if name == "peername" else default

    def close(self) -> None:
        self.ended = self.ended or "closed"

    def abort(self) -> None:
        self.ended = self.ended or "aborted"

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return len(self.sent)


class Timer:
    def cancel(self) -> None:
        pass


class Loop:
    def call_later(self, delay, fn, *args) -> Timer:
        return Timer()  # the handshake timeout: never due here

    def call_soon(self, fn, *args):
        fn(*args)


class LaterLoop(Loop):
    """A loop whose call_soon callbacks wait for ``run_soon``, as between iterations."""

    def __init__(self) -> None:
        self.soon: list = []
        self.errors: list[dict] = []

    def call_soon(self, fn, *args):
        self.soon.append((fn, args))

    def run_soon(self) -> int:
        ran = 0
        while self.soon and ran < 100:
            fn, args = self.soon.pop(0)
            fn(*args)
            ran += 1
        return ran

    def call_exception_handler(self, context: dict) -> None:
        self.errors.append(context)


class Refusals:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, level, key, fmt, *args) -> None:
        self.lines.append(fmt % args)


class App:
    """The connection's protocol: keeps what it gets, answers each chunk with ``reply``."""

    def __init__(self, reply: bytes = b"") -> None:
        self.got = bytearray()
        self.reply = reply
        self.lost = False

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.got += data
        if self.reply:
            self.transport.write(self.reply)

    def connection_lost(self, exc) -> None:
        self.lost = True


class Pair:
    """A client SSLObject and a server TlsServerProtocol, handshake done."""

    def __init__(self, contexts, reply: bytes = b"", app=None, loop=None,
                 batch=None) -> None:
        sctx, cctx = contexts
        self.raw, self.app, self.refusals = Raw(), app or App(reply), Refusals()
        loop = loop or Loop()
        self.server = TlsServerProtocol(sctx, lambda: self.app, loop, self.refusals,
                                        batch or ClientBatch(loop, lambda: None))
        self.server.connection_made(self.raw)
        self.ci, self.co = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.client = cctx.wrap_bio(self.ci, self.co)
        for _ in range(10):
            with contextlib.suppress(ssl.SSLWantReadError):
                self.client.do_handshake()
            if self.co.pending:
                self.server.data_received(self.co.read())
            self.ci.write(self.raw.take())
            if self.server.app is not None and self.client.version():
                break
        assert self.client.version() == "TLSv1.3" and self.server.app is self.app

    def client_sends(self, *messages: bytes) -> bytes:
        for m in messages:
            self.client.write(m)
        return self.co.read()

    def client_reads(self) -> bytes:
        self.ci.write(self.raw.take())
        out = b""
        with contextlib.suppress(ssl.SSLWantReadError):
            while True:
                out += self.client.read(1 << 20)
        return out


def test_requests_in_replies_out(contexts):
    p = Pair(contexts, reply=b"+PONG\r\n")
    p.server.data_received(p.client_sends(b"PING\r\n"))
    assert bytes(p.app.got) == b"PING\r\n"
    assert p.client_reads() == b"+PONG\r\n"
    big = bytes(range(256)) * (4 << 12)  # 4 MiB: 256+ records each way
    p.app.reply = big
    p.server.data_received(p.client_sends(b"GET\r\n"))
    assert p.client_reads().endswith(big)
    assert p.raw.ended is None and not p.refusals.lines


@settings(max_examples=60, deadline=None)
@given(messages=st.lists(st.binary(min_size=1, max_size=40000), min_size=1, max_size=6),
       cuts=st.lists(st.integers(min_value=0, max_value=1 << 20), max_size=12))
def test_any_split_of_the_ciphertext_gives_the_plaintext(contexts, messages, cuts):
    p = Pair(contexts)
    wire = p.client_sends(*messages)
    bounds = sorted({0, len(wire), *(x % (len(wire) + 1) for x in cuts)})
    for a, b in zip(bounds, bounds[1:], strict=False):
        p.server.data_received(wire[a:b])
    assert bytes(p.app.got) == b"".join(messages)


def test_close_notify_after_requests(contexts):
    p = Pair(contexts)
    p.client.write(b"ADDJOB q x 0\r\n")
    with contextlib.suppress(ssl.SSLWantReadError):  # our close_notify is out; the
        p.client.unwrap()  # answer is not awaited
    p.server.data_received(p.co.read())
    assert bytes(p.app.got) == b"ADDJOB q x 0\r\n" and p.raw.ended == "closed"


@settings(max_examples=200, deadline=None)
@given(prefix=st.binary(max_size=64), garbage=st.binary(min_size=1, max_size=20000),
       header=st.sampled_from([b"", b"\x17\x03\x03", b"\x15\x03\x03", b"\x16\x03\x03",
                               b"\x17\x03\x03\x40\x01", b"\x17\x03\x03\x00\x00"]),
       flip=st.booleans())
def test_bytes_that_are_not_records_deliver_nothing(contexts, prefix, header, garbage, flip):
    """After a handshake: the requests sent before come out, then nothing more; either
    the bytes are an incomplete record still (nothing yet) or the connection is aborted
    and logged."""
    p = Pair(contexts)
    p.server.data_received(p.client_sends(b"PING\r\n" + prefix))
    assert bytes(p.app.got) == b"PING\r\n" + prefix
    if flip:  # a real record, one bit changed: it must not authenticate
        forged = bytearray(p.client_sends(b"DEBUG FLUSHALL\r\n"))
        forged[-1] ^= 1
        data = bytes(forged)
    else:
        data = header + garbage
    p.server.data_received(data)
    assert bytes(p.app.got) == b"PING\r\n" + prefix
    if flip:
        assert p.raw.ended == "aborted"
    if p.raw.ended is not None:
        assert p.raw.ended == "aborted" and len(p.refusals.lines) == 1
        assert p.refusals.lines[0].startswith("TLS error on a client connection from "
                                              "127.0.0.1: ")


# ------------------------------------------------------------------ the batch
APPDATA_RECORD = 5 + 1 + 16  # header, inner content type, AEAD tag (TLS 1.3)


class TwoReplies(App):
    """Answers each chunk with two writes, or raises when told to."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.fail = fail

    def data_received(self, data: bytes) -> None:
        if self.fail:
            raise RuntimeError("a bug in the command path")
        self.got += data
        self.transport.write(b"+1\r\n")
        self.transport.write(b"+2\r\n")


def batched(contexts, n: int, **app):
    loop = LaterLoop()
    batch = ClientBatch(loop, lambda: None)
    pairs = [Pair(contexts, app=TwoReplies(**app), loop=loop, batch=batch) for _ in range(n)]
    loop.run_soon()  # anything the handshakes left
    for p in pairs:
        p.raw.take()
    return loop, pairs


def test_records_wait_for_the_batch_and_replies_leave_after_the_commands(contexts):
    loop, pairs = batched(contexts, 3)
    for i, p in enumerate(pairs):
        p.server.data_received(p.client_sends(b"PING %d\r\n" % i))
    assert all(not p.app.got and not p.raw.sent for p in pairs)  # nothing before the batch
    writes = [p.raw.writes for p in pairs]
    assert loop.run_soon() == 1  # one run for the three connections
    for i, p in enumerate(pairs):
        assert bytes(p.app.got) == b"PING %d\r\n" % i
        # a record per write, handed to the socket in one write
        assert len(p.raw.sent) == 2 * APPDATA_RECORD + len(b"+1\r\n+2\r\n")
        assert p.raw.writes == writes[i] + 1
        assert p.client_reads() == b"+1\r\n+2\r\n"


def test_pending_records_count_as_output_and_go_before_a_close(contexts):
    loop, (p,) = batched(contexts, 1)
    p.server.write(b"-ERR Protocol error\r\n")
    assert p.server.get_write_buffer_size() == APPDATA_RECORD + len(b"-ERR Protocol error\r\n")
    assert not p.raw.sent
    p.server.close()  # before the batch ran: the reply is sent, then close_notify
    assert p.raw.ended == "closed"
    p.ci.write(p.raw.take())
    assert p.client.read(100) == b"-ERR Protocol error\r\n"
    assert p.client.read(100) == b""  # close_notify
    assert loop.run_soon() == 1 and not p.raw.sent  # the batch has nothing left for it


def test_abort_drops_pending_replies(contexts):
    loop, (p,) = batched(contexts, 1)
    p.server.write(b"+OK\r\n")
    p.server.abort()
    loop.run_soon()
    assert p.raw.ended == "aborted" and not p.raw.sent


def test_a_protocol_that_raises_loses_only_its_connection(contexts):
    loop, pairs = batched(contexts, 3)
    pairs[1].app.fail = True
    for p in pairs:
        p.server.data_received(p.client_sends(b"PING\r\n"))
    loop.run_soon()
    assert [p.raw.ended for p in pairs] == [None, "aborted", None]
    assert len(loop.errors) == 1 and isinstance(loop.errors[0]["exception"], RuntimeError)
    for p in (pairs[0], pairs[2]):
        assert p.client_reads() == b"+1\r\n+2\r\n"
    # the batch goes on serving the others afterwards
    pairs[0].server.data_received(pairs[0].client_sends(b"PING\r\n"))
    loop.run_soon()
    assert pairs[0].client_reads() == b"+1\r\n+2\r\n"
