"""Redis 7's limits on requests from a client that must AUTH first (CVE-2021-32675),
in every request reader: more than 10 arguments, or an argument over 16 KB, is a
protocol error with Redis's messages; AUTH lifts them for the requests parsed after."""

from __future__ import annotations

import pytest
from test_resp import READERS

from disquepy.codec.resp import UNAUTH_MAX_BULK, ProtocolError

MBULK = "Protocol error: unauthenticated multibulk length"
BULK = "Protocol error: unauthenticated bulk length"


def request(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in args)


@pytest.fixture(params=READERS, ids=lambda c: c.__name__)
def reader(request):
    r = request.param()
    r.set_unauthenticated(True)
    return r


def error(r, data: bytes) -> str:
    with pytest.raises(ProtocolError) as e:
        r.feed(data)
        while r.gets() is not False:
            pass
    return e.value.message


@pytest.mark.parametrize("step", [1, 5, 1 << 20])
def test_within_the_limits_before_auth(reader, step):
    data = request(b"AUTH", b"x" * UNAUTH_MAX_BULK) + request(*[b"a"] * 10)
    got = []
    for i in range(0, len(data), step):
        reader.feed(data[i:i + step])
        while (argv := reader.gets()) is not False:
            got.append(argv)
    assert got == [[b"AUTH", b"x" * UNAUTH_MAX_BULK], [b"a"] * 10]


def test_past_the_limits_before_auth(reader):
    assert error(reader, b"*11\r\n") == MBULK  # from the header alone
    r = type(reader)()
    r.set_unauthenticated(True)
    assert error(r, b"*2\r\n$4\r\nAUTH\r\n$%d\r\n" % (UNAUTH_MAX_BULK + 1)) == BULK
    r = type(reader)()
    r.set_unauthenticated(True)  # a whole big request at once (the hiredis fast path)
    assert error(r, request(b"AUTH", b"x" * (UNAUTH_MAX_BULK + 1))) == BULK
    r = type(reader)()
    r.set_unauthenticated(True)
    assert error(r, request(*[b"a"] * 11)) == MBULK


def test_invalid_lengths_keep_their_own_error(reader):
    assert error(reader, b"*-x\r\n") == "Protocol error: invalid multibulk length"
    r = type(reader)(max_bulk_len=1 << 20)
    r.set_unauthenticated(True)
    assert error(r, b"*1\r\n$%d\r\n" % ((1 << 20) + 1)) == "Protocol error: invalid bulk length"


def test_lifted_for_the_requests_after(reader):
    big = request(b"ADDJOB", b"q", b"x" * 100_000, b"0", *[b"a"] * 20)
    reader.feed(request(b"AUTH", b"pw") + big)
    assert reader.gets() == [b"AUTH", b"pw"]
    reader.set_unauthenticated(False)  # what the server does once AUTH succeeded
    assert len(reader.gets()) == 24
    reader.set_unauthenticated(True)  # logged out again: limits again
    assert error(reader, big) == MBULK  # its 24 arguments, from the header
