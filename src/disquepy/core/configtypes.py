"""The configuration's value types. Each knows its arity, how to parse config-file
and command-line arguments and CONFIG SET values, and how to render itself for CONFIG
GET and for a config file line (the directive table, ``directives.py``, gives each
directive one of them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from .configlex import (
    INT_MAX,
    LLONG_MAX,
    bare_or_quoted,
    format_memory,
    parse_int,
    parse_memory,
    quote_arg,
)


class Invalid(Exception):
    """Internal: a value was rejected. ``reason`` overrides the directive's
    own error text when the type knows something more specific."""

    def __init__(self, reason: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason


class OutputBufferLimit(NamedTuple):
    """``client-output-buffer-limit`` of the ``normal`` client class (the
    only class Disque has): disconnect a client whose pending output reaches
    ``hard_bytes``, or stays above ``soft_bytes`` for ``soft_seconds``.
    Zero disables a limit."""

    hard_bytes: int
    soft_bytes: int
    soft_seconds: int


class ValueType:
    __slots__ = ("min_args", "max_args")

    def __init__(self, min_args: int = 1, max_args: int | None = 1) -> None:
        self.min_args = min_args
        self.max_args = max_args

    def accepts(self, nargs: int) -> bool:
        return nargs >= self.min_args and (self.max_args is None or nargs <= self.max_args)

    def fallback_reason(self, name: str) -> str:
        return f"Invalid {name} value"

    def parse(self, args: Sequence[str]) -> Any:
        """Value from the arguments of a config line (arity already checked)."""
        return self.parse_one(args[0])

    def parse_one(self, text: str) -> Any:
        raise NotImplementedError

    def parse_set(self, value: str) -> Any:
        """Value from the single CONFIG SET argument."""
        return self.parse([value])

    def render(self, value: Any) -> str:
        """CONFIG GET rendering."""
        return str(value)

    def format(self, value: Any) -> str:
        """Argument text of a config-file line."""
        return self.render(value)

    def lines(self, name: str, value: Any) -> list[str]:
        """Config-file lines for ``value``; none when it must be omitted."""
        return [f"{name} {self.format(value)}"]

    def copy(self, value: Any) -> Any:
        return value


class IntType(ValueType):
    __slots__ = ("lo", "hi", "clamp")

    def __init__(self, lo: int, hi: int, clamp: tuple[int, int] | None = None) -> None:
        super().__init__()
        self.lo, self.hi, self.clamp = lo, hi, clamp

    def parse_one(self, text: str) -> int:
        try:
            value = parse_int(text)
        except ValueError:
            raise Invalid from None
        if not self.lo <= value <= self.hi:
            raise Invalid
        if self.clamp is not None:  # a hint, not a hard limit: clamp silently
            value = min(max(value, self.clamp[0]), self.clamp[1])
        return value


class MemoryType(ValueType):
    __slots__ = ("lo", "hi")

    def __init__(self, lo: int = 0, hi: int = LLONG_MAX) -> None:
        super().__init__()
        self.lo, self.hi = lo, hi

    def parse_one(self, text: str) -> int:
        try:
            value = parse_memory(text)
        except ValueError:
            raise Invalid from None
        if not self.lo <= value <= self.hi:
            raise Invalid
        return value

    def format(self, value: int) -> str:
        return format_memory(value)


class BoolType(ValueType):
    __slots__ = ()

    def fallback_reason(self, name: str) -> str:
        return "argument must be 'yes' or 'no'"

    def parse_one(self, text: str) -> bool:
        lowered = text.lower()
        if lowered == "yes":
            return True
        if lowered == "no":
            return False
        raise Invalid

    def render(self, value: bool) -> str:
        return "yes" if value else "no"


class EnumType(ValueType):
    __slots__ = ("choices",)

    def __init__(self, *choices: str) -> None:
        super().__init__()
        self.choices = choices

    def fallback_reason(self, name: str) -> str:
        return f"argument must be one of {', '.join(self.choices)}"

    def parse_one(self, text: str) -> str:
        lowered = text.lower()
        if lowered not in self.choices:
            raise Invalid
        return lowered


class MaxmemoryPolicyType(EnumType):
    """``acks``: what the node does (it evicts only what no guarantee needs). Disque
    1.0-rc1 also accepts ``noeviction``, and filled up the same way with it as with
    ``acks`` (ADDJOB RETRY 0 + GETJOB to the limit); here it is refused with the
    reason rather than accepted and ignored."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__("acks")

    def parse_one(self, text: str) -> str:
        if text.lower() == "noeviction":
            raise Invalid(
                "maxmemory-policy noeviction is not supported: the only policy is acks "
                "(above 95% of maxmemory only acknowledged jobs, delivered at-most-once "
                "jobs and empty idle queues are evicted; nothing a guarantee needs)"
            )
        return super().parse_one(text)


