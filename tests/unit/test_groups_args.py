"""QADD's and QGET's seconds and the event ID form, in process: the whole-seconds fast
path and the decimal path agree, and every bound holds on both."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from disquepy.codec import resp
from disquepy.core import errors
from disquepy.core.commands.groups import parse_seconds
from disquepy.core.errors import ReplyError
from disquepy.core.ids import event_id, event_id_reply, event_id_suffix, is_valid_event_id


@pytest.mark.parametrize("text, ms", [
    (b"1", 1000), (b"0", 0), (b"3600", 3_600_000), (b"0010", 10_000),
    (b"0.25", 250), (b"1.0", 1000), (b".5", 500), (b"2.", 2000),
    (b"315360000", 315_360_000_000),  # ten years: the limit itself
])
def test_seconds_in_ms(text: bytes, ms: int) -> None:
    assert parse_seconds(text, errors.EXPIRE_RANGE) == ms


@pytest.mark.parametrize("text", [
    b"", b".", b"-1", b"+1", b"1e3", b"1.2.3", b"abc", b" 1", b"1 ", b"\xd9\xa1",
    b"315360001",  # past ten years
    b"9" * 18, b"9" * 19, b"9" * 40,  # too large, on either path
])
def test_bad_seconds_are_refused(text: bytes) -> None:
    with pytest.raises(ReplyError):
        parse_seconds(text, errors.EXPIRE_RANGE)


def test_an_event_id_is_ctime_in_hex_and_the_node() -> None:
    suffix = event_id_suffix("abcdef0123" * 4)
    assert event_id(0x187A3B4C5D6E7F80, suffix) == b"187a3b4c5d6e7f80-abcdef01"
    assert event_id(5, suffix) == b"0000000000000005-abcdef01"
    assert event_id(1 << 64 | 7, suffix) == b"0000000000000007-abcdef01"  # 64 bits kept
    assert is_valid_event_id(event_id(12345, suffix))


@given(st.integers(min_value=-(1 << 70), max_value=1 << 70))
def test_an_event_id_and_its_reply_are_the_time_in_hex(t: int) -> None:
    """event_id spreads the time's nibbles into ASCII with integer arithmetic: the
    same text as Python's own hex formatting, for any time, a peer's bad ones too;
    QADD's reply is that ID as a bulk string."""
    suffix = event_id_suffix("0123456789" * 4)
    eid = event_id(t, suffix)
    assert eid == b"%016x" % (t & (1 << 64) - 1) + suffix
    assert event_id_reply(t, suffix) == resp.bulk(eid)
    assert is_valid_event_id(eid)


def test_an_event_id_reply_with_a_suffix_of_another_length_is_still_a_bulk() -> None:
    assert event_id_reply(255, b"-ab") == b"$19\r\n00000000000000ff-ab\r\n"
