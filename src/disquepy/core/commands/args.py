"""Argument parsing shared by commands: integers, timeouts, job ID lists."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from .. import errors
from ..errors import ReplyError
from ..ids import is_valid_job_id

_I64_MIN: Final = -(1 << 63)
_I64_MAX: Final = (1 << 63) - 1
_DIGITS: Final = frozenset(b"0123456789")


def to_int(b: bytes) -> int | None:
    """Parse a signed 64-bit decimal like Disque (strtoll): an optional sign then digits;
    no spaces or trailing junk. As in Disque, an empty string reads as 0."""
    if not b:
        return 0
    if b.isdigit() or len(b) > 1 and b[0] in b"+-" and b[1:].isdigit():
        v = int(b)
    else:
        return None
    return v if _I64_MIN <= v <= _I64_MAX else None


def parse_int(b: bytes, err: str = errors.NOT_INTEGER) -> int:
    v = to_int(b)
    if v is None:
        raise ReplyError(err)
    return v


def parse_timeout(b: bytes) -> int:
    """A non-negative timeout in ms (0 = forever)."""
    v = to_int(b)
    if v is None:
        raise ReplyError(errors.TIMEOUT_INVALID)
    if v < 0:
        raise ReplyError(errors.TIMEOUT_NEGATIVE)
    return v


def job_ids(argv: list[bytes], start: int = 1) -> list[bytes]:
    """The job IDs in argv[start:]; any malformed one fails the whole command first."""
    ids = argv[start:]
    for jid in ids:
        if not is_valid_job_id(jid):
            raise ReplyError(errors.BADID)
    return ids


def parse_cursor(b: bytes, seen: bool) -> int:
    """A scan cursor: any token that is not an option must be an unsigned number."""
    if seen:
        raise ReplyError(errors.SYNTAX)
    if not b.isdigit():
        raise ReplyError(errors.BAD_CURSOR)
    return int(b)


def parse_scan(argv: list[bytes], value_options: dict[bytes, Callable[[bytes], None]]
               ) -> tuple[int, int, bool]:
    """The grammar QSCAN and JSCAN share: ``[cursor] [COUNT n] [BUSYLOOP]`` plus the
    command's own options, each taking one value and handled by
    ``value_options[name](value)``. The cursor may stand anywhere: the first word that
    is no option must be an unsigned number. Returns (cursor, count, busyloop)."""
    cursor, count, busyloop, cursor_seen = 0, 100, False, False
    n = len(argv)
    j = 1
    while j < n:
        opt = argv[j].lower()
        if opt == b"busyloop":
            busyloop = True
        elif j + 1 < n and (opt == b"count" or opt in value_options):
            if opt == b"count":
                count = parse_int(argv[j + 1])
                if count < 1:
                    raise ReplyError(errors.OUT_OF_RANGE)
            else:
                value_options[opt](argv[j + 1])
            j += 1
        else:
            cursor = parse_cursor(argv[j], cursor_seen)
            cursor_seen = True
        j += 1
    return cursor, count, busyloop
