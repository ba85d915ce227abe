"""The slow log (``SLOWLOG GET|LEN|RESET``, directives ``slowlog-log-slower-than`` and
``slowlog-max-len``), as Disque keeps it: commands that took at least the threshold, the
newest first, each with an ID, the unix time it ran, its duration in microseconds and its
arguments (at most 32, each at most 128 bytes, the rest said in words). The duration is
measured by the shell (the core reads no clock) and comes in through
``Node.command_took``."""

from __future__ import annotations

from collections import deque
from typing import Final

MAX_ARGC: Final = 32
MAX_ARG_LEN: Final = 128

Entry = tuple[int, int, int, list[bytes]]


class SlowLog:
    __slots__ = ("entries", "next_id")

    def __init__(self) -> None:
        self.entries: deque[Entry] = deque()
        self.next_id = 0

    def record(self, argv: list[bytes], usec: int, now_ms: int, max_len: int) -> None:
        """Log a command that took ``usec`` (the caller checked the threshold)."""
        args: list[bytes] = []
        for i, a in enumerate(argv[:MAX_ARGC]):
            if i == MAX_ARGC - 1 and len(argv) > MAX_ARGC:
                args.append(b"... (%d more arguments)" % (len(argv) - MAX_ARGC + 1))
            elif len(a) > MAX_ARG_LEN:
                args.append(a[:MAX_ARG_LEN] + b"... (%d more bytes)" % (len(a) - MAX_ARG_LEN))
            else:
                args.append(bytes(a))
        self.entries.appendleft((self.next_id, now_ms // 1000, usec, args))
        self.next_id += 1
        self.trim(max_len)

    def trim(self, max_len: int) -> None:
        while len(self.entries) > max(max_len, 0):
            self.entries.pop()

    def newest(self, count: int) -> list[Entry]:
        """The ``count`` newest entries (all of them for a negative count)."""
        if count < 0:
            return list(self.entries)
        return [e for _, e in zip(range(count), self.entries, strict=False)]

    def reset(self) -> None:
        self.entries.clear()