class StringType(ValueType):
    __slots__ = ("basename", "max_len", "omit_empty")

    def __init__(
        self, *, basename: bool = False, max_len: int | None = None, omit_empty: bool = False
    ) -> None:
        super().__init__()
        self.basename = basename
        self.max_len = max_len
        self.omit_empty = omit_empty  # "" means unset: no line is written

    def parse_one(self, text: str) -> str:
        if self.basename and "/" in text:
            raise Invalid
        if self.max_len is not None and len(text) > self.max_len:
            raise Invalid
        return text

    def format(self, value: str) -> str:
        return quote_arg(value)

    def lines(self, name: str, value: str) -> list[str]:
        return [] if self.omit_empty and not value else super().lines(name, value)


class SecretType(StringType):
    """A shared secret: empty (none) or at least ``MIN_LEN`` characters, since a
    recorded bus handshake lets an eavesdropper try guesses offline."""

    __slots__ = ()
    MIN_LEN = 16

    def __init__(self) -> None:
        super().__init__(max_len=512, omit_empty=True)

    def parse_one(self, text: str) -> str:
        if 0 < len(text) < self.MIN_LEN:
            raise Invalid(f"cluster-secret must be at least {self.MIN_LEN} characters "
                           "(or empty for none)")
        if len(text) > 512:
            raise Invalid("cluster-secret is longer than 512 characters")
        return text


