"""QADD's and QGET's seconds and the event ID form, in process: the whole-seconds fast
path and the decimal path agree, and every bound holds on both."""

from __future__ import annotations

import pytest

from disquepy.core import errors
from disquepy.core.commands.groups import parse_seconds
from disquepy.core.errors import ReplyError
from disquepy.core.ids import event_id, event_id_suffix, is_valid_event_id


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
