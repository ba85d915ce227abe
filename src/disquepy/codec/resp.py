"""RESP codec: request readers (server side) and reply encoders.

This module is pure: no I/O, no clocks, no randomness.  The server feeds the
bytes it reads from a client socket into a reader and writes the bytes the
encoders return.

Request readers
===============

``PyRequestReader``, ``HiredisRequestReader`` and ``CRequestReader`` share one API, modelled on
``hiredis.Reader``::

    reader = make_reader()
    reader.feed(data)                   # may raise QueryBufferLimitError
    while (argv := reader.gets()) is not False:
        handle(argv)                    # argv: list[bytes], never empty

``gets`` raises ``ProtocolError`` whose ``message`` is Redis's exact text; the
server replies ``-ERR <message>`` and closes the connection.  Readers do not
recover from errors: once raised, the same error (class and message) is raised
again by every later ``feed``/``gets`` call.

The parsing rules are those of Redis/Disque's ``processInlineBuffer`` and
``processMultibulkBuffer`` (networking.c), including their leniencies: the
byte after a header's ``\\r`` and the two bytes after a bulk payload are
skipped without being checked, a ``*`` count <= 0 yields no command, and empty
inline arguments (``""``) are dropped, as Disque does.  Deliberate
differences, all making results independent of how the stream is split into
``feed`` calls:

* The "too big ..." limits apply to the length of the line being parsed
  (from its first byte), not to the whole query buffer, and a terminated line
  that is too long is rejected just as an unterminated one would be.  Redis
  accepts such a line when it happens to arrive in a single read.
* An inline line ending in a bare ``\\n`` consumes exactly that ``\\n`` (old
  Redis versions also swallowed the byte after it).
* NUL bytes are ordinary bytes when looking for the end of a line (Redis's
  ``strchr`` stops at them and then waits for more data); within an inline
  line a NUL still ends the arguments, as in Redis's ``sdssplitargs``.

``HiredisRequestReader`` hands every complete request that starts with
``*`` to ``hiredis.Reader`` and checks its result against the buffer (every
element must have been a ``$`` bulk string) before accepting it.  Anything
else (inline requests, incomplete requests, anything hiredis rejects or that
fails the check) goes through the same pure-Python parser as
``PyRequestReader``, so both readers give identical results by construction.

``CRequestReader`` (``_creader.c``, built with the package when a C compiler is
available) implements the same rules in C and is what the server uses; it calls
``split_args`` back for inline lines.  The tests run all three readers over the
same inputs, whole and byte at a time, and compare them on random streams.

Reply encoding
==============

Small functions returning ``bytes``: ``simple``, ``error``, ``integer``,
``bulk``, ``array``, ``bulk_array``, ``null_bulk``, ``null_array`` and the
generic, protocol-aware ``encode``.  ``str`` values are encoded as UTF-8 with
``surrogateescape``, so a ``str`` obtained by decoding raw bytes with
``surrogateescape`` (as ``ProtocolError`` messages do) round-trips unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final, Literal

from mypy_extensions import mypyc_attr

_hiredis: Any = None  # hiredis is optional: the pure reader is always available.
try:
    import hiredis

    _hiredis = hiredis
except ImportError:  # pragma: no cover - depends on the environment
    pass

__all__ = [
    "EMPTY_ARRAY",
    "HAVE_CREADER",
    "HAVE_HIREDIS",
    "NULL3",
    "NULL_ARRAY2",
    "NULL_BULK2",
    "OK",
    "ONE",
    "PONG",
    "ZERO",
    "CRequestReader",
    "Err",
    "HiredisRequestReader",
    "ProtocolError",
    "PyRequestReader",
    "QueryBufferLimitError",
    "RequestReader",
    "Status",
    "array",
    "bulk",
    "bulk_array",
    "encode",
    "error",
    "integer",
    "make_reader",
    "null_array",
    "null_bulk",
    "simple",
    "split_args",
    "split_text",
]

HAVE_HIREDIS: Final = _hiredis is not None

# Default limits, as in Redis/Disque.
MAX_BULK_LEN: Final = 512 * 1024 * 1024  # proto-max-bulk-len
MAX_INLINE: Final = 64 * 1024  # PROTO_INLINE_MAX_SIZE
MAX_MULTIBULK: Final = 1024 * 1024
QUERY_BUFFER_LIMIT: Final = 1024**3  # client-query-buffer-limit

_NEVER: Final = float("inf")  # HiredisRequestReader._mark when hiredis is never used

# Bulk payloads at least this big are copied out of the buffer through a
# memoryview (one copy) rather than bytes(bytearray-slice) (two copies).
_BIG_ARG: Final = 32 * 1024

_LLONG_MAX: Final = 2**63 - 1
_LLONG_MIN: Final = -(2**63)

_E_MBULK_LEN: Final = "Protocol error: invalid multibulk length"
_E_BULK_LEN: Final = "Protocol error: invalid bulk length"
_E_QUOTES: Final = "Protocol error: unbalanced quotes in request"
_E_BIG_INLINE: Final = "Protocol error: too big inline request"
_E_BIG_MBULK: Final = "Protocol error: too big mbulk count string"
_E_BIG_BULK: Final = "Protocol error: too big bulk count string"
_E_UNAUTH_MBULK: Final = "Protocol error: unauthenticated multibulk length"
_E_UNAUTH_BULK: Final = "Protocol error: unauthenticated bulk length"
# Redis 7's limits on a request from a client that must AUTH first (set_unauthenticated)
UNAUTH_MAX_MULTIBULK: Final = 10
UNAUTH_MAX_BULK: Final = 16384


class ProtocolError(Exception):
    """The client sent something that is not valid RESP.

    ``message`` is Redis's text; the server replies ``-ERR <message>`` and
    closes the connection.
    """

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class QueryBufferLimitError(ProtocolError):
    """Too many bytes buffered without forming a complete request.

    Redis logs this and closes the connection without replying.
    """

    __slots__ = ()


def _expected_dollar(byte: int) -> ProtocolError:
    # Redis formats the byte with %c; addReplyErrorFormat then turns CR/LF
    # into spaces.  Non-ASCII bytes survive via surrogateescape, which the
    # encoders below undo, so the client gets the raw byte back as Redis does.
    ch = " " if byte in (10, 13) else bytes((byte,)).decode("utf-8", "surrogateescape")
    return ProtocolError(f"Protocol error: expected '$', got '{ch}'")


def _str2ll(s: bytes | bytearray) -> int | None:
    """Redis's string2ll(): strict base-10 signed 64-bit integer, else None.

    No sign other than a leading '-', no leading zeros, no "-0", no spaces.
    """
    n = len(s)
    if n == 0 or n > 20:
        return None
    if s.isdigit():  # bytes.isdigit() is ASCII-only
        if s[0] == 48 and n > 1:
            return None
        v = int(s)
        return v if v <= _LLONG_MAX else None
    if n > 1 and s[0] == 45 and s[1] != 48 and s[1:].isdigit():
        v = -int(s[1:])
        return v if v >= _LLONG_MIN else None
    return None


# ---------------------------------------------------------------------------
# Inline argument splitting (sdssplitargs)
# ---------------------------------------------------------------------------

# C isspace() in the "C" locale.  Note that an *unquoted* token only ends at
# space, \t, \n, \r (and NUL); \v and \f merely get skipped between tokens.
_ISSPACE: Final = frozenset(b" \t\n\r\x0b\x0c")
_TOKEN_END: Final = frozenset(b" \t\n\r")
_HEX: Final = {c: int(chr(c), 16) for c in b"0123456789abcdefABCDEF"}
_ESCAPES: Final = {ord("n"): 10, ord("r"): 13, ord("t"): 9, ord("b"): 8, ord("a"): 7}


# quoted(): each byte as Redis's sdscatrepr writes it (_REPR), and a value with none to
# escape (_PLAIN: printable ASCII but '"' and '\\')
_REPR: Final = [bytes([c]) if 32 <= c < 127 else b"\\x%02x" % c for c in range(256)]
for _c, _esc in ((92, b"\\\\"), (34, b'\\"'), (10, b"\\n"), (13, b"\\r"), (9, b"\\t"),
                 (7, b"\\a"), (8, b"\\b")):
    _REPR[_c] = _esc
_PLAIN: Final = re.compile(rb"[ !#-\[\]-~]*")


def quoted(value: bytes) -> bytes:
    """``value`` in double quotes with C escapes and ``\\xHH`` for other bytes, as Redis's
    sdscatrepr writes it (redis-cli's output, the MONITOR feed); split_args reads it
    back."""
    if _PLAIN.fullmatch(value) is not None:
        return b'"' + value + b'"'
    return b'"' + b"".join([_REPR[c] for c in value]) + b'"'


def split_args(line: bytes) -> list[bytes] | None:
    """Split an inline request line like Redis's ``sdssplitargs``.

    Arguments are separated by whitespace; ``"..."`` supports the escapes
    ``\\n \\r \\t \\b \\a \\xHH`` (any other escaped char stands for itself)
    and ``'...'`` supports ``\\'``.  A closing quote must be followed by
    whitespace or the end of the line.  Returns None on unbalanced quotes.
    Empty arguments (``""``) are returned; the request reader drops them.
    """
    nul = line.find(b"\0")
    if nul >= 0:  # the C code sees a NUL as the end of the string
        line = line[:nul]
    if b'"' not in line and b"'" not in line and b"\x0b" not in line and b"\x0c" not in line:
        # Common case; bytes.split() uses exactly " \t\n\r\v\f".
        return line.split()

    args: list[bytes] = []
    n = len(line)
    i = 0
    while True:
        while i < n and line[i] in _ISSPACE:
            i += 1
        if i >= n:
            return args
        cur = bytearray()
        inq = insq = False
        while True:
            if i >= n:  # end of line
                if inq or insq:
                    return None  # unterminated quotes
                break
            c = line[i]
            if inq:
                if (
                    c == 92  # backslash
                    and i + 3 < n
                    and line[i + 1] == 120  # 'x'
                    and line[i + 2] in _HEX
                    and line[i + 3] in _HEX
                ):
                    cur.append(_HEX[line[i + 2]] * 16 + _HEX[line[i + 3]])
                    i += 3
                elif c == 92 and i + 1 < n:
                    i += 1
                    c = line[i]
                    cur.append(_ESCAPES.get(c, c))
                elif c == 34:  # closing '"'
                    if i + 1 < n and line[i + 1] not in _ISSPACE:
                        return None
                    i += 1
                    break
                else:
                    cur.append(c)
            elif insq:
                if c == 92 and i + 1 < n and line[i + 1] == 39:
                    i += 1
                    cur.append(39)
                elif c == 39:  # closing "'"
                    if i + 1 < n and line[i + 1] not in _ISSPACE:
                        return None
                    i += 1
                    break
                else:
                    cur.append(c)
            elif c in _TOKEN_END:
                i += 1
                break
            elif c == 34:
                inq = True
            elif c == 39:
                insq = True
            else:
                cur.append(c)
            i += 1
        args.append(bytes(cur))


def split_text(line: str) -> list[str] | None:
    """``split_args`` for text (a config line, a line typed at the command line's
    prompt), the one splitter of the project: the line is taken as UTF-8, with
    ``surrogateescape`` stand-ins as the bytes they stand for, and each argument comes
    back as text the same way (``"\\xc3\\xa9"`` is "é", a byte that forms no UTF-8
    its stand-in). None on unbalanced quotes, or a lone surrogate that stands for no
    byte."""
    try:
        raw = line.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return None
    args = split_args(raw)
    if args is None:
        return None
    return [a.decode("utf-8", "surrogateescape") for a in args]


# ---------------------------------------------------------------------------
# Request readers
# ---------------------------------------------------------------------------


class PyRequestReader:
    """Incremental parser for client requests (inline and multibulk).

    Pure Python.  See the module docstring for the exact semantics.
    """

    __slots__ = (
        "_buf",  # bytearray: unconsumed input starts at _pos
        "_pos",  # start of the unparsed part of _buf
        "_scan",  # resume point when searching for a line terminator
        "_left",  # multibulk elements still to read (0: between requests)
        "_bulklen",  # length of the bulk being read, -1 if header not read
        "_args",  # elements of the multibulk request being read
        "_error",  # the ProtocolError raised, re-raised forever after
        "_max_bulk",
        "_max_inline",
        "_max_mbulk",
        "_qb_limit",
        "_lim_bulk",  # the limits in force: the max_* ones, lower before AUTH
        "_lim_mbulk",
    )

    def __init__(
        self,
        max_bulk_len: int = MAX_BULK_LEN,
        max_inline: int = MAX_INLINE,
        max_multibulk: int = MAX_MULTIBULK,
        query_buffer_limit: int = QUERY_BUFFER_LIMIT,
    ) -> None:
        self._buf = bytearray()
        self._pos = 0
        self._scan = 0
        self._left = 0
        self._bulklen = -1
        self._args: list[bytes] = []
        self._error: ProtocolError | None = None
        self._max_bulk = max_bulk_len
        self._max_inline = max_inline
        self._max_mbulk = max_multibulk
        self._qb_limit = query_buffer_limit
        self._lim_bulk = max_bulk_len
        self._lim_mbulk = max_multibulk

    def __len__(self) -> int:
        """Number of buffered bytes not yet parsed."""
        return len(self._buf) - self._pos

    def set_unauthenticated(self, on: bool) -> None:
        """Apply (or lift) Redis's limits for a client that must AUTH first: past
        ``UNAUTH_MAX_MULTIBULK`` arguments or ``UNAUTH_MAX_BULK`` bytes in one, the
        request is a protocol error (``unauthenticated multibulk length`` / ``bulk
        length``). For the requests parsed after this call."""
        self._lim_bulk = min(self._max_bulk, UNAUTH_MAX_BULK) if on else self._max_bulk
        self._lim_mbulk = min(self._max_mbulk, UNAUTH_MAX_MULTIBULK) if on else self._max_mbulk

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append bytes read from the client.

        Raises QueryBufferLimitError (without buffering ``data``) if the
        unparsed bytes would exceed ``query_buffer_limit``.
        """
        if self._error is not None:
            raise self._error
        buf = self._buf
        pos = self._pos
        if len(buf) - pos + len(data) > self._qb_limit:
            self._error = QueryBufferLimitError("client reached max query buffer length")
            raise self._error
        if pos:
            # Deleting a bytearray's prefix is O(1) in CPython.
            del buf[:pos]
            self._pos = 0
            self._scan = self._scan - pos if self._scan > pos else 0
        buf += data

    def gets(self) -> list[bytes] | Literal[False]:
        """Return the next command's arguments, or False if more data is needed."""
        if self._error is not None:
            raise self._error
        try:
            while True:
                argv = self._parse()
                if argv is None:
                    self._release()
                    return False
                if argv:
                    return argv
                # "*0", "*-1", blank inline line, ...: no command, go on.
        except ProtocolError as exc:
            self._error = exc
            raise

    def _release(self) -> None:
        # Everything parsed: drop the buffer now rather than at the next feed,
        # so an idle client does not pin its last (possibly huge) request.
        if self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
            self._scan = 0

    def _parse(self) -> list[bytes] | None:
        """Parse one request from the buffer.

        Returns its arguments (an empty list if the request holds no
        command), or None if more data is needed.
        """
        buf = self._buf
        pos = self._pos
        end = len(buf)
        left = self._left
        if left:
            args = self._args
            bulklen = self._bulklen
        else:
            if pos >= end:
                return None
            if buf[pos] != 42:  # not '*'
                return self._parse_inline(buf, pos, end)
            # Multibulk count line: "*<count>\r\n".
            maxl = self._max_inline
            nl = buf.find(b"\r", self._scan if self._scan > pos else pos, pos + maxl + 1)
            if nl < 0:
                if end - pos > maxl:
                    raise ProtocolError(_E_BIG_MBULK)
                self._scan = end
                return None
            if nl + 1 >= end:  # Redis wants one byte after '\r' (unchecked)
                return None
            count = _str2ll(buf[pos + 1 : nl])
            if count is None or count > self._lim_mbulk:
                raise ProtocolError(_E_MBULK_LEN if count is None or count > self._max_mbulk
                                    else _E_UNAUTH_MBULK)
            pos = nl + 2
            if count <= 0:
                self._pos = pos
                return []
            left = count
            args = self._args = []
            bulklen = -1

        maxbulk = self._lim_bulk
        maxl = self._max_inline
        find = buf.find
        while left:
            if bulklen < 0:
                # Bulk header line: "$<len>\r\n".
                scan = self._scan
                nl = find(b"\r", scan if scan > pos else pos, pos + maxl + 1)
                if nl < 0:
                    if end - pos > maxl:
                        raise ProtocolError(_E_BIG_BULK)
                    self._scan = end
                    break
                if nl + 1 >= end:
                    break
                if buf[pos] != 36:  # '$'
                    raise _expected_dollar(buf[pos])
                # Lengths of one or two digits are decoded by hand: much
                # cheaper than slicing the bytearray and calling int().
                width = nl - pos
                if width == 2:
                    bulklen = buf[pos + 1] - 48
                    if not 0 <= bulklen <= 9:
                        raise ProtocolError(_E_BULK_LEN)
                elif width == 3:
                    d1 = buf[pos + 1] - 48
                    d0 = buf[pos + 2] - 48
                    if not (1 <= d1 <= 9 and 0 <= d0 <= 9):
                        raise ProtocolError(_E_BULK_LEN)
                    bulklen = d1 * 10 + d0
                else:
                    # Negative lengths are invalid too, so digits only.
                    s = buf[pos + 1 : nl]
                    if width > 20 or not s.isdigit() or s[0] == 48:  # "0" has width 2
                        raise ProtocolError(_E_BULK_LEN)
                    bulklen = int(s)
                if bulklen > maxbulk:
                    raise ProtocolError(_E_BULK_LEN if bulklen > self._max_bulk
                                        else _E_UNAUTH_BULK)
                pos = nl + 2
            if end - pos < bulklen + 2:  # payload + 2 (unchecked) bytes
                break
            if bulklen < _BIG_ARG:
                args.append(bytes(buf[pos : pos + bulklen]))
            else:
                with memoryview(buf) as view:
                    args.append(bytes(view[pos : pos + bulklen]))
            pos += bulklen + 2
            bulklen = -1
            left -= 1

        self._pos = pos
        self._left = left
        self._bulklen = bulklen
        if left:
            return None
        self._args = []
        return args

    def _parse_inline(self, buf: bytearray, pos: int, end: int) -> list[bytes] | None:
        maxl = self._max_inline
        nl = buf.find(b"\n", self._scan if self._scan > pos else pos, pos + maxl + 1)
        if nl < 0:
            if end - pos > maxl:
                raise ProtocolError(_E_BIG_INLINE)
            self._scan = end
            return None
        stop = nl - 1 if nl > pos and buf[nl - 1] == 13 else nl
        argv = split_args(bytes(buf[pos:stop]))
        if argv is None:
            raise ProtocolError(_E_QUOTES)
        self._pos = nl + 1
        # Disque (like Redis < 4) drops empty arguments of inline requests.
        return [a for a in argv if a] if b"" in argv else argv


class HiredisRequestReader(PyRequestReader):
    """Request reader using ``hiredis.Reader`` for complete multibulk requests.

    Same API and results as ``PyRequestReader``, which it falls back to for
    everything hiredis cannot be trusted with (see the module docstring).
    """

    __slots__ = (
        "_hr",  # hiredis.Reader in step with _pos, or None
        "_mark",  # no hiredis for requests starting before this offset
        "_direct",  # fast path: the chunk being parsed in place (nothing else buffered)
        "_dpos",  # offset in _direct of the next request
    )

    def __init__(
        self,
        max_bulk_len: int = MAX_BULK_LEN,
        max_inline: int = MAX_INLINE,
        max_multibulk: int = MAX_MULTIBULK,
        query_buffer_limit: int = QUERY_BUFFER_LIMIT,
    ) -> None:
        if _hiredis is None:  # pragma: no cover - depends on the environment
            raise ImportError("hiredis is not installed")
        super().__init__(max_bulk_len, max_inline, max_multibulk, query_buffer_limit)
        self._hr: Any = None
        # With tiny line limits even valid headers can be "too big": only the
        # pure parser gets that right, so never use hiredis then.  (A header
        # hiredis accepts is at most 21 bytes long.)
        self._mark = 0 if max_inline >= 32 else _NEVER
        self._direct: bytes | None = None
        self._dpos = 0

    def __len__(self) -> int:
        d = self._direct
        return len(self._buf) - self._pos + (len(d) - self._dpos if d is not None else 0)

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append bytes read from the client (see ``PyRequestReader.feed``)."""
        # Fast path: nothing buffered and a multibulk request starts the chunk
        # (one read, one or more whole commands: the usual case). hiredis parses
        # the chunk in place; it is copied into the buffer only if something is
        # left over or needs the general parser.
        if (
            self._direct is None
            and not self._buf
            and not self._mark
            and not self._left
            and self._error is None
            and data[:1] == b"*"
            and type(data) is bytes
            and len(data) <= self._qb_limit
        ):
            hr = self._hr
            if hr is None:
                hr = self._hr = _hiredis.Reader()
            hr.feed(data)
            self._direct = data
            self._dpos = 0
            return
        if self._direct is not None:
            self._spill()
        pos = self._pos
        super().feed(data)
        if pos:
            self._mark = self._mark - pos if self._mark > pos else 0
        if self._hr is not None:
            self._hr.feed(data)

    def _spill(self) -> None:
        """Leave the fast path: move the unparsed rest of the chunk to the buffer."""
        d, dpos = self._direct, self._dpos
        self._direct = None
        self._hr = None  # rebuilt from the buffer by the general path
        if d is not None and dpos < len(d):
            self._buf += d[dpos:] if dpos else d

    def gets(self) -> list[bytes] | Literal[False]:
        d = self._direct
        if d is None and not self._buf and self._error is None:
            return False  # nothing buffered: nothing to parse
        if self._error is not None:
            raise self._error
        if d is not None:
            dpos = self._dpos
            if dpos == len(d):
                self._direct = None
                return False
            try:
                req = self._hr.gets()
            except _hiredis.ProtocolError:
                req = None
            if type(req) is list and req:
                end = _check_at(d, req, dpos, self._lim_mbulk, self._lim_bulk)
                if end:
                    self._dpos = end
                    if end == len(d):
                        self._direct = None
                    return req
            self._spill()
        buf = self._buf
        try:
            while True:
                pos = self._pos
                if pos >= self._mark and pos < len(buf) and not self._left:
                    if buf[pos] == 42:  # '*'
                        hr = self._hr
                        if hr is None:
                            hr = self._hr = _hiredis.Reader()
                            hr.feed(buf, pos)
                        try:
                            req = hr.gets()
                        except _hiredis.ProtocolError:
                            req = None
                        if type(req) is list:
                            if not req:  # "*0\r\n": no command
                                self._pos = pos + 4
                                continue
                            end = self._check(req, pos)
                            if end:
                                self._pos = end
                                return req
                    # An inline request, or a multibulk one that is incomplete
                    # (False), "*-1" (None), rejected by hiredis, or not made
                    # of bulk strings: hiredis cannot skip over what the pure
                    # parser consumes, so drop it.  The pure parser handles
                    # everything buffered so far: re-feeding a new hiredis
                    # reader after each such request could be quadratic.
                    self._hr = None
                    self._mark = len(buf)
                argv = self._parse()
                if argv is None:
                    self._release()
                    return False
                if argv:
                    return argv
        except ProtocolError as exc:
            self._error = exc
            self._hr = None
            raise

    def _release(self) -> None:
        if self._pos == len(self._buf):
            # hiredis (if any) has consumed everything too: still in step.
            self._buf.clear()
            self._pos = 0
            self._scan = 0
            if self._mark != _NEVER:
                self._mark = 0

    def _check(self, req: list[Any], pos: int) -> int:
        return _check_at(self._buf, req, pos, self._lim_mbulk, self._lim_bulk)


def _check_at(buf: Any, req: list[Any], pos: int, max_mbulk: int, max_bulk: int) -> int:
    """Validate a request parsed by hiredis from ``buf[pos:]``.

    hiredis parses replies, so ``+OK`` or ``(123`` elements come back as
    bytes just like ``$`` bulk strings.  Walk the offsets the request
    would have if every element were a bulk string and check each one
    holds a '$': by induction each is then really where hiredis read a
    bulk header (hiredis parses lengths strictly, so the encoding is
    canonical).  Returns the request's end offset, or 0 to reject.
    """
    n = len(req)
    if n > max_mbulk:
        return 0
    off = pos + (4 if n < 10 else 3 + len(str(n)))  # "*<n>\r\n"
    try:
        for arg in req:
            if buf[off] != 36:
                return 0
            off += _BULK_SIZE[len(arg)]  # TypeError: int, None, ReplyError...
    except TypeError:
        return 0
    except IndexError:  # an element too long for the table
        off = pos + 3 + len(str(n))
        try:
            for arg in req:
                if buf[off] != 36:
                    return 0
                size = len(arg)
                off += size + 5 + len(str(size))
        except (TypeError, IndexError):
            return 0
    if off - pos > max_bulk and max(map(len, req)) > max_bulk:
        return 0
    return off


# _BULK_SIZE[n]: encoded size of a bulk string of n bytes ("$n\r\n...\r\n").
_BULK_SIZE: Final = tuple(n + 5 + len(str(n)) for n in range(4096))


try:  # the C reader, built with the package when a compiler was at hand
    from ._creader import Reader as CRequestReader
    from ._creader import _init as _creader_init

    _creader_init(ProtocolError, QueryBufferLimitError, split_args, _expected_dollar)
except ImportError:  # pragma: no cover - depends on the build
    CRequestReader = None

HAVE_CREADER: Final = CRequestReader is not None

# the fastest reader available: C, else hiredis-backed, else pure Python
RequestReader: Any = (
    CRequestReader if HAVE_CREADER else HiredisRequestReader if HAVE_HIREDIS else PyRequestReader
)


def make_reader(pure: bool = False, **limits: int) -> Any:  # any of the three readers
    """Return a new request reader: the fastest available (``RequestReader``) unless
    ``pure`` asks for the Python reference.

    ``limits`` are the reader keyword arguments: max_bulk_len, max_inline,
    max_multibulk, query_buffer_limit.
    """
    cls = PyRequestReader if pure else RequestReader
    return cls(**limits)


# ---------------------------------------------------------------------------
# Reply encoding
# ---------------------------------------------------------------------------

OK: Final = b"+OK\r\n"
PONG: Final = b"+PONG\r\n"
NULL_BULK2: Final = b"$-1\r\n"
NULL_ARRAY2: Final = b"*-1\r\n"
NULL3: Final = b"_\r\n"
EMPTY_ARRAY: Final = b"*0\r\n"
ZERO: Final = b":0\r\n"
ONE: Final = b":1\r\n"
_CRLF: Final = b"\r\n"
_TRUE3: Final = b"#t\r\n"
_FALSE3: Final = b"#f\r\n"

_SMALL_INTS: Final = tuple(b":%d\r\n" % i for i in range(1024))
LENS: Final[tuple[bytes, ...]] = tuple(b"%d" % n for n in range(1024))  # small lengths as text


def length_text(n: int) -> bytes:
    """``n`` in decimal, as a bulk's length is written (a table for small ones)."""
    return LENS[n] if 0 <= n < 1024 else b"%d" % n


@mypyc_attr(native_class=False)  # mypyc compiles no bytes subclass
class Status(bytes):
    """A RESP simple string, e.g. ``Status(b"OK")`` encodes as ``+OK``."""

    __slots__ = ()

    def __new__(cls, value: bytes | str = b"") -> Status:
        if isinstance(value, str):
            value = value.encode("utf-8", "surrogateescape")
        return bytes.__new__(cls, value)


@mypyc_attr(native_class=False)  # mypyc compiles no bytes subclass
class Err(bytes):
    """A RESP error including its code, e.g. ``Err("NOJOB Job not known ...")``."""

    __slots__ = ()

    def __new__(cls, value: bytes | str = b"") -> Err:
        if isinstance(value, str):
            value = value.encode("utf-8", "surrogateescape")
        return bytes.__new__(cls, value)


def _line(s: bytes | str) -> bytes:
    """Text for a one-line reply: str encoded, CR/LF replaced by spaces."""
    if isinstance(s, str):
        s = s.encode("utf-8", "surrogateescape")
    if b"\r" in s or b"\n" in s:
        s = s.replace(b"\r", b" ").replace(b"\n", b" ")
    return s


def simple(s: bytes | str) -> bytes:
    """Simple string reply: ``+s\\r\\n``."""
    return b"+" + _line(s) + _CRLF


def error(msg: bytes | str) -> bytes:
    """Error reply ``-msg\\r\\n``; ``msg`` starts with its code, e.g. ``ERR ...``."""
    return b"-" + _line(msg) + _CRLF


def integer(n: int) -> bytes:
    """Integer reply: ``:n\\r\\n``."""
    if 0 <= n < 1024:
        return _SMALL_INTS[n]
    return b":%d\r\n" % n


# the headers of bulk replies up to 255 bytes (IDs, names, small bodies): a table's
# entry instead of the length's digits formatted per reply
_BULK_HEADS: Final = [b"$%d\r\n" % n for n in range(256)]


def bulk(b: bytes | str | None) -> bytes:
    """Bulk string reply ``$len\\r\\nb\\r\\n``; None gives the RESP2 null bulk."""
    if b is None:
        return NULL_BULK2
    if isinstance(b, str):
        b = b.encode("utf-8", "surrogateescape")
    n = len(b)
    if n < 256:
        return _BULK_HEADS[n] + b + b"\r\n"
    return b"$%d\r\n%b\r\n" % (n, b)


def null_bulk(proto: int) -> bytes:
    """Null bulk string for the protocol version (2 or 3)."""
    return NULL3 if proto == 3 else NULL_BULK2


def null_array(proto: int) -> bytes:
    """Null array for the protocol version (2 or 3)."""
    return NULL3 if proto == 3 else NULL_ARRAY2


def array(encoded_items: list[bytes]) -> bytes:
    """Array reply made of already encoded items."""
    return b"*%d\r\n" % len(encoded_items) + b"".join(encoded_items)


def bulk_array(items: Iterable[bytes | str | None], proto: int = 2) -> bytes:
    """Array of bulk strings; None items become null bulks for ``proto``."""
    if not isinstance(items, (list, tuple)):
        items = list(items)
    parts = [b"*%d\r\n" % len(items)]
    append = parts.append
    for x in items:
        if type(x) is not bytes:
            if x is None:
                append(NULL3 if proto == 3 else NULL_BULK2)
                continue
            if isinstance(x, str):
                x = x.encode("utf-8", "surrogateescape")
        append(b"$%d\r\n%b\r\n" % (len(x), x))
    return b"".join(parts)


def encode(value: Any, proto: int = 2) -> bytes:
    """Encode a Python value as a RESP2 (default) or RESP3 reply.

    ========================  ==================  =====================
    value                     RESP3               RESP2
    ========================  ==================  =====================
    None                      ``_``               null bulk ``$-1``
    bool                      ``#t`` / ``#f``     ``:1`` / ``:0``
    int                       ``:n``              ``:n``
    float                     ``,repr``           bulk of repr
    bytes, str, bytearray     bulk                bulk
    Status / Err              ``+`` / ``-``       ``+`` / ``-``
    list, tuple               ``*`` array         ``*`` array
    dict                      ``%`` map           flat ``*`` k1 v1 ...
    set, frozenset            ``~`` set           ``*`` array
    ========================  ==================  =====================
    """
    t = type(value)
    # Fast paths for flat values.
    if t is bytes:
        return b"$%d\r\n%b\r\n" % (len(value), value)
    if t is int:
        return integer(value)
    if t is str:
        value = value.encode("utf-8", "surrogateescape")
        return b"$%d\r\n%b\r\n" % (len(value), value)
    parts: list[bytes] = []
    _encode_into(value, proto == 3, parts)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _encode_into(value: Any, resp3: bool, out: list[bytes]) -> None:
    t = type(value)
    if t is bytes:
        out.append(b"$%d\r\n%b\r\n" % (len(value), value))
    elif t is str:
        value = value.encode("utf-8", "surrogateescape")
        out.append(b"$%d\r\n%b\r\n" % (len(value), value))
    elif t is int:
        out.append(integer(value))
    elif value is None:
        out.append(NULL3 if resp3 else NULL_BULK2)
    elif t is list or t is tuple:
        out.append(b"*%d\r\n" % len(value))
        for item in value:
            _encode_into(item, resp3, out)
    elif t is dict:
        out.append((b"%%%d\r\n" if resp3 else b"*%d\r\n") % (len(value) * (1 if resp3 else 2)))
        for key, item in value.items():
            _encode_into(key, resp3, out)
            _encode_into(item, resp3, out)
    elif t is bool:
        out.append((_TRUE3 if value else _FALSE3) if resp3 else (ONE if value else ZERO))
    elif t is float:
        text = repr(value).encode()  # 'inf', '-inf', 'nan' as RESP3 wants
        out.append(b",%b\r\n" % text if resp3 else b"$%d\r\n%b\r\n" % (len(text), text))
    elif t is Status:
        out.append(simple(value))
    elif t is Err:
        out.append(error(value))
    elif t is set or t is frozenset:
        out.append((b"~%d\r\n" if resp3 else b"*%d\r\n") % len(value))
        for item in value:
            _encode_into(item, resp3, out)
    else:
        _encode_subclass(value, resp3, out)


def _encode_subclass(value: Any, resp3: bool, out: list[bytes]) -> None:
    # Instances of subclasses (IntEnum, OrderedDict, Status subclasses, ...)
    # are encoded like their base type.  Order matters: bool is an int and
    # Status/Err are bytes.
    if isinstance(value, Status):
        out.append(simple(value))
    elif isinstance(value, Err):
        out.append(error(value))
    elif isinstance(value, bool):
        _encode_into(bool(value), resp3, out)
    elif isinstance(value, int):
        out.append(integer(int(value)))
    elif isinstance(value, float):
        _encode_into(float(value), resp3, out)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        _encode_into(bytes(value), resp3, out)
    elif isinstance(value, str):
        _encode_into(str(value), resp3, out)
    elif isinstance(value, (list, tuple)):
        _encode_into(list(value), resp3, out)
    elif isinstance(value, dict):
        _encode_into(dict(value), resp3, out)
    elif isinstance(value, (set, frozenset)):
        _encode_into(set(value), resp3, out)
    else:
        raise TypeError(f"cannot encode {type(value).__name__!r} as RESP")