class UserType(ValueType):
    """``user <name> <rule>...``: repeatable, one user a line (core/acl.py reads the
    rules; here their syntax is checked, the command names once the node has its
    command table)."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(1, None)

    def parse(self, args: Sequence[str]) -> list[str]:
        from .acl import AclError, parse_user

        try:
            parse_user(list(args), None)
        except AclError as e:
            raise Invalid(f"Error in user declaration: {e}") from None
        return list(args)

    def render(self, value: list[list[str]]) -> str:
        return " ".join(u[0] for u in value)  # names only: rules hold password hashes

    def lines(self, name: str, value: list[list[str]]) -> list[str]:
        return [f"{name} " + " ".join(quote_arg(a) for a in u) for u in value]

    def copy(self, value: list[list[str]]) -> list[list[str]]:
        return list(value)


class OctalType(ValueType):
    __slots__ = ("hi",)

    def __init__(self, hi: int) -> None:
        super().__init__()
        self.hi = hi

    def parse_one(self, text: str) -> int:
        if not text or any(c not in "01234567" for c in text):
            raise Invalid
        value = int(text, 8)
        if value > self.hi:
            raise Invalid
        return value

    def render(self, value: int) -> str:
        return format(value, "o")


class TlsProtocolsType(ValueType):
    """``tls-protocols "TLSv1.2 TLSv1.3"``: Redis's one quoted argument naming the
    protocol versions to accept (case-insensitive). They must form a contiguous range,
    because the shell gives OpenSSL a minimum and a maximum version."""

    __slots__ = ()
    VERSIONS = ("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3")

    def parse_one(self, text: str) -> str:
        by_lower = {v.lower(): k for k, v in enumerate(self.VERSIONS)}
        try:
            picked = sorted({by_lower[w.lower()] for w in text.split()})
        except KeyError:
            raise Invalid(
                "Invalid tls-protocols: expected some of " + " ".join(self.VERSIONS)
            ) from None
        if not picked:
            raise Invalid("Invalid tls-protocols: no protocol given")
        if picked != list(range(picked[0], picked[-1] + 1)):
            raise Invalid("Invalid tls-protocols: the versions must be contiguous")
        return " ".join(self.VERSIONS[k] for k in picked)

    def format(self, value: str) -> str:
        return quote_arg(value)


class AddressListType(ValueType):
    __slots__ = ("max_count",)

    def __init__(self, max_count: int) -> None:
        super().__init__(1, None)
        self.max_count = max_count

    def parse(self, args: Sequence[str]) -> list[str]:
        if len(args) > self.max_count:
            raise Invalid("Too many bind addresses specified")
        if not all(args):
            raise Invalid
        return list(args)

    def parse_set(self, value: str) -> list[str]:
        addresses = value.split()
        if not addresses:
            raise Invalid
        return self.parse(addresses)

    def render(self, value: list[str]) -> str:
        return " ".join(value)

    def format(self, value: list[str]) -> str:
        return " ".join(bare_or_quoted(a) for a in value)

    def copy(self, value: list[str]) -> list[str]:
        return list(value)


class OutputBufferLimitType(ValueType):
    __slots__ = ()
    CLASS = "normal"

    def __init__(self) -> None:
        super().__init__(4, 4)

    def parse(self, args: Sequence[str]) -> OutputBufferLimit:
        klass, hard, soft, seconds = args
        if klass.lower() != self.CLASS:
            raise Invalid("Unrecognized client limit class")
        try:
            hard_bytes, soft_bytes = parse_memory(hard), parse_memory(soft)
            soft_seconds = parse_int(seconds)
        except ValueError:
            raise Invalid from None
        if soft_seconds < 0:
            raise Invalid("Negative number of seconds in soft limit is invalid")
        if not (0 <= hard_bytes <= LLONG_MAX and 0 <= soft_bytes <= LLONG_MAX):
            raise Invalid
        if soft_seconds > INT_MAX:
            raise Invalid
        return OutputBufferLimit(hard_bytes, soft_bytes, soft_seconds)

    def parse_set(self, value: str) -> OutputBufferLimit:
        # "<class> <hard> <soft> <seconds>" repeated; all or nothing.
        words = value.split(" ")
        if len(words) % 4:
            raise Invalid
        limits = [self.parse(words[j : j + 4]) for j in range(0, len(words), 4)]
        return limits[-1]

    def render(self, value: OutputBufferLimit) -> str:
        return f"{self.CLASS} {value.hard_bytes} {value.soft_bytes} {value.soft_seconds}"

    def format(self, value: OutputBufferLimit) -> str:
        hard, soft = format_memory(value.hard_bytes), format_memory(value.soft_bytes)
        return f"{self.CLASS} {hard} {soft} {value.soft_seconds}"


class RenameType(ValueType):
    """``rename-command <old> <new>``: repeatable; each line adds a pair.
    An empty ``new`` removes the command. The shell checks that ``old``
    names a real command."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(2, 2)

    def parse(self, args: Sequence[str]) -> tuple[str, str]:
        if not args[0]:
            raise Invalid
        return (args[0].lower(), args[1].lower())

    def render(self, value: list[tuple[str, str]]) -> str:
        return " ".join(f"{old} {new}" for old, new in value)

    def lines(self, name: str, value: list[tuple[str, str]]) -> list[str]:
        return [f"{name} {bare_or_quoted(old)} {quote_arg(new)}" for old, new in value]

    def copy(self, value: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return list(value)
