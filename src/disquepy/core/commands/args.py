"""Argument parsing shared by commands: integers, timeouts, job ID lists."""

from __future__ import annotations

from .. import errors
from ..errors import ReplyError
from ..ids import is_valid_job_id

_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1
_DIGITS = frozenset(b"0123456789")


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


def job_ids(argv: list, start: int = 1) -> list:
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
