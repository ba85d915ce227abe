"""Replies as redis-cli shows them, and a RESP2 parser that keeps what the display needs.

redis-py's parser returns status replies (``+OK``) and bulk strings alike as ``bytes`` and
strips the code from errors (``-ERR x`` becomes ``ResponseError("x")``); the command line
shows ``OK`` but ``"OK"``, and the full error text, so it parses with :class:`ReplyParser`.
"""

from __future__ import annotations

from typing import Any

from redis._parsers.resp2 import _RESP2Parser
from redis._parsers.socket import SERVER_CLOSED_CONNECTION_ERROR
from redis.exceptions import ConnectionError, InvalidResponse, ResponseError
from redis.utils import SENTINEL

from ..codec.resp import quoted


class Status(bytes):
    """A status reply (``+OK``): shown without quotes."""


class ServerError(ResponseError):
    """An error reply, with the server's text unchanged (``ERR ...``, ``NOJOB ...``)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class ReplyParser(_RESP2Parser):
    """redis-py's RESP2 parser, keeping status replies and error texts apart."""

    @classmethod
    def parse_error(cls, response: str) -> ServerError:
        return ServerError(response)

    # the reply's type depends on the command (Status, bytes, int, None, ServerError or
    # a list of those): Any; ``timeout`` is redis-py's (a number, None or its SENTINEL)
    def _read_response(self, disable_decoding: bool = False, timeout: Any = SENTINEL) -> Any:
        buffer = self._buffer
        assert buffer is not None  # set by on_connect, before any reply is read
        line = buffer.readline(timeout=timeout)
        if not line:
            raise ConnectionError(SERVER_CLOSED_CONNECTION_ERROR)
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return Status(rest)
        if kind == b"-":
            return self.parse_error(rest.decode("utf-8", errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else buffer.read(n, timeout=timeout)
        if kind == b"*":
            n = int(rest)
            if n < 0:
                return None
            return [self._read_response(disable_decoding, timeout) for _ in range(n)]
        raise InvalidResponse(f"Protocol Error: {line!r}")


def quote(value: bytes) -> str:
    """A bulk string as redis-cli prints it: double quotes, escapes, ``\\xHH`` for the rest."""
    return quoted(value).decode("ascii")


def format_reply(reply: Any, prefix: str = "") -> str:
    """Format a reply for a terminal (no trailing newline).

    Integers are ``(integer) 5``, nil ``(nil)``, errors ``(error) ERR ...``, strings
    quoted, arrays numbered with nested arrays indented under their index.
    """
    if isinstance(reply, ResponseError):
        text = reply.text if isinstance(reply, ServerError) else str(reply)
        return f"(error) {text}"
    if reply is None:
        return "(nil)"
    if isinstance(reply, bool):
        return f"(integer) {int(reply)}"
    if isinstance(reply, int):
        return f"(integer) {reply}"
    if isinstance(reply, Status):
        return bytes(reply).decode("utf-8", errors="replace")
    if isinstance(reply, bytes):
        return quote(reply)
    if isinstance(reply, str):
        return quote(reply.encode())
    if isinstance(reply, (list, tuple)):
        if not reply:
            return "(empty array)"
        width = len(str(len(reply)))
        inner = prefix + " " * (width + 2)
        lines = []
        for i, item in enumerate(reply):
            head = f"{'' if i == 0 else prefix}{i + 1:>{width}}) "
            lines.append(head + format_reply(item, inner))
        return "\n".join(lines)
    return repr(reply)


def format_raw(reply: Any) -> str:
    """Format a reply like ``redis-cli --raw``: bare values, one array element a line."""
    if isinstance(reply, ResponseError):
        return reply.text if isinstance(reply, ServerError) else str(reply)
    if reply is None:
        return ""
    if isinstance(reply, bool):
        return str(int(reply))
    if isinstance(reply, int):
        return str(reply)
    if isinstance(reply, bytes):
        return bytes(reply).decode("utf-8", errors="replace")
    if isinstance(reply, (list, tuple)):
        return "\n".join(format_raw(item) for item in reply)
    return str(reply)


def prefers_raw(args: list[str] | tuple[str, ...]) -> bool:
    """Commands whose reply is a text report (INFO, CLUSTER NODES/INFO): shown as is."""
    if not args:
        return False
    name = args[0].lower()
    if name == "info":
        return True
    return name == "cluster" and len(args) == 2 and args[1].lower() in ("nodes", "info")


def render(reply: Any, args: list[str] | tuple[str, ...], raw: bool) -> str:
    """The reply of ``args`` as printed: raw with ``--raw`` or for text reports."""
    if raw:
        return format_raw(reply)
    if prefers_raw(args) and isinstance(reply, bytes):
        return format_raw(reply).replace("\r\n", "\n").rstrip("\n")
    return format_reply(reply)
