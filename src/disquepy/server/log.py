"""Redis-style one-line logs: ``pid:M 22 Nov 2026 02:05:27.123 * message``.

Levels map to Redis's marks: debug ``.``, verbose ``-``, notice ``*``, warning ``#``.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable

from ..logformat import VERBOSE as VERBOSE  # (re-exported: the server modules log at it)
from ..logformat import RedisFormatter

LEVELS = {
    "debug": logging.DEBUG,
    "verbose": VERBOSE,
    "notice": logging.INFO,
    "warning": logging.WARNING,
}

log = logging.getLogger("disquepy")


def setup(level: str = "notice", logfile: str = "") -> None:
    handler: logging.Handler
    handler = logging.FileHandler(logfile) if logfile else logging.StreamHandler(sys.stdout)
    handler.setFormatter(RedisFormatter())
    log.handlers[:] = [handler]
    log.propagate = False
    set_level(level)


def syslog_socket() -> str:
    """Where syslog listens: /dev/log, or $DISQUEPY_SYSLOG_SOCKET (e.g. /var/run/syslog)."""
    return os.environ.get("DISQUEPY_SYSLOG_SOCKET", "/dev/log")


def add_syslog(ident: str, facility: str) -> bool:
    """``syslog-enabled yes``: every line to syslog too, as ``ident[pid]: message`` at
    the line's priority. As C's openlog, a syslog not listening is no error: lines sent
    while it is unreachable are dropped (each send tries to reconnect). Returns whether
    it was reachable now."""
    from logging.handlers import SysLogHandler

    class _SysLog(SysLogHandler):
        def handleError(self, record: logging.LogRecord) -> None:
            pass  # syslog down: the line is dropped (not a traceback per line)

    handler = _SysLog(syslog_socket(), SysLogHandler.facility_names[facility])
    handler.ident = f"{ident}[{os.getpid()}]: "
    handler.setFormatter(logging.Formatter("%(message)s"))
    log.handlers.append(handler)
    return handler.socktype is not None


def set_level(level: str) -> None:
    log.setLevel(LEVELS.get(level, logging.INFO))


class RateLimited:
    """One line per event, but at most one per ``key`` every ``interval`` seconds: a
    peer retrying every 100 ms (or an attacker connecting in a loop) must not flood
    the log. A line after a quiet spell says how many were suppressed meanwhile."""

    def __init__(self, logger: logging.Logger, interval: float = 10.0,
                 max_keys: int = 1024, clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.interval = interval
        self.max_keys = max_keys
        self.clock = clock
        self._next: dict[object, float] = {}
        self._suppressed: dict[object, int] = {}

    def log(self, level: int, key: object, fmt: str, *args: object) -> bool:
        """Log ``fmt % args`` at ``level`` unless ``key`` logged less than
        ``interval`` ago; returns whether it did."""
        now = self.clock()
        if now < self._next.get(key, 0.0):
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return False
        if len(self._next) >= self.max_keys and key not in self._next:
            self._next.clear()  # bounded: forget everyone rather than grow
            self._suppressed.clear()
        self._next[key] = now + self.interval
        n = self._suppressed.pop(key, 0)
        if n:
            fmt += " (%d more like this in the last %ds)"
            args = (*args, n, round(self.interval))
        self.logger.log(level, fmt, *args)
        return True

    def warning(self, key: object, fmt: str, *args: object) -> bool:
        return self.log(logging.WARNING, key, fmt, *args)
