"""Tests for disquepy.codec.resp: request readers and reply encoders."""

from __future__ import annotations

import ast
import collections
import enum
import gc
import math
import os
import weakref
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from disquepy.codec import resp
from disquepy.codec.resp import (
    EMPTY_ARRAY,
    HAVE_CREADER,
    HAVE_HIREDIS,
    NULL3,
    NULL_ARRAY2,
    NULL_BULK2,
    OK,
    ONE,
    PONG,
    ZERO,
    CRequestReader,
    Err,
    HiredisRequestReader,
    ProtocolError,
    PyRequestReader,
    QueryBufferLimitError,
    RequestReader,
    Status,
    array,
    bulk,
    bulk_array,
    encode,
    error,
    integer,
    make_reader,
    null_array,
    null_bulk,
    simple,
    split_args,
)

READERS = [PyRequestReader]
if HAVE_HIREDIS:
    READERS.append(HiredisRequestReader)
if HAVE_CREADER:
    READERS.append(CRequestReader)

KB64 = 64 * 1024


@pytest.fixture(params=READERS, ids=lambda c: c.__name__)
def reader_cls(request):
    return request.param


def mb(*args: bytes) -> bytes:
    """Encode a request as a multibulk (what clients send)."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def drain(reader) -> list[list[bytes]]:
    out = []
    while (argv := reader.gets()) is not False:
        out.append(argv)
    return out


def parse(cls, data: bytes, **limits) -> list[list[bytes]]:
    r = cls(**limits)
    r.feed(data)
    return drain(r)


def parse_chunks(cls, chunks, **limits):
    """Feed chunks one by one; return (commands, error message or None, pending)."""
    r = cls(**limits)
    cmds: list[list[bytes]] = []
    try:
        for chunk in chunks:
            r.feed(chunk)
            while (argv := r.gets()) is not False:
                cmds.append(argv)
    except ProtocolError as exc:
        return cmds, exc.message, None
    return cmds, None, len(r)


def error_of(cls, data: bytes, **limits) -> str:
    r = cls(**limits)
    with pytest.raises(ProtocolError) as info:
        r.feed(data)
        drain(r)
    return info.value.message


def bytewise(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


# ---------------------------------------------------------------------------
# Multibulk requests
# ---------------------------------------------------------------------------


def test_single_multibulk(reader_cls):
    assert parse(reader_cls, mb(b"SET", b"a", b"b")) == [[b"SET", b"a", b"b"]]


def test_args_are_bytes(reader_cls):
    (argv,) = parse(reader_cls, mb(b"PING") + b"PING\r\n")[:1]
    assert all(type(a) is bytes for a in argv)
    (argv,) = parse(reader_cls, b"PING\r\n")
    assert all(type(a) is bytes for a in argv)


def test_pipelined_multibulk(reader_cls):
    cmds = [[b"ADDJOB", b"q%d" % i, b"body %d" % i, b"0"] for i in range(500)]
    data = b"".join(mb(*c) for c in cmds)
    assert parse(reader_cls, data) == cmds
    for size in (1, 7, 100, 4096):
        chunks = [data[i : i + size] for i in range(0, len(data), size)]
        assert parse_chunks(reader_cls, chunks) == (cmds, None, 0)


def test_gets_false_until_complete(reader_cls):
    r = reader_cls()
    assert r.gets() is False
    r.feed(b"*2\r\n$4\r\nECHO\r\n$5\r\nhel")
    assert r.gets() is False
    r.feed(b"lo\r")
    assert r.gets() is False
    r.feed(b"\n")
    assert r.gets() == [b"ECHO", b"hello"]
    assert r.gets() is False
    assert len(r) == 0


def test_binary_safe_bulk(reader_cls):
    args = [b"a\r\nb", b"\x00\x00", b"\r\n", b"*1\r\n$1\r\nx\r\n", bytes(range(256))]
    data = mb(*args)
    assert parse(reader_cls, data) == [args]
    assert parse_chunks(reader_cls, bytewise(data)) == ([args], None, 0)


def test_empty_bulk(reader_cls):
    assert parse(reader_cls, b"*2\r\n$0\r\n\r\n$1\r\nx\r\n") == [[b"", b"x"]]
    assert parse(reader_cls, mb(b"", b"")) == [[b"", b""]]


@pytest.mark.parametrize("size", [4095, 4096, 40_000, 200_000])
def test_large_bulk(reader_cls, size):
    body = bytes(i % 251 for i in range(size))
    data = mb(b"ADDJOB", b"q", body, b"0") + mb(b"PING")
    expected = [[b"ADDJOB", b"q", body, b"0"], [b"PING"]]
    assert parse(reader_cls, data) == expected
    chunks = [data[i : i + 1000] for i in range(0, len(data), 1000)]
    assert parse_chunks(reader_cls, chunks) == (expected, None, 0)


def test_many_elements(reader_cls):
    args = [b"%d" % i for i in range(5000)]
    assert parse(reader_cls, mb(*args) * 2) == [args, args]


def test_empty_and_null_multibulk_are_skipped(reader_cls):
    data = b"*0\r\n*-1\r\n*-5\r\n" + mb(b"PING") + b"*0\r\n"
    assert parse(reader_cls, data) == [[b"PING"]]
    assert parse_chunks(reader_cls, bytewise(data)) == ([[b"PING"]], None, 0)


def test_redis_leniency_on_terminators(reader_cls):
    # Redis skips the byte after a header's '\r' and the two bytes after a
    # bulk payload without looking at them.
    assert parse(reader_cls, b"*1\rX$1\r\na\r\n") == [[b"a"]]
    assert parse(reader_cls, b"*2\r\n$1\rZa\r\n$3\r\nabcXY*1\r\n$1\r\nb\r\n") == [
        [b"a", b"abc"],
        [b"b"],
    ]


def test_non_bulk_elements_are_rejected(reader_cls):
    # hiredis would happily parse all of these as replies.
    cases = {
        b"*1\r\n+OK\r\n": "+",
        b"*2\r\n$1\r\na\r\n:1\r\n": ":",
        b"*1\r\n-ERR x\r\n": "-",
        b"*1\r\n*1\r\n$1\r\na\r\n": "*",
        b"*1\r\n(123\r\n": "(",
        b"*1\r\n_\r\n": "_",
        b"*1\r\n#t\r\n": "#",
        b"*1\r\n,1.5\r\n": ",",
        b"*1\r\n%1\r\n+a\r\n+b\r\n": "%",
        b"*1\r\n~1\r\n+a\r\n": "~",
        b"*1\r\n=6\r\ntxt:ab\r\n": "=",
        b"*1\r\n>1\r\n+a\r\n": ">",
        b"*1\r\nx\r\n": "x",
        b"*1\r\n\r\n": " ",  # Redis turns CR/LF in error messages into spaces
        # Encoded lengths add up as if both were bulk strings: "=" is 4 bytes
        # longer than a bulk of its content, "+" with 10 bytes is 4 shorter.
        b"*2\r\n=6\r\ntxt:ab\r\n+abcdefghij\r\n": "=",
        b"*2\r\n$1\r\na\r\n+OK\r\n": "+",
    }
    for data, got in cases.items():
        assert error_of(reader_cls, data) == f"Protocol error: expected '$', got '{got}'", data


def test_expected_dollar_waits_for_the_whole_line(reader_cls):
    # Like Redis: the header line must be complete before it is looked at.
    r = reader_cls()
    r.feed(b"*1\r\n+OK")
    assert r.gets() is False
    r.feed(b"\r\n")
    with pytest.raises(ProtocolError, match=r"expected '\$', got '\+'"):
        r.gets()


def test_expected_dollar_non_ascii_byte_round_trips(reader_cls):
    msg = error_of(reader_cls, b"*1\r\n\xff\r\n")
    assert error("ERR " + msg) == b"-ERR Protocol error: expected '$', got '\xff'\r\n"


# ---------------------------------------------------------------------------
# Inline requests
# ---------------------------------------------------------------------------


def test_inline_basic(reader_cls):
    assert parse(reader_cls, b"PING\r\n") == [[b"PING"]]
    assert parse(reader_cls, b"PING\n") == [[b"PING"]]
    assert parse(reader_cls, b"  SET \t a   b  \r\n") == [[b"SET", b"a", b"b"]]
    assert parse(reader_cls, b"PING\nPING\r\nECHO x\n") == [[b"PING"], [b"PING"], [b"ECHO", b"x"]]


def test_inline_incomplete(reader_cls):
    r = reader_cls()
    r.feed(b"PIN")
    assert r.gets() is False
    r.feed(b"G\r")
    assert r.gets() is False
    r.feed(b"\n")
    assert r.gets() == [b"PING"]


def test_inline_quotes_and_escapes(reader_cls):
    line = (
        b'SET "a b" "\\n\\r\\t\\b\\a\\\\\\"" "\\x41\\x00\\xff" "\\xZZ\\q" '
        b"'it\\'s' 'no\\nescape' x\"y z\"\r\n"
    )
    assert parse(reader_cls, line) == [
        [
            b"SET",
            b"a b",
            b'\n\r\t\x08\x07\\"',
            b"A\x00\xff",
            b"xZZq",
            b"it's",
            b"no\\nescape",
            b"xy z",
        ]
    ]


def test_inline_empty_args_dropped(reader_cls):
    # Disque (like Redis < 4) drops empty inline arguments.
    assert parse(reader_cls, b'SET a ""\r\n') == [[b"SET", b"a"]]
    assert parse(reader_cls, b"'' \"\"\r\nPING\r\n") == [[b"PING"]]


def test_inline_empty_lines_skipped(reader_cls):
    data = b"\r\n\n   \r\n\t\nPING\r\n"
    assert parse(reader_cls, data) == [[b"PING"]]
    assert parse_chunks(reader_cls, bytewise(data)) == ([[b"PING"]], None, 0)


def test_inline_vertical_tab_and_nul(reader_cls):
    # \v and \f separate arguments only between tokens (C isspace), and a NUL
    # ends the line for sdssplitargs.
    assert parse(reader_cls, b"\x0bA\x0bB \x0cC\r\n") == [[b"A\x0bB", b"C"]]
    assert parse(reader_cls, b"SET a\x00b c\r\nPING\r\n") == [[b"SET", b"a"], [b"PING"]]


@pytest.mark.parametrize(
    "line",
    [b'SET "abc\r\n', b"SET 'abc\r\n", b'"foo"bar\r\n', b"'foo'bar\r\n", b'"a\x00b"\r\n'],
)
def test_inline_unbalanced_quotes(reader_cls, line):
    assert error_of(reader_cls, line) == "Protocol error: unbalanced quotes in request"


def test_mixed_inline_and_multibulk(reader_cls):
    data = (
        mb(b"HELLO")
        + b"PING\r\n"
        + mb(b"ADDJOB", b"q", b"x y", b"0")
        + mb(b"A")
        + b'ECHO "x y"\n'
        + b"*0\r\n"
        + mb(b"B")
        + b"\r\n"
        + mb(b"C")
    )
    expected = [
        [b"HELLO"],
        [b"PING"],
        [b"ADDJOB", b"q", b"x y", b"0"],
        [b"A"],
        [b"ECHO", b"x y"],
        [b"B"],
        [b"C"],
    ]
    assert parse(reader_cls, data) == expected
    assert parse_chunks(reader_cls, bytewise(data)) == (expected, None, 0)
    for size in (2, 3, 5, 11):
        chunks = [data[i : i + size] for i in range(0, len(data), size)]
        assert parse_chunks(reader_cls, chunks) == (expected, None, 0)


def test_alternating_inline_and_multibulk_pipeline(reader_cls):
    data = (b"PING\r\n" + mb(b"ECHO", b"x")) * 2000
    assert parse(reader_cls, data) == [[b"PING"], [b"ECHO", b"x"]] * 2000


# ---------------------------------------------------------------------------
# Protocol errors and limits
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [b"*x\r\n", b"*\r\n", b"*01\r\n", b"*+1\r\n", b"*1 \r\n", b"*-0\r\n", b"*1048577\r\n"],
)
def test_invalid_multibulk_length(reader_cls, data):
    assert error_of(reader_cls, data) == "Protocol error: invalid multibulk length"


def test_multibulk_length_out_of_long_long_range(reader_cls):
    for data in (b"*-9223372036854775809\r\n", b"*9223372036854775808\r\n"):
        assert error_of(reader_cls, data) == "Protocol error: invalid multibulk length"
    # In range but negative: no command, like "*-1".
    assert parse(reader_cls, b"*-9223372036854775808\r\n" + mb(b"X")) == [[b"X"]]


@pytest.mark.parametrize(
    "element",
    [b"$x\r\n", b"$\r\n", b"$-1\r\n", b"$-2\r\n", b"$01\r\n", b"$+1\r\n", b"$1 \r\n", b"$-0\r\n"],
)
def test_invalid_bulk_length(reader_cls, element):
    assert error_of(reader_cls, b"*1\r\n" + element) == "Protocol error: invalid bulk length"
    msg = error_of(reader_cls, b"*2\r\n$1\r\na\r\n" + element)
    assert msg == "Protocol error: invalid bulk length"


def test_huge_bulk_length_rejected_before_data(reader_cls):
    r = reader_cls()
    r.feed(b"*2\r\n$6\r\nADDJOB\r\n$536870913\r\n")  # 512MB + 1, no payload sent
    with pytest.raises(ProtocolError, match="invalid bulk length"):
        r.gets()
    # Exactly at the limit is accepted: the reader waits for the payload.
    r = reader_cls()
    r.feed(b"*1\r\n$536870912\r\nabc")
    assert r.gets() is False
    # A configured limit applies the same way, and to complete requests too.
    assert error_of(reader_cls, b"*1\r\n$11\r\n", max_bulk_len=10).endswith("invalid bulk length")
    data = mb(b"x" * 11)
    assert error_of(reader_cls, data, max_bulk_len=10).endswith("invalid bulk length")
    assert parse(reader_cls, mb(b"x" * 10), max_bulk_len=10) == [[b"x" * 10]]
    data = mb(b"y" * 5000)
    assert error_of(reader_cls, data, max_bulk_len=4999).endswith("invalid bulk length")


def test_huge_multibulk_count_rejected(reader_cls):
    r = reader_cls()
    r.feed(b"*1048577\r\n$1\r\n")
    with pytest.raises(ProtocolError, match="invalid multibulk length"):
        r.gets()
    r = reader_cls()
    r.feed(b"*1048576\r\n$1\r\n")
    assert r.gets() is False
    # Configured limit, complete request included.
    assert parse(reader_cls, mb(b"a", b"b"), max_multibulk=2) == [[b"a", b"b"]]
    msg = error_of(reader_cls, mb(b"a", b"b", b"c"), max_multibulk=2)
    assert msg == "Protocol error: invalid multibulk length"


def test_too_big_inline_request(reader_cls):
    r = reader_cls()
    r.feed(b"A" * KB64)
    assert r.gets() is False
    r.feed(b"A")
    with pytest.raises(ProtocolError) as info:
        r.gets()
    assert info.value.message == "Protocol error: too big inline request"
    # Exactly the limit, then the newline: accepted.
    assert parse_chunks(reader_cls, [b"A" * KB64, b"\nPING\n"]) == (
        [[b"A" * KB64], [b"PING"]],
        None,
        0,
    )
    # Split-independent: an over-long line is rejected even in one piece.
    assert error_of(reader_cls, b"A" * (KB64 + 1) + b"\n").endswith("too big inline request")
    assert error_of(reader_cls, b"PING\r\n", max_inline=3).endswith("too big inline request")


def test_too_big_mbulk_count_string(reader_cls):
    r = reader_cls()
    r.feed(b"*" + b"1" * (KB64 - 1))
    assert r.gets() is False
    r.feed(b"1")
    with pytest.raises(ProtocolError) as info:
        r.gets()
    assert info.value.message == "Protocol error: too big mbulk count string"
    msg = error_of(reader_cls, b"*" + b"1" * KB64 + b"\r\n")
    assert msg == "Protocol error: too big mbulk count string"


def test_too_big_bulk_count_string(reader_cls):
    msg = error_of(reader_cls, b"*1\r\n$" + b"1" * KB64)
    assert msg == "Protocol error: too big bulk count string"
    msg = error_of(reader_cls, b"*2\r\n$1\r\na\r\n" + b"x" * (KB64 + 1))
    assert msg == "Protocol error: too big bulk count string"
    # Just below the limit: still waiting.
    r = reader_cls()
    r.feed(b"*1\r\n$" + b"1" * (KB64 - 1))
    assert r.gets() is False


def test_small_line_limit(reader_cls):
    # max_inline also bounds header lines (PROTO_INLINE_MAX_SIZE in Redis).
    assert parse(reader_cls, mb(b"abcdefghi"), max_inline=2) == [[b"abcdefghi"]]
    msg = error_of(reader_cls, mb(b"abcdefghij"), max_inline=2)
    assert msg == "Protocol error: too big bulk count string"
    msg = error_of(reader_cls, b"*10\r\n", max_inline=2)
    assert msg == "Protocol error: too big mbulk count string"


def test_query_buffer_limit(reader_cls):
    assert issubclass(QueryBufferLimitError, ProtocolError)
    r = reader_cls(query_buffer_limit=100)
    # Complete requests are consumed, so they never accumulate.
    for _ in range(50):
        r.feed(mb(b"ECHO", b"x" * 40))
        assert drain(r) == [[b"ECHO", b"x" * 40]]
    r.feed(b"*2\r\n$4\r\nECHO\r\n$200\r\n" + b"x" * 50)
    assert r.gets() is False
    # Parsed elements leave the buffer (as in Redis): 50 bytes pending.
    assert len(r) == 50
    r.feed(b"x" * 50)
    assert len(r) == 100
    with pytest.raises(QueryBufferLimitError):
        r.feed(b"x")
    with pytest.raises(QueryBufferLimitError):
        r.gets()


def test_query_buffer_limit_single_feed(reader_cls):
    r = reader_cls(query_buffer_limit=10)
    with pytest.raises(QueryBufferLimitError):
        r.feed(b"x" * 11)


def test_errors_are_sticky(reader_cls):
    r = reader_cls()
    r.feed(mb(b"PING") + b"*x\r\n" + mb(b"PING"))
    assert r.gets() == [b"PING"]
    with pytest.raises(ProtocolError) as first:
        r.gets()
    with pytest.raises(ProtocolError) as again:
        r.gets()
    # the same error: same class and message (the C reader raises a new instance, so
    # that it holds no traceback, see test_c_reader_error_does_not_pin_its_connection)
    assert type(again.value) is type(first.value)
    assert again.value.message == first.value.message == "Protocol error: invalid multibulk length"
    with pytest.raises(ProtocolError) as on_feed:
        r.feed(mb(b"PING"))
    assert on_feed.value.message == first.value.message


def test_commands_before_error_are_returned(reader_cls):
    cmds, msg, _ = parse_chunks(reader_cls, [mb(b"A") + b"B\r\n" + mb(b"C") + b"*1\r\n$-1\r\n"])
    assert cmds == [[b"A"], [b"B"], [b"C"]]
    assert msg == "Protocol error: invalid bulk length"


# ---------------------------------------------------------------------------
# Reader construction
# ---------------------------------------------------------------------------


def test_make_reader():
    assert type(make_reader(pure=True)) is PyRequestReader
    assert type(make_reader()) is RequestReader
    if HAVE_CREADER:
        assert RequestReader is CRequestReader
    elif HAVE_HIREDIS:
        assert RequestReader is HiredisRequestReader
    r = make_reader(pure=True, max_bulk_len=3)
    r.feed(b"*1\r\n$4\r\n")
    with pytest.raises(ProtocolError):
        r.gets()


@pytest.mark.skipif(os.environ.get("DISQUEPY_NO_CEXT") == "1", reason="built without C")
def test_c_reader_is_built():
    # `make` builds the extension; a silent fallback would lose the server its speed
    assert HAVE_CREADER, "disquepy.codec._creader is missing: pip install -e . with a C compiler"


def test_c_reader_limits_and_memory():
    if not HAVE_CREADER:
        pytest.skip("no C reader")
    r = CRequestReader(query_buffer_limit=10)
    r.feed(b"*1\r\n$4")
    assert len(r) == 6
    with pytest.raises(QueryBufferLimitError):
        r.feed(b"\r\nPING\r\n")
    with pytest.raises(QueryBufferLimitError):  # and for good
        r.gets()
    # a big request is released once parsed, and the reader goes on
    r = CRequestReader()
    big = b"x" * 100_000
    r.feed(mb(b"ADDJOB", b"q", big, b"0") + mb(b"PING"))
    assert r.gets() == [b"ADDJOB", b"q", big, b"0"]
    assert r.gets() == [b"PING"]
    assert r.gets() is False and len(r) == 0
    r.feed(memoryview(bytearray(mb(b"PING"))))  # any buffer
    assert r.gets() == [b"PING"]
    with pytest.raises(TypeError):
        r.feed("PING\r\n")


def test_c_reader_error_does_not_pin_its_connection():
    # a connection holds its reader; the error a bad request raises carries a
    # traceback whose frames hold the connection: kept by the reader (which the GC
    # cannot see into), it would keep every such connection alive
    if not HAVE_CREADER:
        pytest.skip("no C reader")

    class Conn:
        def __init__(self) -> None:
            self.reader = CRequestReader()

        def process(self) -> str:
            try:
                self.reader.gets()
            except ProtocolError as e:
                return e.message
            return ""

    conn = Conn()
    conn.reader.feed(b"*1\r\n$x\r\n")
    assert conn.process() == "Protocol error: invalid bulk length"
    assert conn.process() == "Protocol error: invalid bulk length"  # for good
    ref = weakref.ref(conn)
    del conn
    gc.collect()
    assert ref() is None


@pytest.mark.skipif(not HAVE_HIREDIS, reason="hiredis not installed")
def test_hiredis_fast_path_is_used():
    # White-box: a pipeline of ordinary requests must not fall back to the
    # pure parser, or the hiredis reader would be pointless.
    r = HiredisRequestReader()
    r.feed(b"".join(mb(b"ADDJOB", b"q", b"%d" % i, b"0") for i in range(100)))
    r.gets()
    assert r._hr is not None
    assert len(drain(r)) == 99
    assert r._hr is not None


def test_module_is_pure():
    tree = ast.parse(Path(resp.__file__).with_name("resp.py").read_text())  # .so if compiled
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    forbidden = {"asyncio", "socket", "time", "random", "threading", "selectors", "os"}
    assert not imported & forbidden


# ---------------------------------------------------------------------------
# split_args
# ---------------------------------------------------------------------------


def test_split_args():
    assert split_args(b"") == []
    assert split_args(b"  a  b ") == [b"a", b"b"]
    assert split_args(b"\"a\" 'b'") == [b"a", b"b"]
    assert split_args(b'""') == [b""]
    assert split_args(b'"\\x4a\\x4B"') == [b"JK"]
    assert split_args(b'"\\x4"') == [b"x4"]
    assert split_args(b'"a"\t"b"') == [b"a", b"b"]
    assert split_args(b'"a"\x0b') == [b"a"]
    assert split_args(b'"a"b') is None
    assert split_args(b'"a') is None
    assert split_args(b'"a\\"') is None
    assert split_args(b"'a") is None
    assert split_args(b"'a\\''") == [b"a'"]
    assert split_args(b"'a\\b'") == [b"a\\b"]


def _quote(arg: bytes) -> bytes:
    return b'"' + b"".join(b"\\x%02x" % c for c in arg) + b'"'


@given(st.lists(st.binary(max_size=20), max_size=6))
def test_split_args_quoted_roundtrip(args):
    assert split_args(b" ".join(_quote(a) for a in args)) == args


# ---------------------------------------------------------------------------
# Property tests
# ---------------------------------------------------------------------------

_argv = st.lists(st.binary(max_size=40), min_size=1, max_size=6)
_token = st.binary(min_size=1, max_size=8).filter(
    lambda b: not any(c in b" \t\r\n\x0b\x0c\x00\"'*" for c in b) and b[:1] != b"*"
)


@st.composite
def _split_points(draw, data: bytes) -> list[bytes]:
    cuts = sorted(draw(st.sets(st.integers(0, len(data)), max_size=12)))
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_argv, max_size=12), st.data())
def test_random_multibulk_roundtrip(commands, data):
    stream = b"".join(mb(*argv) for argv in commands)
    chunks = data.draw(_split_points(stream))
    for cls in READERS:
        assert parse_chunks(cls, chunks) == (commands, None, 0)
        assert parse(cls, stream) == commands


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.booleans(), st.lists(_token, min_size=1, max_size=4)), max_size=10),
    st.data(),
)
def test_random_mixed_roundtrip(commands, data):
    stream = b"".join(
        b" ".join(argv) + b"\r\n" if inline else mb(*argv) for inline, argv in commands
    )
    expected = [argv for _, argv in commands]
    chunks = data.draw(_split_points(stream))
    for cls in READERS:
        assert parse_chunks(cls, chunks) == (expected, None, 0)


# Fragments that make random streams look like (broken) RESP often enough.
_fragment = st.one_of(
    st.binary(max_size=6),
    st.sampled_from(
        [
            b"*",
            b"$",
            b"\r\n",
            b"\r",
            b"\n",
            b"0",
            b"1",
            b"2",
            b"3",
            b"-1",
            b"10",
            b"*1\r\n",
            b"*2\r\n",
            b"*3\r\n",
            b"$1\r\n",
            b"$3\r\n",
            b"$-1\r\n",
            b"$x\r\n",
            b"$2\r\nab\r\n",
            b"$0\r\n\r\n",
            b"$1\r\na\r\n",
            b"+OK\r\n",
            b":1\r\n",
            b"=6\r\ntxt:ab\r\n",
            b"(12\r\n",
            b"*0\r\n",
            b"*-1\r\n",
            b"PING\r\n",
            b" ",
            b'"',
            b"'",
            b"\\",
            b"\\x4",
            b"\x00",
            b"\x0b",
        ]
    ),
)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(st.binary(max_size=200), st.lists(_fragment, max_size=40).map(b"".join)), st.data()
)
def test_random_bytes_never_crash_and_readers_agree(stream, data):
    chunks = data.draw(_split_points(stream))
    limits = data.draw(
        st.sampled_from(
            [
                {},
                {"max_bulk_len": 5, "max_multibulk": 3},  # hiredis path must enforce these
                {"max_inline": 8, "max_bulk_len": 5, "max_multibulk": 3},
            ]
        )
    )
    outcomes = []
    for cls in READERS:
        # Only ProtocolError may escape (anything else fails the test).
        outcomes.append(parse_chunks(cls, chunks, **limits))
        outcomes.append(parse_chunks(cls, [stream], **limits))
        outcomes.append(parse_chunks(cls, bytewise(stream), **limits))
    # Both readers, and every way of splitting the stream, agree on the
    # commands, the error (if any) and the bytes left pending.
    assert all(o == outcomes[0] for o in outcomes), outcomes


# ---------------------------------------------------------------------------
# Reply encoding
# ---------------------------------------------------------------------------


def test_constants():
    assert OK == b"+OK\r\n"
    assert PONG == b"+PONG\r\n"
    assert NULL_BULK2 == b"$-1\r\n"
    assert NULL_ARRAY2 == b"*-1\r\n"
    assert NULL3 == b"_\r\n"
    assert EMPTY_ARRAY == b"*0\r\n"
    assert ZERO == b":0\r\n"
    assert ONE == b":1\r\n"


def test_simple():
    assert simple(b"OK") == b"+OK\r\n"
    assert simple("QUEUED") == b"+QUEUED\r\n"
    assert simple("") == b"+\r\n"
    assert simple("a\r\nb") == b"+a  b\r\n"  # never break the protocol


def test_error():
    assert error("ERR unknown command 'x'") == b"-ERR unknown command 'x'\r\n"
    assert (
        error(b"NOJOB Job not known in the context of this node.")
        == b"-NOJOB Job not known in the context of this node.\r\n"
    )
    assert error("ERR bad\nline") == b"-ERR bad line\r\n"
    assert error("ERR caf\u00e9") == b"-ERR caf\xc3\xa9\r\n"


def test_integer():
    assert integer(0) == b":0\r\n" == ZERO
    assert integer(1) == ONE
    assert integer(-1) == b":-1\r\n"
    assert integer(1023) == b":1023\r\n"
    assert integer(1024) == b":1024\r\n"
    assert integer(2**63 - 1) == b":9223372036854775807\r\n"
    assert integer(-(2**63)) == b":-9223372036854775808\r\n"


def test_bulk():
    assert bulk(b"abc") == b"$3\r\nabc\r\n"
    assert bulk(b"") == b"$0\r\n\r\n"
    assert bulk("h\u00e9") == b"$3\r\nh\xc3\xa9\r\n"
    assert bulk(b"a\r\n\x00") == b"$4\r\na\r\n\x00\r\n"
    assert bulk(None) == b"$-1\r\n"
    big = b"x" * 100_000
    assert bulk(big) == b"$100000\r\n" + big + b"\r\n"


def test_nulls():
    assert null_bulk(2) == b"$-1\r\n"
    assert null_bulk(3) == b"_\r\n"
    assert null_array(2) == b"*-1\r\n"
    assert null_array(3) == b"_\r\n"


def test_array():
    assert array([]) == b"*0\r\n"
    assert array([OK, integer(5), bulk(b"x")]) == b"*3\r\n+OK\r\n:5\r\n$1\r\nx\r\n"
    assert array([array([ONE]), NULL_BULK2]) == b"*2\r\n*1\r\n:1\r\n$-1\r\n"


def test_bulk_array():
    assert bulk_array([]) == b"*0\r\n"
    assert bulk_array([b"a", "bc", b""]) == b"*3\r\n$1\r\na\r\n$2\r\nbc\r\n$0\r\n\r\n"
    assert bulk_array([b"a", None]) == b"*2\r\n$1\r\na\r\n$-1\r\n"
    assert bulk_array([b"a", None], proto=3) == b"*2\r\n$1\r\na\r\n_\r\n"
    assert bulk_array(x for x in (b"q1", b"q2")) == b"*2\r\n$2\r\nq1\r\n$2\r\nq2\r\n"
    assert bulk_array((b"x",)) == b"*1\r\n$1\r\nx\r\n"


def test_bulk_array_roundtrips_through_reader(reader_cls):
    args = [b"ADDJOB", b"queue", b"\r\n\x00body", b"0"]
    assert parse(reader_cls, bulk_array(args)) == [args]


class _Color(enum.IntEnum):
    RED = 7


@pytest.mark.parametrize(
    ("value", "resp2", "resp3"),
    [
        (None, b"$-1\r\n", b"_\r\n"),
        (True, b":1\r\n", b"#t\r\n"),
        (False, b":0\r\n", b"#f\r\n"),
        (0, b":0\r\n", b":0\r\n"),
        (-42, b":-42\r\n", b":-42\r\n"),
        (10**18, b":1000000000000000000\r\n", b":1000000000000000000\r\n"),
        (_Color.RED, b":7\r\n", b":7\r\n"),
        (1.5, b"$3\r\n1.5\r\n", b",1.5\r\n"),
        (-0.25, b"$5\r\n-0.25\r\n", b",-0.25\r\n"),
        (1e20, b"$5\r\n1e+20\r\n", b",1e+20\r\n"),
        (math.inf, b"$3\r\ninf\r\n", b",inf\r\n"),
        (-math.inf, b"$4\r\n-inf\r\n", b",-inf\r\n"),
        (math.nan, b"$3\r\nnan\r\n", b",nan\r\n"),
        (b"abc", b"$3\r\nabc\r\n", b"$3\r\nabc\r\n"),
        (b"", b"$0\r\n\r\n", b"$0\r\n\r\n"),
        ("h\u00e9", b"$3\r\nh\xc3\xa9\r\n", b"$3\r\nh\xc3\xa9\r\n"),
        (bytearray(b"ab"), b"$2\r\nab\r\n", b"$2\r\nab\r\n"),
        (memoryview(b"ab"), b"$2\r\nab\r\n", b"$2\r\nab\r\n"),
        (Status(b"OK"), b"+OK\r\n", b"+OK\r\n"),
        (Status("QUEUED"), b"+QUEUED\r\n", b"+QUEUED\r\n"),
        (Err("ERR boom"), b"-ERR boom\r\n", b"-ERR boom\r\n"),
        (Err(b"NOJOB x"), b"-NOJOB x\r\n", b"-NOJOB x\r\n"),
        ([], b"*0\r\n", b"*0\r\n"),
        ((), b"*0\r\n", b"*0\r\n"),
        (
            [b"a", 1, None, [Status("OK"), []]],
            b"*4\r\n$1\r\na\r\n:1\r\n$-1\r\n*2\r\n+OK\r\n*0\r\n",
            b"*4\r\n$1\r\na\r\n:1\r\n_\r\n*2\r\n+OK\r\n*0\r\n",
        ),
        ((b"x", True), b"*2\r\n$1\r\nx\r\n:1\r\n", b"*2\r\n$1\r\nx\r\n#t\r\n"),
        ({}, b"*0\r\n", b"%0\r\n"),
        (
            {b"id": b"D-1", "ttl": 10, "nack": None},
            b"*6\r\n$2\r\nid\r\n$3\r\nD-1\r\n$3\r\nttl\r\n:10\r\n$4\r\nnack\r\n$-1\r\n",
            b"%3\r\n$2\r\nid\r\n$3\r\nD-1\r\n$3\r\nttl\r\n:10\r\n$4\r\nnack\r\n_\r\n",
        ),
        (
            collections.OrderedDict([(b"k", [1.5])]),
            b"*2\r\n$1\r\nk\r\n*1\r\n$3\r\n1.5\r\n",
            b"%1\r\n$1\r\nk\r\n*1\r\n,1.5\r\n",
        ),
        ({b"only"}, b"*1\r\n$4\r\nonly\r\n", b"~1\r\n$4\r\nonly\r\n"),
        (frozenset(), b"*0\r\n", b"~0\r\n"),
    ],
)
def test_encode(value, resp2, resp3):
    assert encode(value) == resp2
    assert encode(value, 2) == resp2
    assert encode(value, proto=3) == resp3


def test_encode_set_order_independent():
    got = encode({b"a", b"b"}, 3)
    assert got in (b"~2\r\n$1\r\na\r\n$1\r\nb\r\n", b"~2\r\n$1\r\nb\r\n$1\r\na\r\n")


def test_encode_unknown_type():
    with pytest.raises(TypeError):
        encode(object())
    with pytest.raises(TypeError):
        encode([1, object()], 3)


def test_status_and_err_are_bytes():
    assert Status("OK") == b"OK"
    assert isinstance(Err("ERR x"), bytes)
    assert simple(Status("OK")) == OK
    assert error(Err("ERR x")) == b"-ERR x\r\n"


@pytest.mark.parametrize("n", [0, 1, 9, 10, 99, 100, 255, 256, 1000, 70_000])
def test_a_bulk_reply_says_its_length(n):
    """Short replies take their header from a table, longer ones format it: the same
    bytes either way."""
    body = bytes(range(256)) * (n // 256) + bytes(range(n % 256))
    assert resp.bulk(body) == b"$" + str(n).encode() + b"\r\n" + body + b"\r\n"


def test_a_bulk_reply_of_text_is_its_utf8_and_none_is_the_null_bulk():
    assert resp.bulk("é") == b"$2\r\n\xc3\xa9\r\n"
    assert resp.bulk(None) == b"$-1\r\n"
