"""A small RESP2/RESP3 reply parser: the one the simulated clients and the in-process
test harnesses (tests/unit/nodeharness.py) read replies with."""

from __future__ import annotations

from typing import TypeAlias


class ErrorReply(str):
    """A ``-ERR ...`` reply (a str subclass, so it prints as the message)."""


# a decoded reply: a simple string or bulk is bytes, a null None, an array (or a map,
# flattened) a list
Reply: TypeAlias = "bytes | int | None | ErrorReply | list[Reply]"


class ReplyShapeError(ValueError):
    """A reply of another shape than the command's (an array where a bulk was due...)."""


def array(value: Reply) -> list[Reply]:
    if not isinstance(value, list):
        raise ReplyShapeError(f"expected an array reply, got {value!r}")
    return value


def bulk(value: Reply) -> bytes:
    if not isinstance(value, bytes):
        raise ReplyShapeError(f"expected a bulk reply, got {value!r}")
    return value


def decode(data: bytes) -> Reply:
    value, pos = _parse(data, 0)
    if pos != len(data):
        raise ValueError(f"trailing bytes in reply: {data[pos:]!r}")
    return value


def _parse(b: bytes, i: int) -> tuple[Reply, int]:
    t = b[i]
    end = b.index(b"\r\n", i)
    line = b[i + 1 : end]
    i = end + 2
    if t == 43:  # +
        return line, i
    if t == 45:  # -
        return ErrorReply(line.decode("utf-8", "replace")), i
    if t == 58:  # :
        return int(line), i
    if t == 95:  # _
        return None, i
    if t == 36:  # $
        n = int(line)
        if n < 0:
            return None, i
        return b[i : i + n], i + n + 2
    if t == 42 or t == 37:  # * %
        n = int(line)
        if n < 0:
            return None, i
        items: list[Reply] = []
        for _ in range(n * (2 if t == 37 else 1)):
            v, i = _parse(b, i)
            items.append(v)
        return items, i
    raise ValueError(f"bad reply type {chr(t)!r} in {b!r}")
