"""The configuration's lexical layer: quoting an argument so the splitter reads it
back (``codec.resp.split_text`` splits config lines, as ``sdssplitargs``), memory
sizes (``1gb``, ``100mb``), integers, and CONFIG GET's glob patterns. Pure: text in,
values out."""

from __future__ import annotations

import re

__all__ = [
    "GB",
    "INT_MAX",
    "KB",
    "LINE_TRIM",
    "LLONG_MAX",
    "LLONG_MIN",
    "MB",
    "UINT_MAX",
    "bare_or_quoted",
    "format_memory",
    "glob_match",
    "parse_int",
    "parse_memory",
    "quote_arg",
]

INT_MAX = 2**31 - 1
UINT_MAX = 2**32 - 1
LLONG_MAX = 2**63 - 1
LLONG_MIN = -(2**63)
KB = 1024
MB = 1024 * KB
GB = 1024 * MB

LINE_TRIM = " \t\r\n"  # what is trimmed from both ends of a config line
_ESCAPE = {
    "\\": "\\\\",
    '"': '\\"',
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\a": "\\a",
    "\b": "\\b",
}


def quote_arg(value: str) -> str:
    """Quote ``value`` as a double-quoted argument that ``codec.resp.split_text``
    reads back unchanged (like Redis' sdscatrepr). Control characters and
    ``surrogateescape`` byte stand-ins (undecodable bytes) are written as
    ``\\xHH``, so the result always encodes as strict UTF-8."""
    out = ['"']
    for c in value:
        code = ord(c)
        esc = _ESCAPE.get(c)
        if esc is not None:
            out.append(esc)
        elif code < 32 or code == 127:
            out.append(f"\\x{code:02x}")
        elif 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\x{code - 0xDC00:02x}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def bare_or_quoted(value: str) -> str:
    """Leave simple tokens bare, quote anything that would not split back."""
    if value and all(32 < ord(c) < 127 and c not in "\"'\\" for c in value):
        return value
    return quote_arg(value)


_MEMORY_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": KB,
    "m": 1000**2,
    "mb": MB,
    "g": 1000**3,
    "gb": GB,
}
_MEMORY_RE = re.compile(r"(-?[0-9]+)([A-Za-z]*)", re.ASCII)
_INT_RE = re.compile(r"0|-?[1-9][0-9]*", re.ASCII)


def parse_memory(text: str) -> int:
    """Parse a memory size like Redis' memtoll: a plain byte count, or a
    number followed by ``k`` (1000), ``kb`` (1024), ``m``, ``mb``, ``g`` or
    ``gb``, units case-insensitive. Raises ``ValueError`` if malformed."""
    m = _MEMORY_RE.fullmatch(text)
    if m is None:
        raise ValueError(f"invalid memory size: {text!r}")
    unit = _MEMORY_UNITS.get(m.group(2).lower())
    if unit is None:
        raise ValueError(f"invalid memory unit: {text!r}")
    return int(m.group(1)) * unit


def format_memory(nbytes: int) -> str:
    """Render a byte count the way CONFIG REWRITE writes it: the largest of
    ``gb`` / ``mb`` / ``kb`` that divides it exactly, else plain bytes."""
    for size, suffix in ((GB, "gb"), (MB, "mb"), (KB, "kb")):
        if nbytes and nbytes % size == 0:
            return f"{nbytes // size}{suffix}"
    return str(nbytes)


def parse_int(text: str) -> int:
    """Strict signed 64-bit decimal integer (Redis string2ll rules: no sign
    ``+``, no leading zeros, no spaces)."""
    if not _INT_RE.fullmatch(text):
        raise ValueError(f"invalid integer: {text!r}")
    value = int(text)
    if not LLONG_MIN <= value <= LLONG_MAX:
        raise ValueError(f"integer out of range: {text!r}")
    return value


# ---------------------------------------------------------------------------
# Glob matching (Redis stringmatchlen semantics).
# ---------------------------------------------------------------------------


def glob_match(pattern: str, string: str, nocase: bool = True) -> bool:
    """Match ``string`` against a Redis glob ``pattern``.

    ``*`` matches any run of characters, ``?`` any one character,
    ``[abc]`` / ``[^abc]`` / ``[a-z]`` a character class (reversed ranges
    are accepted, an unterminated class runs to the end of the pattern), and
    a backslash makes the next character literal, inside or outside classes.
    """
    if nocase:
        pattern, string = pattern.lower(), string.lower()
    return _glob(pattern, 0, string, 0, {})


def _glob(p: str, pi: int, s: str, si: int, memo: dict[tuple[int, int], bool]) -> bool:
    plen, slen = len(p), len(s)
    while pi < plen and si < slen:
        c = p[pi]
        if c == "*":
            while pi + 1 < plen and p[pi + 1] == "*":
                pi += 1
            if pi + 1 == plen:
                return True
            for start in range(si, slen):
                key = (pi + 1, start)
                hit = memo.get(key)
                if hit is None:
                    hit = memo[key] = _glob(p, pi + 1, s, start, memo)
                if hit:
                    return True
            return False
        if c == "?":
            si += 1
        elif c == "[":
            pi += 1
            negate = pi < plen and p[pi] == "^"
            if negate:
                pi += 1
            ch = s[si]
            matched = False
            while True:
                if pi >= plen:  # unterminated class: stop at the last char
                    pi -= 1
                    break
                pc = p[pi]
                if pc == "\\" and pi + 1 < plen:
                    pi += 1
                    matched = matched or p[pi] == ch
                elif pc == "]":
                    break
                elif pi + 2 < plen and p[pi + 1] == "-":
                    lo, hi = sorted((pc, p[pi + 2]))
                    pi += 2
                    matched = matched or lo <= ch <= hi
                else:
                    matched = matched or pc == ch
                pi += 1
            if matched == negate:
                return False
            si += 1
        else:
            if c == "\\" and pi + 1 < plen:
                pi += 1
                c = p[pi]
            if c != s[si]:
                return False
            si += 1
        pi += 1
        if si == slen:
            while pi < plen and p[pi] == "*":
                pi += 1
            break
    return pi == plen and si == slen
